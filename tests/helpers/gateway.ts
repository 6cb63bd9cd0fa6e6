// The end-to-end harness: the simulated router and a real gateway in this process, both on port
// 0, a temporary configuration pointing at the sim, a fresh store (SQLite or Postgres), captured
// log lines, a settable clock, and helpers to mint keys and wait for request rows (on events,
// never on sleeps). Every server it starts is closed by t.teardown right after it is created.

import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { createKey } from './keys.ts';
import { loadConfig, type Config } from '../../lib/config.ts';
import type { Counters } from '../../lib/counters/counters.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { createGateway, type Gateway } from '../../lib/server.ts';
import { readSettings } from '../../lib/settings.ts';
import { readTraceSettings } from '../../lib/trace/settings.ts';
import { startSimulatedRouter, type SimulatedRouter } from '../../lib/sim/index.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow, Store } from '../../lib/store/store.ts';
import { freshPostgresUrl } from './postgres.ts';
import type { Test } from 'tap';

export const UPSTREAM_KEYS: Record<string, string> = {
  dev: 'sk-or-v1-devdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdev0',
  assistant: 'sk-or-v1-asstasstasstasstasstasstasstasstasstasstasstasstasstasst01',
  tiny: 'sk-or-v1-tinytinytinytinytinytinytinytinytinytinytinytinytinytiny02',
};

/** profiles.yaml for the sim at `url`: dev (default tier agent), assistant (fast), tiny (a tiny budget), nokey (no upstream key). */
export function profilesYaml(url: string, extra = ''): string {
  return `routers:
  sim:
    url: ${url}
profiles:
  dev:
    default_tier: agent
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
  assistant:
    default_tier: fast
    router: sim
    budget: { daily_usd: 3, monthly_usd: 40 }
  tiny:
    default_tier: fast
    router: sim
    budget: { daily_usd: 0.001, monthly_usd: 0.02 }
  nokey:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1, monthly_usd: 10 }
${extra}`;
}

export const TIERS_YAML = `tiers:
  fast:
    model: google/gemini-2.5-flash
    fallbacks: [openai/gpt-4.1-mini]
    price: { input_per_mtok: 0.30, output_per_mtok: 2.50 }
    max_output_tokens: 8192
  agent:
    model: anthropic/claude-sonnet-4.5
    fallbacks: [openai/gpt-5]
    price: { input_per_mtok: 3.00, output_per_mtok: 15.00 }
    max_output_tokens: 32000
  reasoning:
    model: google/gemini-2.5-pro
    price: { input_per_mtok: 1.25, output_per_mtok: 10.00 }
    max_output_tokens: 100000
auto:
  decision_model: google/gemini-2.5-flash-lite
  ladder: [fast, agent, reasoning]
  session_ttl_minutes: 60
  decision_timeout_ms: 2000
`;

export interface HarnessOptions {
  store?: 'sqlite' | 'postgres';
  counters?: Counters;
  /** Extra profiles.yaml text appended under `profiles:` (indent two spaces). */
  extraProfiles?: string;
  /** SLUICE_* variables on top of the harness's own (upstream keys, ring-1 loops off), read by readSettings; OTEL_* ones too, read by readTraceSettings (tracing is off without an endpoint). */
  env?: Record<string, string>;
  upstreamTimeoutMs?: number;
  bodyTimeoutMs?: number;
  /** How long a drain spreads its `connection: close` (the server's DRAIN_SPREAD_MS; 0 here by default: all at once). */
  drainSpreadMs?: number;
  /** How long a drain keeps idle connections (the server's DRAIN_IDLE_MS; 50 ms here by default). */
  drainIdleMs?: number;
  /** Start the clock here (ms since the epoch); the harness clock is settable. */
  clockStart?: number;
}

