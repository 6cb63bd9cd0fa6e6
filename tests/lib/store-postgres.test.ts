// Runs the Store contract against the Postgres backing, one fresh database per test on the
// machine's server (tests/helpers/postgres.ts). Fails, never skips, when Postgres is down.
// Must never touch a database it did not create.

import { tmpdir } from 'node:os';
import t, { type Test } from 'tap';
import { openStore } from '../../lib/store/open.ts';
import type { Store } from '../../lib/store/store.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';
import { startRelay } from '../helpers/relay.ts';
import { storeContract } from './store.contract.ts';

// One database per test: a later open(t) reconnects to the same database rather than a fresh one.
const urls = new WeakMap<Test, string>();

async function open(t: Test): Promise<Store> {
  let url = urls.get(t);
  if (!url) {
    url = await freshPostgresUrl(t);
    urls.set(t, url);
  }
  // dataDir is unused when a database URL is given.
  const store = await openStore({ databaseUrl: url, dataDir: tmpdir() });
  t.equal(store.kind, 'postgres');
  return store;
}

storeContract(t, open);

t.test('a NUL in a row\'s strings does not make its batch unwritable (Postgres text cannot hold one)', async (t) => {
  const store = await open(t);
  t.teardown(() => store.close());
  const base = { endpoint: 'chat', profile: 'team', key_prefix: 'sluice_team_abcd', end_user: null, session: null, run: null, tier: null, requested_model: 'm', model: 'm', stream: false, status: 200, outcome: 'ok', input_tokens: 1, output_tokens: 1, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.001, cost_source: 'estimate', provider: null, degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2, overhead_ms: 0.1, tools: [] } as const;
  const withNul = { ...base, id: '0190f000-0000-7000-8000-000000000001', ts: '2025-03-01T12:00:00.000Z', end_user: 'a\u0000b', provider: 'p\u0000', tools: ['t\u0000', 'the text \\u0000'] };
  const plain = { ...base, id: '0190f000-0000-7000-8000-000000000002', ts: '2025-03-01T12:00:01.000Z', end_user: 'back\\u0000slash' };
  await store.insertRequests([withNul, plain] as never);
  const rows = await store.listRequests();
  t.equal(rows.length, 2, 'both rows written');
  const got = rows.find((r) => r.id === withNul.id)!;
  t.equal(got.end_user, 'a\ufffdb', 'the NUL became U+FFFD');
  t.equal(got.provider, 'p\ufffd');
  t.strictSame(got.tools, ['t\ufffd', 'the text \\u0000'], 'in tools too; an escaped backslash before u0000 is text and stays');
  t.equal(rows.find((r) => r.id === plain.id)!.end_user, 'back\\u0000slash', 'a row without a NUL is untouched');
});

t.test('the worker thread: errors keep their kind and code, a closed store refuses calls', async (t) => {
  const store = await open(t);
  const key = { key_hash: 'd'.repeat(64), prefix: 'p', profile: 'team', name: 'n', ip_allow: '', created_at: '2025-03-01T10:00:00.000Z', expires_at: null };
  await store.createKey(key);
  await t.rejects(store.createKey({ ...key, key_hash: 'e'.repeat(64) }), { name: 'KeyConflictError' }, 'a conflict is still a KeyConflictError');
  await t.rejects(store.listRequests(-1), { code: '2201W', message: /LIMIT must not be negative/ }, "Postgres's own error code crosses the thread");
  await store.close();
  await store.close();
  await t.rejects(store.listKeys(), /closed/, 'calls after close fail');
});

t.test("the worker thread: an unreachable Postgres fails openStore with the connection's own error", async (t) => {
  // Port 1 on loopback: nothing listens there, so the connection is refused at once.
  await t.rejects(openStore({ databaseUrl: 'postgres://root@127.0.0.1:1/none', dataDir: tmpdir() }), { code: 'ECONNREFUSED' });
});

t.test('during an outage a store call fails within about a second, however many failed before it', async (t) => {
  // The driver's default backoff grows to 20 s between connection attempts; a shutdown's last
  // writes then waited minutes for connections refused at once (tests/e2e/shutdown.test.ts).
  const target = new URL(await freshPostgresUrl(t));
  const relay = await startRelay(t, { host: target.hostname, port: Number(target.port || 5432) });
  target.port = String(relay.port);
  const store = await openStore({ databaseUrl: target.toString(), dataDir: tmpdir() });
  t.teardown(() => store.close());
  t.same(await store.listKeys(), []);
  await relay.cut();
  for (let i = 0; i < 10; i++) await t.rejects(store.listKeys(), `failure ${i + 1}`);
  const t0 = performance.now();
  await t.rejects(store.listKeys());
  const took = performance.now() - t0;
  t.ok(took < 3000, `the 11th failed in ${took.toFixed(0)} ms`);
  await relay.restore();
  let keys: unknown;
  for (let i = 0; i < 50 && keys === undefined; i++) keys = await store.listKeys().catch(() => undefined);
  t.same(keys, [], 'and the store answers again once Postgres is back');
});
