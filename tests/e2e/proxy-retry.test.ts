// The keep-alive race: an upstream that closes a kept-alive socket just as sluice reuses it.
// sluice retries such a request once on a fresh socket (nothing reached the upstream, the body is
// in memory); a reset on a fresh socket is a plain 502, never retried.

import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createKey } from '../helpers/keys.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { createGateway } from '../../lib/server.ts';
import { readSettings } from '../../lib/settings.ts';
import { openStore } from '../../lib/store/open.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';

const ANSWER = JSON.stringify({ id: 'gen-1-retry', object: 'chat.completion', model: 'm', provider: 'P', choices: [], usage: { prompt_tokens: 1, completion_tokens: 1, cost: 0.000001 } });

/** An upstream that resets every request after the first on a socket (or every request, with `always`). */
async function flakyUpstream(t: Test, always = false) {
  const served = new WeakMap<Socket, number>();
  const seen = { requests: 0, resets: 0 };
  const server: Server = createServer((req, res) => {
    if (req.url !== '/api/v1/chat/completions') return void res.writeHead(404).end();
    seen.requests++;
    const n = served.get(req.socket) ?? 0;
    served.set(req.socket, n + 1);
    req.resume();
    if (always || n > 0) {
      seen.resets++;
      req.socket.destroy();
      return;
    }
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(ANSWER));
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    server.closeAllConnections();
    server.close();
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
}

async function gatewayFor(t: Test, upstreamUrl: string) {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-retry-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profilesYaml(upstreamUrl));
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
  const config = loadConfig(dir);
  const store = await openStore({ dataDir: dir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const gw = await createGateway({ config, store, counters, log: createLogger('silent'), settings: readSettings({ SLUICE_UPSTREAM_KEY_DEV: 'sk-or-x' }), dataDir: dir });
  const addr = await gw.listen('127.0.0.1', 0);
  t.teardown(() => gw.close(100));
  const key = await createKey(store, config, { profile: 'dev', name: 'retry' });
  return (): Promise<Response> => fetch(`http://127.0.0.1:${addr.port}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'meta-llama/llama-3.3-70b-instruct', messages: [{ role: 'user', content: 'hi' }] }),
  });
}

t.test('a reset on a reused keep-alive socket is retried once on a fresh one', async (t) => {
  const up = await flakyUpstream(t);
  const send = await gatewayFor(t, up.url);
  const first = await send();
  t.equal(first.status, 200);
  t.same(await first.json(), JSON.parse(ANSWER));
  const second = await send(); // goes out on the kept-alive socket, which the upstream resets
  t.equal(second.status, 200, 'the retry on a fresh socket answered');
  t.same(await second.json(), JSON.parse(ANSWER));
  t.same(up.seen, { requests: 3, resets: 1 }, 'one reset, one retry');
});

t.test('a reset on a fresh socket is a 502, not retried', async (t) => {
  const up = await flakyUpstream(t, true);
  const send = await gatewayFor(t, up.url);
  const res = await send();
  t.equal(res.status, 502);
  t.match(await res.json(), { error: { code: 'upstream_unreachable', type: 'api_error' } });
  t.same(up.seen, { requests: 1, resets: 1 }, 'no retry');
});