export interface Harness {
  url: string;
  sim: SimulatedRouter;
  gateway: Gateway;
  store: Store;
  config: Config;
  dataDir: string;
  configDir: string;
  /** Every log line the gateway wrote, parsed. */
  logs: Array<Record<string, any>>;
  /** Raw log text, for secret scans. */
  logText: () => string;
  clock: { now: number };
  /** Creates a key through the same code as `sluice keys create` and returns it. */
  key(profile?: string, opts?: { name?: string; expires?: string; ip?: string[] }): Promise<string>;
  /** Resolves once `count` rows have been recorded in all, then returns every stored row, newest first. */
  rows(count: number): Promise<RequestRow[]>;
  rowCount(): number;
}

let keySeq = 0;

/** The simulated router, a configuration directory pointing at it and an empty data directory, all removed at teardown. */
export async function startSimWithConfig(t: Test, extraProfiles?: string) {
  const sim = await startSimulatedRouter({ provisioningKey: 'sk-or-v1-provisioning' });
  t.teardown(() => sim.close());
  const configDir = mkdtempSync(join(tmpdir(), 'sluice-cfg-'));
  const dataDir = mkdtempSync(join(tmpdir(), 'sluice-data-'));
  t.teardown(() => {
    rmSync(configDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  });
  writeFileSync(join(configDir, 'profiles.yaml'), profilesYaml(sim.url, extraProfiles));
  writeFileSync(join(configDir, 'tiers.yaml'), TIERS_YAML);
  return { sim, configDir, dataDir, config: loadConfig(configDir) };
}

export async function startHarness(t: Test, opts: HarnessOptions = {}): Promise<Harness> {
  const { sim, configDir, dataDir, config } = await startSimWithConfig(t, opts.extraProfiles);
  const store = await openStore(opts.store === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir } : { dataDir });
  t.teardown(() => store.close());
  const counters = opts.counters ?? new MemoryCounters();
  if (!opts.counters) t.teardown(() => counters.close());
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const log = createLogger('debug', sink);
  const clock = { now: opts.clockStart ?? Date.now() };
  const env: Record<string, string> = {
    SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev,
    SLUICE_UPSTREAM_KEY_ASSISTANT: UPSTREAM_KEYS.assistant,
    SLUICE_UPSTREAM_KEY_TINY: UPSTREAM_KEYS.tiny,
    // ring 1's background loops call the router on their own: off unless a test turns them on.
    SLUICE_USAGE_REFRESH_S: '0',
    SLUICE_RECONCILE_POLL_S: '0',
    ...opts.env,
  };
  const gateway = await createGateway({
    config, store, counters, log, dataDir, now: () => clock.now, bodyTimeoutMs: opts.bodyTimeoutMs,
    // A teardown's drain need not wait for idle keep-alive connections (tests/e2e/drain.test.ts holds the real one).
    drainSpreadMs: opts.drainSpreadMs ?? 0,
    drainIdleMs: opts.drainIdleMs ?? 50,
    // A timeout shorter than a second (SLUICE_UPSTREAM_TIMEOUT_S's unit) goes in past the reader.
    settings: Object.freeze({ ...readSettings(env), ...(opts.upstreamTimeoutMs === undefined ? {} : { upstreamTimeoutMs: opts.upstreamTimeoutMs }) }),
    trace: readTraceSettings(env),
  });
  const addr = await gateway.listen('127.0.0.1', 0);
  t.teardown(() => gateway.close(1000));
  const recorder = gateway.deps.recorder;
  let recorded = 0;
  recorder.events.on('row', () => recorded++);

  return {
    url: `http://127.0.0.1:${addr.port}`,
    sim, gateway, store, config, dataDir, configDir, clock,
    get logs() {
      return lines.map((l) => JSON.parse(l) as Record<string, any>);
    },
    logText: () => lines.join('\n'),
    key: (profile = 'dev', o = {}) => createKey(store, config, { profile, name: o.name ?? `k${++keySeq}`, expires: o.expires, ip: o.ip }, clock.now),
    async rows(count) {
      while (recorded < count) await once(recorder.events, 'row');
      await recorder.flush();
      return store.listRequests(1000);
    },
    rowCount: () => recorded,
  };
}
