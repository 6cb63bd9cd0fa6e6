// The warm-up a new process runs before it takes traffic, so its first requests are as fast as
// its thousandth: V8 compiles the hot path only after it has run it (about 1,000 requests), and a
// process that takes traffic cold answers its first streams several times slower. The burst goes
// through throwaway gateways built by the same code (createGateway, the real handler, plugins,
// proxy core and usage tap) against an in-process simulated router, with a store in a temporary
// directory, counters of its own and a synthetic configuration, under the deployment's settings
// (its trusted proxies, timeouts and connection caps take the same paths): no row, no counter, no
// budget and no key of the real deployment is touched. The code it warms is the real gateway's: V8 keeps
// compiled code and type feedback per function literal, shared by every closure made from it.
// What V8 learns from one gateway and one kind of client it unlearns at the first real request
// (another gateway's closures, other headers, other bodies: a deoptimization each), so half the
// burst goes through each of two gateways, the requests take turns among six header sets, and
// their bodies differ the way clients' do.

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
import type { Settings } from '../settings.ts';
import { openStore } from '../store/open.ts';

const PROFILE = 'warmup';
const UPSTREAM_KEY = 'sk-or-v1-warmup';
/** Requests in flight at once during the warm-up. */
const PARALLEL = 8;
/** The throwaway gateways' drain: a spread of a few steps, then no idle time, within this grace. */
const DRAIN_SPREAD_MS = 20;
const DRAIN_GRACE_MS = 5_000;
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

/**
 * The i-th request of the burst: the three dialects, streamed, not streamed and silent on it, the
 * model as a tier alias, as the router's own id or as a Claude name, the members in more than one
 * order, with a system turn, tools, a user and metadata now and then. A body's members make its
 * hidden class: code that has met one layout only is thrown away at the first real body of
 * another (--trace-deopt), and real clients differ most in what they leave out and where.
 */
function requestOf(i: number): { path: string; body: string } {
  const v = Math.floor(i / 3);
  const stream = v % 3 === 0 ? { stream: true } : v % 3 === 1 ? { stream: false } : {};
  const user = { role: 'user', content: `warm-up ${i}` };
  switch (i % 3) {
    case 0: {
      const model = v % 2 === 0 ? 'sluice/fast' : 'google/gemini-2.5-flash';
      const messages = v % 4 < 2 ? [{ role: 'system', content: 'be brief' }, user] : [user];
      const body = v % 5 < 2 ? { model, ...stream, messages, max_tokens: 64 } : { messages, model, max_tokens: 64, ...(v % 5 === 2 ? { user: `dev-${v % 7}` } : {}), ...stream };
      return { path: '/v1/chat/completions', body: JSON.stringify(body) };
    }
    case 1: {
      const model = v % 2 === 0 ? 'claude-sonnet-4-5' : 'sluice/agent';
      const tools = v % 4 === 1 ? { tools: [{ name: 'read', input_schema: { type: 'object' }, strict: true }] } : {};
      const body = v % 5 < 3
        ? { model, max_tokens: 64, ...stream, system: [{ type: 'text', text: 'be brief' }], messages: [user], ...tools }
        : { model, messages: [user], ...tools, ...(v % 5 === 3 ? { metadata: { user_id: `user_${v % 7}` } } : {}), max_tokens: 64, ...stream };
      return { path: '/v1/messages', body: JSON.stringify(body) };
    }
    default: {
      const model = v % 2 === 0 ? 'sluice/agent' : 'openai/gpt-4.1-mini';
      const body = v % 5 < 3 ? { model, ...stream, input: [user], max_output_tokens: 64, store: false } : { model, input: `warm-up ${i}`, ...stream, store: false };
      return { path: '/v1/responses', body: JSON.stringify(body) };
    }
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
export async function warmUp(requests: number, deployment: Settings): Promise<{ ok: number; ms: number }> {
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
    ok += await warmOne(config, deployment, join(dir, 'store-1'), 0, half);
    ok += await warmOne(config, deployment, join(dir, 'store-2'), half, requests);
  } finally {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return { ok, ms: Math.round(performance.now() - started) };
}

/**
 * The drain's path, run while requests come in: a draining process tells its connections
 * `connection: close` (its request listener's other branch, setHeader, node's closing of a kept-alive
 * connection after the response, the spread's steps). Code no request ran before is compiled without
 * it, and a real drain would throw it away and compile it again (--trace-deopt) at the moment the
 * old process still carries its full load and the new one takes its first requests, both on the same
 * cores. Requests in flight as the drain begins, then one more on each connection still open; those
 * on a connection already closed are refused (the listening handle is gone), as they would be.
 */
async function drainAnswering(gateway: Gateway, agent: http.Agent, port: number, key: string, first: number): Promise<void> {
  const round = (at: number) => Promise.all(Array.from({ length: PARALLEL }, (_, k) => send(agent, port, key, at + k, false).catch(() => {})));
  const during = round(first);
  const closing = gateway.close(DRAIN_GRACE_MS);
  await during;
  await round(first + PARALLEL);
  await closing;
}

/** A connection cap (0: none) raised, if need be, to let the warm-up's connections in. */
const roomFor = (cap: number) => (cap === 0 ? 0 : Math.max(cap, 2 * PARALLEL));

/** Requests `from` to `to` (not included) through a gateway of their own; how many were answered 200. */
async function warmOne(config: Config, deployment: Settings, dir: string, from: number, to: number): Promise<number> {
  mkdirSync(dir);
  const counters = new MemoryCounters();
  const store = await openStore({ dataDir: dir });
  const agent = new http.Agent({ keepAlive: true, maxSockets: PARALLEL });
  let gateway: Gateway | undefined;
  let ok = 0;
  try {
    // The deployment's own settings (its trusted proxies, timeouts and connection caps take the
    // same paths), but this gateway's key, store and directory, and none of ring 1's loops.
    const settings: Settings = {
      ...deployment, upstreamKeyVars: { SLUICE_UPSTREAM_KEY_WARMUP: UPSTREAM_KEY }, usageRefreshMs: 0, reconcilePollMs: 0, dataDir: dir,
      maxPerAddress: roomFor(deployment.maxPerAddress), maxConnections: roomFor(deployment.maxConnections),
    };
    const key = generateKey(PROFILE);
    await store.createKey({
      key_hash: hashKey(key), prefix: displayPrefix(PROFILE, parseKey(key)!.token), profile: PROFILE, name: 'warm-up',
      ip_allow: '', created_at: new Date().toISOString(), expires_at: null,
    });
    gateway = await createGateway({ config, store, counters, log: createLogger('silent'), settings, dataDir: dir, drainSpreadMs: DRAIN_SPREAD_MS, drainIdleMs: 0 });
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
    await drainAnswering(gateway, agent, port, key, to);
  } finally {
    agent.destroy();
    await gateway?.close(0);
    await counters.close();
    await store.close();
  }
  return ok;
}
