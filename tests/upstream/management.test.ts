// The management client against the simulated router and a scripted HTTP server: pagination of
// the key list, 404s that mean "none", and every failure turned into a message naming the profile
// and the cause, with anything shaped like a key masked.

import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { startSimulatedRouter } from '../../lib/sim/index.ts';
import { ManagementClient, ManagementError } from '../../lib/upstream/management.ts';

const client = new ManagementClient({ timeoutMs: 1000 });

/** A server answering each request with `answer`. */
async function scripted(t: Test, answer: (path: string, res: ServerResponse) => void): Promise<URL> {
  const server = createServer((req, res) => answer(req.url ?? '/', res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { server.closeAllConnections(); server.close(); });
  return new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
}

t.test('the key list is read page by page; 404s read as "no such key"', async (t) => {
  const sim = await startSimulatedRouter({ provisioningKey: 'sk-or-v1-prov' });
  t.teardown(() => sim.close());
  const c = { router: new URL(sim.url), profile: 'dev', bearer: 'sk-or-v1-prov' };
  for (let i = 0; i < 205; i++) await client.createKey(c, { name: `k${i}`, limit: 1, limit_reset: 'daily' });
  const all = await client.listKeys(c);
  t.equal(all.length, 205, 'three pages');
  t.equal(new Set(all.map((k) => k.hash)).size, 205);
  t.strictSame(sim.received.filter((r) => r.method === 'GET').map((r) => r.path), [0, 100, 200].map((o) => `/api/v1/keys?include_disabled=true&offset=${o}`));
  t.equal(await client.getKey(c, 'f'.repeat(64)), undefined);
  t.equal(await client.patchKey(c, 'f'.repeat(64), { limit: 2 }), undefined);
  const got = await client.getKey(c, all[0].hash);
  t.match(got, { name: 'k0', limit: 1, limit_reset: 'daily', disabled: false, usage_daily: 0 });
  t.match(await client.patchKey(c, all[0].hash, { limit: 2 }), { limit: 2 });
  const readout = await client.currentKey({ ...c, bearer: 'sk-or-v1-anything' });
  t.match(readout, { limit: null, usage_daily: 0 });
});

t.test('failures name the profile and the cause, never a key', async (t) => {
  const url = await scripted(t, (path, res) => {
    if (path.startsWith('/api/v1/keys?')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('not json');
    if (path === '/api/v1/keys') return void res.writeHead(201, { 'content-type': 'application/json' }).end('{"data":{"hash":"h"}}');
    if (path === '/api/v1/key') return void res.writeHead(401, { 'content-type': 'application/json' }).end('{"error":{"code":401,"message":"bad key sk-or-v1-0123456789abcdef"}}');
    if (path.startsWith('/api/v1/generation?id=gen-none')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":{"id":"gen-none"}}');
    if (path.startsWith('/api/v1/generation?id=gen-404')) return void res.writeHead(404).end();
    if (path.startsWith('/api/v1/generation?id=gen-ok')) return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":{"id":"gen-ok","total_cost":0.0123}}');
    if (path.startsWith('/api/v1/keys/cut')) {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '100' });
      res.write('{"data":');
      setImmediate(() => res.socket?.destroy());
      return;
    }
    res.writeHead(502).end('upstream gone');
  });
  const c = { router: url, profile: 'team', bearer: 'sk-or-v1-secretsecretsecret' };
  const fails = async (p: Promise<unknown>) => {
    const err = await p.then(() => undefined, (e) => e);
    t.type(err, ManagementError);
    t.notOk(String(err.message).includes('secretsecret'), 'no key in the message');
    return err as ManagementError;
  };
  t.match((await fails(client.listKeys(c))).message, /^profile team: listing the router's keys \(GET \/api\/v1\/keys\): the router's answer is not JSON$/);
  t.match((await fails(client.createKey(c, { name: 'n', limit: 1, limit_reset: 'daily' }))).message, /the router's answer holds no key/);
  const e401 = await fails(client.currentKey(c));
  t.equal(e401.message, 'profile team: reading the usage of its upstream key (GET /api/v1/key): the router answered 401 (bad key [redacted])');
  t.equal(e401.outage, false, 'a refusal is not an outage');
  const e502 = await fails(client.getKey(c, 'x'));
  t.match(e502.message, /answered 502 \(upstream gone\)/);
  t.equal(e502.outage, true);
  const cut = await fails(client.getKey(c, 'cut'));
  t.match(cut.message, /the answer was cut off/);
  t.match((await fails(client.generationCost(c, 'gen-none'))).message, /the record has no total_cost/);
  t.equal(await client.generationCost(c, 'gen-404'), undefined);
  t.equal(await client.generationCost(c, 'gen-ok'), 0.0123);
});
