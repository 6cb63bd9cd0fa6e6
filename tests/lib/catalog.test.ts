// The router catalog (lib/catalog.ts): parsing OpenRouter's /api/v1/models into output caps and
// per-token prices, and refreshing against a tiny local server that first serves a catalog and
// then fails (error status, garbage, an empty list, silence past a short timeout): every failed
// refresh keeps the last good copy and logs a warning. Also the hourly timer and cost estimates.

import { EventEmitter, once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { Catalog, estimateCost, parseCatalog, tierPrices } from '../../lib/catalog.ts';
import { createLogger } from '../../lib/log.ts';

const CATALOG = {
  data: [
    { id: 'google/gemini-2.5-flash', pricing: { prompt: '0.0000003', completion: '0.0000025', input_cache_read: '0.00000003', input_cache_write: '0.0000003833' }, top_provider: { max_completion_tokens: 65535 } },
    { id: 'openai/gpt-4.1-mini', pricing: { prompt: '0.0000004', completion: '0.0000016' }, top_provider: { max_completion_tokens: 32768 } },
    { id: 'meta-llama/llama-3.3-70b-instruct', pricing: { prompt: '0.00000013', completion: '0.00000039' }, top_provider: { max_completion_tokens: null } },
  ],
};

type Mode = 'catalog' | 'other-catalog' | 'status' | 'garbage' | 'empty' | 'hang';

/** A one-route server whose answer to GET …/api/v1/models is set by `mode`. */
async function catalogServer(t: Test, prefix = '') {
  const state = { mode: 'catalog' as Mode, paths: [] as string[], events: new EventEmitter() };
  const server = createServer((req, res) => {
    state.paths.push(req.url ?? '');
    state.events.emit('request');
    if (req.url !== `${prefix}/api/v1/models`) return void res.writeHead(404).end();
    switch (state.mode) {
      case 'catalog': return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(CATALOG));
      case 'other-catalog': return void res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: [{ id: 'openai/gpt-4.1-mini', pricing: { prompt: '0.000001', completion: '0.000002' }, top_provider: { max_completion_tokens: 16384 } }] }));
      case 'status': return void res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":{"message":"down"}}');
      case 'garbage': return void res.writeHead(200, { 'content-type': 'application/json' }).end('<html>oops');
      case 'empty': return void res.writeHead(200, { 'content-type': 'application/json' }).end('{"data":[]}');
      case 'hang': return; // never answers; the catalog's timeout gives up
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { ...state, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}${prefix}`, set: (m: Mode) => (state.mode = m) };
}

function captureLog() {
  const lines: Array<Record<string, any>> = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l) lines.push(JSON.parse(l));
      cb();
    },
  });
  return { log: createLogger('debug', sink), lines };
}

t.test('parseCatalog: caps and per-token prices', async (t) => {
  const m = parseCatalog({
    data: [
      ...CATALOG.data,
      { id: 'x/zero-cap', pricing: { prompt: 'abc', completion: -1 }, top_provider: { max_completion_tokens: 0 } },
      { pricing: { prompt: '1' } },
      'junk',
    ],
  });
  t.same([...m.keys()], ['google/gemini-2.5-flash', 'openai/gpt-4.1-mini', 'meta-llama/llama-3.3-70b-instruct', 'x/zero-cap'], 'entries without an id are skipped');
  t.equal(m.get('google/gemini-2.5-flash')!.maxCompletion, 65535);
  t.same(m.get('google/gemini-2.5-flash')!.prices, { prompt: 0.0000003, completion: 0.0000025, cacheRead: 0.00000003, cacheWrite: 0.0000003833 });
  t.same(m.get('openai/gpt-4.1-mini')!.prices, { prompt: 0.0000004, completion: 0.0000016, cacheRead: 0.0000004, cacheWrite: 0.0000004 }, 'cache prices default to the prompt price');
  t.equal(m.get('meta-llama/llama-3.3-70b-instruct')!.maxCompletion, null, 'no provider maximum');
  t.equal(m.get('x/zero-cap')!.maxCompletion, null);
  t.same(m.get('x/zero-cap')!.prices, { prompt: 0, completion: 0, cacheRead: 0, cacheWrite: 0 }, 'unreadable prices count as zero');
  t.equal(parseCatalog(null).size, 0);
  t.equal(parseCatalog({ data: 'nope' }).size, 0);
});

t.test('a failed refresh keeps the last good copy', async (t) => {
  const srv = await catalogServer(t);
  const { log, lines } = captureLog();
  const catalog = new Catalog({ routers: [{ name: 'r', url: new URL(srv.url) }], log, timeoutMs: 5000 });
  t.teardown(() => catalog.stop());
  t.equal(catalog.maxCompletion('r', 'openai/gpt-4.1-mini'), null, 'nothing before the first load');

  await catalog.refresh();
  t.equal(catalog.maxCompletion('r', 'openai/gpt-4.1-mini'), 32768);
  t.equal(catalog.maxCompletion('r', 'google/gemini-2.5-flash'), 65535);
  t.equal(catalog.maxCompletion('r', 'meta-llama/llama-3.3-70b-instruct'), null);
  t.equal(catalog.maxCompletion('r', 'acme/absent'), null);
  t.equal(catalog.maxCompletion('other-router', 'openai/gpt-4.1-mini'), null, 'per router');
  t.equal(catalog.prices('r', 'openai/gpt-4.1-mini')!.completion, 0.0000016);
  const loadedAt = catalog.refreshedAt.get('r');
  t.type(loadedAt, 'string');

  for (const mode of ['status', 'garbage', 'empty'] as const) {
    srv.set(mode);
    const warnings = lines.filter((l) => l.level === 40).length;
    await catalog.refresh();
    t.equal(catalog.maxCompletion('r', 'openai/gpt-4.1-mini'), 32768, `${mode}: cap kept`);
    t.equal(catalog.prices('r', 'google/gemini-2.5-flash')!.prompt, 0.0000003, `${mode}: prices kept`);
    t.equal(catalog.refreshedAt.get('r'), loadedAt, `${mode}: refreshedAt unchanged`);
    const warn = lines.filter((l) => l.level === 40);
    t.equal(warn.length, warnings + 1, `${mode}: one warning`);
    t.match(warn.at(-1), { router: 'r', kept: 3 });
  }

  // Silence past the timeout: a second catalog on the same server, with a short timeout.
  srv.set('catalog');
  const quick = new Catalog({ routers: [{ name: 'r', url: new URL(srv.url) }], log, timeoutMs: 1000 });
  await quick.refresh();
  t.equal(quick.maxCompletion('r', 'openai/gpt-4.1-mini'), 32768);
  srv.set('hang');
  const warnings = lines.filter((l) => l.level === 40).length;
  await quick.refresh();
  t.equal(quick.maxCompletion('r', 'openai/gpt-4.1-mini'), 32768, 'hang: cap kept');
  t.equal(lines.filter((l) => l.level === 40).length, warnings + 1, 'hang: one warning');

  srv.set('other-catalog');
  await catalog.refresh();
  t.equal(catalog.maxCompletion('r', 'openai/gpt-4.1-mini'), 16384, 'a good refresh replaces the copy');
  t.equal(catalog.maxCompletion('r', 'google/gemini-2.5-flash'), null, 'models the new copy lacks are gone');
});

t.test('start loads before it resolves, then refreshes on its timer; routers fail alone', async (t) => {
  const good = await catalogServer(t, '/prefix');
  const bad = await catalogServer(t);
  bad.set('status');
  const { log } = captureLog();
  const catalog = new Catalog({ routers: [{ name: 'good', url: new URL(good.url) }, { name: 'bad', url: new URL(bad.url) }], log, timeoutMs: 5000 });
  t.teardown(() => catalog.stop());
  await catalog.start(20);
  t.same(good.paths, ['/prefix/api/v1/models'], 'the API lives under the router URL path');
  t.equal(catalog.maxCompletion('good', 'openai/gpt-4.1-mini'), 32768);
  t.equal(catalog.maxCompletion('bad', 'openai/gpt-4.1-mini'), null);
  t.notOk(catalog.refreshedAt.has('bad'));

  good.set('status');
  await once(good.events, 'request');
  catalog.stop();
  t.ok(good.paths.length >= 2, 'refreshed again by the timer');
  t.equal(catalog.maxCompletion('good', 'openai/gpt-4.1-mini'), 32768, 'still the last good copy');
});

t.test('cost estimates from per-token prices', async (t) => {
  const p = tierPrices({ price: { input_per_mtok: 0.3, output_per_mtok: 2.5 } });
  t.same(p, { prompt: 0.0000003, completion: 0.0000025, cacheRead: 0.0000003, cacheWrite: 0.0000003 });
  const usd = estimateCost({ input_tokens: 1000, output_tokens: 200, cache_read_tokens: 500, cache_write_tokens: 100 }, { prompt: 0.000001, completion: 0.000002, cacheRead: 0.0000001, cacheWrite: 0.00000125 });
  t.ok(Math.abs(usd - 0.001575) < 1e-12, `${usd} ≈ 0.001575`);
});
