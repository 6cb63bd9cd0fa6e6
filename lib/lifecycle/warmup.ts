// The warm-up a new process runs before it takes traffic, so its first requests are as fast as
// its thousandth: V8 compiles the hot path only after it has run it (about 1,000 requests), and a
// process that takes traffic cold answers its first streams several times slower. The burst goes
// through throwaway gateways built by the same code (createGateway, the real handler, plugins,
// proxy core and usage tap) against an in-process simulated router, with a store in a temporary
// directory, counters of its own and a synthetic configuration: no row, no counter, no budget and
// no key of the real deployment is touched. The code it warms is the real gateway's: V8 keeps
// compiled code and type feedback per function literal, shared by every closure made from it.
// What V8 learns from one gateway and one kind of client it unlearns at the first real request
// (another gateway's closures, other headers: a deoptimization each), so half the burst goes
// through each of two gateways and the requests take turns among six header sets.

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

/**
 * The header sets the requests take in turn, each in its own order, as different clients send them
 * (an SDK, Claude Code, curl, a front proxy): the header objects the real traffic brings then meet
 * code that has seen several shapes, not code compiled for one shape, which V8 throws away at the
 * first new one (a deoptimization on the first real request, measured with --trace-deopt).
 */
function headersOf(i: number, key: string, length: number): Record<string, string | number> {
  const auth = { authorization: `Bearer ${key}` };
  switch (i % 6) {
    case 0: return { 'content-type': 'application/json', ...auth, 'x-api-key': key, 'content-length': length };
    case 1: return { ...auth, 'content-type': 'application/json', accept: 'application/json', 'user-agent': 'OpenAI/JS 6.0.0', 'x-stainless-retry-count': '0', 'content-length': length };
    case 2: return { 'x-api-key': key, 'anthropic-version': '2023-06-01', 'content-type': 'application/json', 'user-agent': 'claude-cli/2.0.0 (external, cli)', 'content-length': length };
    case 3: return { 'user-agent': 'curl/8.5.0', accept: '*/*', ...auth, 'content-type': 'application/json', 'content-length': length };
    case 4: return { 'x-forwarded-for': '127.0.0.1', 'x-real-ip': '127.0.0.1', 'content-length': length, 'content-type': 'application/json', ...auth };
    default: return { 'content-length': length, ...auth, 'content-type': 'application/json', 'accept-encoding': 'gzip', 'x-request-id': `warm-up-${i}` };
  }
}

function send(agent: http.Agent, port: number, key: string, i: number, close: boolean): Promise<void> {
  const r = requestOf(i);
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: r.path, agent,
      // Every header set meets every route, streamed and not (requestOf turns with i % 6 too).
      headers: { ...headersOf(Math.floor(i / 6), key, Buffer.byteLength(r.body)), ...(close ? { connection: 'close' } : {}) },
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
 * Runs `requests` synthetic requests through two throwaway gateways and tears everything down.
 * Resolves with how many were answered 200 and how long it took; throws only what building the
 * throwaway gateway threw (the caller starts cold then).
 */
export async function warmUp(requests: number): Promise<{ ok: number; ms: number }> {
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), 'sluice-warmup-'));
  const sim = await startSimulatedRouter({ record: false });
  let ok = 0;
  try {
    const config = warmupConfig(sim.url, join(dir, 'config'));
    // Two throwaway gateways, each for half the requests. The real one's closures (its plugins',
    // its proxy's hooks) are other functions than either's: a call site that saw only one
    // gateway's would be compiled for that one function and thrown away at the real one's first
    // call; having seen two of the same code, it is compiled for the code (--trace-deopt).
    const half = Math.ceil(requests / 2);
    ok += await warmOne(config, join(dir, 'store-1'), 0, half);
    ok += await warmOne(config, join(dir, 'store-2'), half, requests);
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return { ok, ms: Math.round(performance.now() - started) };
}

/** Requests `from` to `to` (not included) through a gateway of their own; how many were answered 200. */
async function warmOne(config: Config, dir: string, from: number, to: number): Promise<number> {
  mkdirSync(dir);
  const counters = new MemoryCounters();
  const store = await openStore({ dataDir: dir });
  const agent = new http.Agent({ keepAlive: true, maxSockets: PARALLEL });
  let gateway: Gateway | undefined;
  let ok = 0;
  try {
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
    let next = from;
    const worker = async () => {
      while (next < to) {
        const i = next++;
        try {
          await send(agent, port, key, i, i % NEW_CONNECTION_EVERY === 0);
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
  }
  return ok;
}
