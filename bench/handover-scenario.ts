// The handover scenario, shared by its CI form (tests/e2e/handover.test.ts) and its full form
// (bench/handover.ts, `npm run bench:handover`): the upgrade as it runs in production. A holder
// plays sluice.socket (tests/helpers/socket-holder.ts); generations of `sluice serve`, on the
// embedded store in one data directory, with the unit's node flags and environment, take turns on
// it: A→B→C→D, each time start the next, wait for its ready line, SIGTERM the one before, which
// drains beside it. The traffic (bench/handover-load.ts) runs all along, long streams are opened
// before each handover and during the overlap, and a key allowed 60 requests a minute is used 59
// times before the first handover and twice after it. This file drives the run and returns what
// happened, raw; bench/handover-report.ts judges and prints it. Every process and directory it
// creates is gone when it returns or throws.
//
// A negative control changes how the scenario drives the server, not the server (HANDOVER_CONTROL,
// read by both callers): `serial` stops the old generation and waits for its exit before starting
// the next (systemctl restart), `hurry` sends a second signal as soon as the drain begins (streams
// cut), `kill` SIGKILLs the old generation (errors, lost rows, the limit not carried).

import http from 'node:http';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { setTimeout as delay } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../lib/config.ts';
import { openStore } from '../lib/store/open.ts';
import { profilesYaml, TIERS_YAML, UPSTREAM_KEYS } from '../tests/helpers/gateway.ts';
import { createKey } from '../tests/helpers/keys.ts';
import { startSocketHolder, type Exit, type Generation } from '../tests/helpers/socket-holder.ts';
import { serveNodeFlags } from './unit-flags.ts';
import { longSim, MODEL, reference, SHORT_SIM, Traffic, type Reference, type Sample } from './handover-load.ts';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const MERGED = 'counters merged from the previous process';
export const DRAINING = 'draining: no new connections; open streams may finish';
/** The profile whose key is used 59 times before the first handover: 60 a minute. */
export const LIMIT_PER_MINUTE = 60;
export const LIMIT_RUN = 'limit';

const UPSTREAM_BULK = 'sk-or-v1-bulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulk04';
const UPSTREAM_LIMITED = 'sk-or-v1-limitlimitlimitlimitlimitlimitlimitlimitlimitlimitlimit05';
/** Times every load connection closes and reopens before the first handover (Traffic.reconnect). */
const RECONNECT_ROUNDS = 5;
const PROFILES = `  bulk:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1000000, monthly_usd: 10000000 }
    rate_limits: { per_key_per_minute: 100000000, per_user_per_minute: 100000000 }
  limited:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1000, monthly_usd: 10000 }
    rate_limits: { per_key_per_minute: ${LIMIT_PER_MINUTE}, per_user_per_minute: 100000 }
`;

export const CONTROLS = ['none', 'serial', 'hurry', 'kill'] as const;
export type Control = (typeof CONTROLS)[number];

/** HANDOVER_CONTROL, checked: the negative control to run, or 'none'. */
export function controlFromEnv(env: NodeJS.ProcessEnv = process.env): Control {
  const v = env.HANDOVER_CONTROL ?? 'none';
  if (!(CONTROLS as readonly string[]).includes(v)) throw new Error(`HANDOVER_CONTROL must be one of ${CONTROLS.join(', ')}, got "${v}"`);
  return v as Control;
}

export interface ScenarioOptions {
  /** The simulated router, http://host:port. */
  routerOrigin: string;
  chatRate: number;
  connections: number;
  shortRate: number;
  /** Long streams opened before each handover, and during each overlap. */
  longBefore: number;
  longOverlap: number;
  /** Content events of a long stream, one a second. */
  longChunks: number;
  /** Load before each next generation is started, and after each old one is sent SIGTERM (ms). */
  beforeMs: number;
  afterMs: number;
  handovers: number;
  /**
   * Chat requests sent at once over the pool as the old generation is sent SIGTERM: they meet its
   * drain on connections it may be closing, the race a hard close turns into resets.
   */
  burstAtTerm: number;
  graceS: number;
  control: Control;
  log: (msg: string) => void;
  /** Each generation as it is started (the bench registers its process for cleanup). */
  onGeneration?: (g: Generation) => void;
  /** Makes a temporary directory (default mkdtemp; the bench's registers it for cleanup); removed at the end either way. */
  makeDir?: (tag: string) => string;
}

export interface HandoverTimes {
  from: string;
  to: string;
  /** performance.now() stamps: the next generation spawned, ready; the old one signalled; the new one merged its counters. */
  spawnAt: number;
  readyAt: number;
  termAt: number;
  mergedAt?: number;
}

export interface GenerationResult {
  name: string;
  pid: number;
  exit: Exit | undefined;
  signals: string[];
  termAt?: number;
  ready: Record<string, any>;
}

