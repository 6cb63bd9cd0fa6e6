// The warm-up a new process runs before it takes traffic, so its first requests are as fast as
// its thousandth: V8 compiles the hot path only after it has run it (about 1,000 requests), and a
// process that takes traffic cold answers its first streams several times slower. The burst goes
// through a throwaway gateway built by the same code (createGateway, the real handler, plugins,
// proxy core and usage tap) against an in-process simulated router, with a store in a temporary
// directory, counters of its own and a synthetic configuration: no row, no counter, no budget and
// no key of the real deployment is touched. The code it warms is the real gateway's: V8 keeps
// compiled code and type feedback per function literal, shared by every closure made from it.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../config.ts';
import { MemoryCounters } from '../counters/memory.ts';
import { displayPrefix, generateKey, hashKey, parseKey } from '../keys.ts';
import { createLogger } from '../log.ts';
import { startSimulatedRouter } from '../sim/index.ts';
import { createGateway, type Gateway } from '../server.ts';
import { readSettings } from '../settings.ts';
import { openStore } from '../store/open.ts';

const PROFILE = 'warmup';
const UPSTREAM_KEY = 'sk-or-v1-warmup';
/** Requests in flight at once during the warm-up. */
const PARALLEL = 8;
/**
 * One request in this many closes its connection, so the next opens a new one: a handover moves
 * every client connection to the new process at once, and accepting them is hot path too.
 */
const NEW_CONNECTION_EVERY = 4;

/**
 * A configuration of one profile with room for every request, and tiers the simulated router
 * serves, read from files by the same loader as the real one: its objects then have the shapes the
 * real configuration's have, and the code compiled for them fits the real requests that follow.
 */
function warmupConfig(routerUrl: string, dir: string): Config {
  mkdirSync(dir);
  writeFileSync(join(dir, 'profiles.yaml'), `routers:
  sim:
    url: ${routerUrl}
profiles:
  ${PROFILE}:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1000000000, monthly_usd: 1000000000 }
    rate_limits: { per_key_per_minute: 1000000000, per_user_per_minute: 1000000000 }
`);
  writeFileSync(join(dir, 'tiers.yaml'), `tiers:
  fast:
    model: google/gemini-2.5-flash
    fallbacks: [openai/gpt-4.1-mini]
    price: { input_per_mtok: 1, output_per_mtok: 2 }
    max_output_tokens: 8192
  agent:
    model: anthropic/claude-sonnet-4.5
    price: { input_per_mtok: 1, output_per_mtok: 2 }
    max_output_tokens: 32000
auto:
  decision_model: google/gemini-2.5-flash-lite
  ladder: [fast, agent]
  session_ttl_minutes: 60
  decision_timeout_ms: 2000
`);
  return loadConfig(dir);
}

/** The i-th request of the burst: the three dialects, streamed and not, with a system turn and tools now and then. */
function requestOf(i: number): { path: string; body: string } {
  const stream = i % 2 === 0;
  const user = { role: 'user', content: `warm-up ${i}` };
  switch (i % 3) {
    case 0:
      return { path: '/v1/chat/completions', body: JSON.stringify({ model: 'sluice/fast', stream, messages: [{ role: 'system', content: 'be brief' }, user], max_tokens: 64 }) };
    case 1:
      return {
        path: '/v1/messages',
        body: JSON.stringify({
          model: 'claude-sonnet-4-5', stream, max_tokens: 64, system: [{ type: 'text', text: 'be brief' }], messages: [user],
          ...(i % 4 === 1 ? { tools: [{ name: 'read', input_schema: { type: 'object' }, strict: true }] } : {}),
        }),
      };
    default:
      return { path: '/v1/responses', body: JSON.stringify({ model: 'sluice/agent', stream, input: [user], max_output_tokens: 64, store: false }) };
  }
}

function send(agent: http.Agent, port: number, key: string, r: { path: string; body: string }, close: boolean): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: r.path, agent,
      headers: {
        'content-type': 'application/json', authorization: `Bearer ${key}`, 'x-api-key': key, 'content-length': Buffer.byteLength(r.body),
        ...(close ? { connection: 'close' } : {}),
      },
    }, (res) => {
      res.resume();
      res.once('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`warm-up request answered ${res.statusCode}`))));
      res.once('error', reject);
    });
    req.once('error', reject);
    req.end(r.body);
  });
}

/**
 * Runs `requests` synthetic requests through a throwaway gateway and tears everything down.
 * Resolves with how many were answered 200 and how long it took; throws only what building the
 * throwaway gateway threw (the caller starts cold then).
 */
export async function warmUp(requests: number): Promise<{ ok: number; ms: number }> {
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'sluice-warmup-'));
  const sim = await startSimulatedRouter({ record: false });
  const counters = new MemoryCounters();
  const store = await openStore({ dataDir: dir });
  const agent = new http.Agent({ keepAlive: true, maxSockets: PARALLEL });
  let gateway: Gateway | undefined;
  let ok = 0;
  try {
    const config = warmupConfig(sim.url, join(dir, 'config'));
    const settings = {
      ...readSettings({}), upstreamKeyVars: { SLUICE_UPSTREAM_KEY_WARMUP: UPSTREAM_KEY }, usageRefreshMs: 0, reconcilePollMs: 0, dataDir: dir,
    };
    const key = generateKey(PROFILE);
    await store.createKey({
      key_hash: hashKey(key), prefix: displayPrefix(PROFILE, parseKey(key)!.token), profile: PROFILE, name: 'warm-up',
      ip_allow: '', created_at: new Date().toISOString(), expires_at: null,
    });
    gateway = await createGateway({ config, store, counters, log: createLogger('silent'), settings, dataDir: dir, drainSpreadMs: 0, drainIdleMs: 0 });
    const { port } = await gateway.listen('127.0.0.1', 0);
    let next = 0;
    const worker = async () => {
      while (next < requests) {
        const i = next++;
        try {
          await send(agent, port, key, requestOf(i), i % NEW_CONNECTION_EVERY === 0);
          ok++;
        } catch {
          // A failed warm-up request warms less; it never stops the start.
        }
      }
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
  } finally {
    agent.destroy();
    await gateway?.close(0);
    await counters.close();
    await store.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return { ok, ms: Math.round(performance.now() - started) };
}
