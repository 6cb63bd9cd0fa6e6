// Warm upstream sockets before traffic (lib/proxy/preconnect.ts): a starting process opens its
// keep-alive pool to each router with the current-key readout, the first request reuses one of
// those sockets, and a router that refuses or never answers costs the start a bounded wait only.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import type { Config } from '../../../lib/config.ts';
import { preconnect } from '../../../lib/proxy/preconnect.ts';
import { PRECONNECT_SOCKETS } from '../../../lib/server.ts';
import { startHarness, UPSTREAM_KEYS } from '../../helpers/gateway.ts';

t.test('the pool holds PRECONNECT_SOCKETS idle sockets to the router, each opened by a readout with a profile\'s key; a request reuses one', async (t) => {
  const h = await startHarness(t);
  const before = h.sim.received.length;
  t.strictSame(await h.gateway.preconnect(), { routers: 1, sockets: PRECONNECT_SOCKETS, failed: 0 });
  const readouts = h.sim.received.slice(before);
  t.equal(readouts.length, PRECONNECT_SOCKETS);
  t.ok(readouts.every((r) => r.method === 'GET' && r.path === '/api/v1/key'), 'the current-key readout');
  t.ok(readouts.every((r) => Object.values(UPSTREAM_KEYS).includes(String(r.headers.authorization).replace(/^Bearer /, ''))), 'with an upstream key of a profile');
  t.strictSame(h.gateway.upstreamSockets(), { active: 0, idle: PRECONNECT_SOCKETS });

  const key = await h.key('dev');
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200);
  await res.text();
  await h.rows(1);
  t.strictSame(h.gateway.upstreamSockets(), { active: 0, idle: PRECONNECT_SOCKETS }, 'no new socket: one of the warm ones served it');
});

function config(url: string): Pick<Config, 'routers' | 'profiles'> {
  const profile = (name: string, router: string) => ({ name, router, default_tier: 'fast', budget: { daily_usd: 1, monthly_usd: 1 } });
  return {
    routers: new Map([['r', { name: 'r', url: new URL(url) }], ['other', { name: 'other', url: new URL('http://127.0.0.1:9/') }]]),
    profiles: new Map([['a', profile('a', 'r')], ['b', profile('b', 'r')], ['keyless', profile('keyless', 'other')]]) as unknown as Config['profiles'],
  };
}
/** A keep-alive agent of its own per call (every router here is http). */
const agent = () => new http.Agent({ keepAlive: true });

t.test('a refused connection, a non-200 answer and a router that never answers: counted as failed, never thrown, bounded by the timeout', async (t) => {
  // Refused: a port nothing listens on.
  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise<void>((r) => closed.close(() => r()));
  const keys = new Map([['a', 'sk-or-v1-a']]);
  const a1 = agent();
  t.strictSame(await preconnect(config(`http://127.0.0.1:${closedPort}`), keys, () => a1, 3, 5_000), { routers: 1, sockets: 0, failed: 3 }, 'profile b shares router r; keyless has no key: one router');
  a1.destroy();

  // A 401: the socket may stay, but it is not counted as warm.
  const refusing = http.createServer((_req, res) => res.writeHead(401).end('{}'));
  await new Promise<void>((r) => refusing.listen(0, '127.0.0.1', r));
  t.teardown(() => refusing.close());
  const a2 = agent();
  t.strictSame(await preconnect(config(`http://127.0.0.1:${(refusing.address() as AddressInfo).port}`), keys, () => a2, 2, 5_000), { routers: 1, sockets: 0, failed: 2 });
  a2.destroy();

  // Never answers: the start waits the timeout, no longer.
  const silent = http.createServer(() => {});
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  t.teardown(() => silent.closeAllConnections());
  t.teardown(() => silent.close());
  const a3 = agent();
  t.strictSame(await preconnect(config(`http://127.0.0.1:${(silent.address() as AddressInfo).port}`), keys, () => a3, 2, 30), { routers: 1, sockets: 0, failed: 2 });
  a3.destroy();

  t.strictSame(await preconnect(config('http://127.0.0.1:9/'), new Map(), agent, 2, 30), { routers: 0, sockets: 0, failed: 0 }, 'no profile with a key: nothing sent');
});