export interface StoredRow {
  id: string;
  run: string | null;
  generation_id: string | null;
  status: number;
  outcome: string;
  input_tokens: number;
  output_tokens: number;
  cost_usd: number;
}

export interface LimitResult {
  /** Statuses of the 59 requests before the first handover, of the 60th and the 61st after it. */
  first59: number[];
  sixtieth: number;
  sixtyFirst: number;
}

export interface HandoverRun {
  control: Control;
  samples: Sample[];
  shed: number;
  /** Long streams the scenario opened (every one must end in a sample). */
  longOpened: number;
  handovers: HandoverTimes[];
  generations: GenerationResult[];
  limit: LimitResult;
  rows: StoredRow[];
  references: { short: Reference; long: Reference };
  startedAt: number;
  endedAt: number;
}


/** One chat request on a connection of its own (agent: false): its status. */
function requestOnNewConnection(origin: string, key: string): Promise<number> {
  const body = JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] });
  const u = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: u.hostname, port: u.port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-sluice-run': LIMIT_RUN },
    }, (res) => {
      res.resume();
      res.once('end', () => resolve(res.statusCode ?? 0));
      res.once('error', reject);
    });
    req.once('error', reject);
    req.end(body);
  });
}

function readRows(dataDir: string): StoredRow[] {
  const db = new DatabaseSync(join(dataDir, 'sluice.db'), { readOnly: true });
  try {
    return db.prepare('SELECT id, run, generation_id, status, outcome, input_tokens, output_tokens, cost_usd FROM requests').all() as unknown as StoredRow[];
  } finally {
    db.close();
  }
}

/** Resolves with the exit, or undefined if it has not come within `ms`. */
async function exitWithin(g: Generation, ms: number): Promise<Exit | undefined> {
  const ac = new AbortController();
  const timeout = delay(ms, undefined, { signal: ac.signal }).catch(() => undefined);
  const exit = await Promise.race([g.exited, timeout]);
  ac.abort();
  return exit;
}

