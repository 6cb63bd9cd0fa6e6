// Warm upstream connections for a process about to take traffic: a few keep-alive sockets to each
// router, opened through the agents the proxy core sends requests with, so the first requests after
// a start or a handover reuse them instead of paying a TCP (and on OpenRouter a TLS) handshake
// each. Each socket is opened by a GET of the router's current-key readout (`api/v1/key`: a few
// hundred bytes, no cost, any inference key) with the upstream key of a profile on that router.
// Nothing here throws: a failure only leaves fewer warm sockets.

import http from 'node:http';
import https from 'node:https';
import { withSlash, type Config } from '../config.ts';

export interface Preconnected {
  /** Routers with a profile whose upstream key is set (the others are skipped). */
  routers: number;
  /** Readouts answered 200: each left its socket idle in the pool. */
  sockets: number;
  /** Readouts that failed or were not answered 200 (their sockets may be gone). */
  failed: number;
}

/**
 * Sends `perRouter` readouts at once to each router a profile with an upstream key uses (at once,
 * so each takes a socket of its own), and resolves when all have ended; a readout is given up
 * once its socket has been silent for `timeoutMs`.
 */
export async function preconnect(
  config: Pick<Config, 'routers' | 'profiles'>, upstreamKeys: ReadonlyMap<string, string>,
  agentFor: (url: URL) => http.Agent, perRouter: number, timeoutMs: number,
): Promise<Preconnected> {
  const keyOf = new Map<string, string>();
  for (const p of config.profiles.values()) {
    const key = upstreamKeys.get(p.name);
    if (key !== undefined && !keyOf.has(p.router)) keyOf.set(p.router, key);
  }
  const done: Preconnected = { routers: keyOf.size, sockets: 0, failed: 0 };
  const calls: Promise<void>[] = [];
  for (const [name, key] of keyOf) {
    const url = new URL('api/v1/key', withSlash(config.routers.get(name)!.url));
    for (let i = 0; i < perRouter; i++) calls.push(readout(url, key, agentFor(url), timeoutMs).then((ok) => void (ok ? done.sockets++ : done.failed++)));
  }
  await Promise.all(calls);
  return done;
}

/** One readout through `agent` (the proxy core's, for the URL's protocol); true when answered 200. */
function readout(url: URL, key: string, agent: http.Agent, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    const send = url.protocol === 'https:' ? https.request : http.request;
    const req = send(url, { method: 'GET', agent, headers: { authorization: `Bearer ${key}`, accept: 'application/json' }, timeout: timeoutMs }, (res) => {
      res.resume(); // read to the end, so the socket goes back to the pool
      res.once('end', () => resolve(res.statusCode === 200));
      res.once('error', () => resolve(false));
    });
    req.once('timeout', () => req.destroy(new Error('timed out')));
    req.once('error', () => resolve(false));
    req.end();
  });
}