export async function runHandoverScenario(o: ScenarioOptions): Promise<HandoverRun> {
  if (!Number.isInteger(o.handovers) || o.handovers < 1 || o.handovers > 9) throw new Error(`handovers must be 1 to 9 (generations A to J), got ${o.handovers}`);
  const makeDir = o.makeDir ?? ((tag: string) => mkdtempSync(join(tmpdir(), `sluice-handover-${tag}-`)));
  const configDir = makeDir('cfg');
  const dataDir = makeDir('data');
  writeFileSync(join(configDir, 'profiles.yaml'), profilesYaml(o.routerOrigin, PROFILES));
  writeFileSync(join(configDir, 'tiers.yaml'), TIERS_YAML);
  // The keys exist before the first generation starts, minted by the code of `sluice keys create`.
  const store = await openStore({ dataDir });
  const config = loadConfig(configDir);
  const bulkKey = await createKey(store, config, { profile: 'bulk', name: 'load' });
  const limitedKey = await createKey(store, config, { profile: 'limited', name: 'limited' });
  await store.close();

  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_') && !k.startsWith('LISTEN_') && k !== 'RUNTIME_DIRECTORY'));
  const env: NodeJS.ProcessEnv = {
    ...base,
    // As the unit sets them (systemd/sluice@.service), plus the router's keys and the test's data.
    NODE_ENV: 'production', SLUICE_CONFIG_DIR: configDir, SLUICE_DATA_DIR: dataDir,
    // Used only if the inherited socket were ignored: a port of its own, which the ready line would show.
    SLUICE_LISTEN: '127.0.0.1:0',
    SLUICE_LOG_LEVEL: 'info', SLUICE_TRUSTED_PROXIES: '127.0.0.1', SLUICE_SHUTDOWN_GRACE_S: String(o.graceS),
    SLUICE_USAGE_REFRESH_S: '0', SLUICE_RECONCILE_POLL_S: '0',
    SLUICE_UPSTREAM_KEY_BULK: UPSTREAM_BULK, SLUICE_UPSTREAM_KEY_LIMITED: UPSTREAM_LIMITED,
    SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev, SLUICE_UPSTREAM_KEY_ASSISTANT: UPSTREAM_KEYS.assistant, SLUICE_UPSTREAM_KEY_TINY: UPSTREAM_KEYS.tiny,
  };
  const holder = await startSocketHolder({ argv: [process.execPath, ...serveNodeFlags(), join(ROOT, 'cli/sluice.ts'), 'serve'], cwd: ROOT });
  const generations: Generation[] = [];
  const termAt = new Map<Generation, number>();
  const readies = new Map<Generation, Record<string, any>>();
  // The router's own bytes for each kind of stream, asked directly while the run goes on.
  const refs = Promise.all([reference(o.routerOrigin, UPSTREAM_BULK, SHORT_SIM), reference(o.routerOrigin, UPSTREAM_BULK, longSim(o.longChunks))]);
  refs.catch(() => {});
  let traffic: Traffic | undefined;
  try {
    const start = async (name: string): Promise<Generation> => {
      const g = holder.spawnGeneration(env, name);
      generations.push(g);
      o.onGeneration?.(g);
      const ready = await g.ready;
      if (ready.socket !== 'systemd') throw new Error(`${name} did not listen on the inherited socket: ${JSON.stringify(ready)}`);
      readies.set(g, ready);
      o.log(`${name} (pid ${g.pid}) ready`);
      return g;
    };
    const signal = (g: Generation, sig: NodeJS.Signals) => {
      if (!termAt.has(g)) termAt.set(g, performance.now());
      g.signal(sig);
    };
    const names = 'ABCDEFGHIJ';
    const startedAt = performance.now();
    let current = await start('A');
    traffic = new Traffic({
      origin: holder.origin, key: bulkKey, chatRate: o.chatRate, connections: o.connections, shortRate: o.shortRate,
      longChunks: o.longChunks, maxInFlight: 4 * o.connections + 4 * (o.longBefore + o.longOverlap) * o.handovers + 1000,
    });
    traffic.start();
    await traffic.reconnect(RECONNECT_ROUNDS);
    const handovers: HandoverTimes[] = [];
    const limit: LimitResult = { first59: [], sixtieth: 0, sixtyFirst: 0 };
    let longOpened = 0;
    const openLong = (n: number) => {
      longOpened += n;
      return traffic!.long(n);
    };
    for (let i = 0; i < o.handovers; i++) {
      const phase = performance.now();
      await openLong(o.longBefore);
      if (i === 0) {
        for (let n = 0; n < LIMIT_PER_MINUTE - 1; n++) limit.first59.push(await requestOnNewConnection(holder.origin, limitedKey));
      }
      await delay(Math.max(0, phase + o.beforeMs - performance.now()));
      const old = current;
      const name = names[i + 1]!;
      const h: HandoverTimes = { from: old.name, to: name, spawnAt: performance.now(), readyAt: NaN, termAt: NaN };
      o.log(`handover ${i + 1}: ${old.name} → ${name}${o.control === 'none' ? '' : ` (control: ${o.control})`}`);
      if (o.control === 'serial') {
        h.termAt = performance.now();
        traffic.burst(o.burstAtTerm);
        signal(old, 'SIGTERM');
        await old.exited;
        h.spawnAt = performance.now();
        current = await start(name);
        h.readyAt = performance.now();
      } else {
        current = await start(name);
        h.readyAt = performance.now();
        await openLong(o.longOverlap); // both accept now: these land on either
        const mark = current.lines.length;
        h.termAt = performance.now();
        traffic.burst(o.burstAtTerm);
        if (o.control === 'kill') {
          signal(old, 'SIGKILL');
        } else {
          signal(old, 'SIGTERM');
          if (o.control === 'hurry') {
            await old.waitForLine((l) => l.msg === DRAINING);
            signal(old, 'SIGINT');
          }
          // The old one wrote its counts as its drain began; the new one has them once it logs this.
          await current.waitForLine((l) => l.msg === MERGED && l.from === old.pid, { from: mark });
          h.mergedAt = performance.now();
        }
      }
      if (i === 0) {
        // New connections, so only the new generation can take them (the old one no longer accepts).
        limit.sixtieth = await requestOnNewConnection(holder.origin, limitedKey);
        limit.sixtyFirst = await requestOnNewConnection(holder.origin, limitedKey);
      }
      handovers.push(h);
      await delay(Math.max(0, h.termAt + o.afterMs - performance.now()));
    }
    o.log('load stopped; waiting for the last streams');
    await traffic.stop();
    signal(current, 'SIGTERM');
    const results: GenerationResult[] = [];
    for (const g of generations) {
      const exit = await exitWithin(g, (o.graceS + 60) * 1000);
      if (!exit) o.log(`${g.name} (pid ${g.pid}) did not exit within the grace and a minute`);
      results.push({ name: g.name, pid: g.pid, exit, signals: [...g.signals], termAt: termAt.get(g), ready: readies.get(g) ?? {} });
    }
    await holder.close();
    const [short, long] = await refs;
    return {
      control: o.control, samples: traffic.samples, shed: traffic.shed, longOpened, handovers, generations: results, limit,
      rows: readRows(dataDir), references: { short, long }, startedAt, endedAt: performance.now(),
    };
  } finally {
    // On a failure: the generations go first, so streams still open end now instead of running on.
    await holder.close();
    if (traffic) await traffic.stop().catch(() => {});
    rmSync(configDir, { recursive: true, force: true });
    rmSync(dataDir, { recursive: true, force: true });
  }
}
