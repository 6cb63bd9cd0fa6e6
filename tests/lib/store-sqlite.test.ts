// Runs the Store contract against the embedded SQLite backing, one temp directory per test, and
// checks that two stores open on one file at once (the CLI beside a running server) see each
// other's writes. Must never use a shared or fixed path: each test owns its directory.

import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { openStore } from '../../lib/store/open.ts';
import { openSqliteStore } from '../../lib/store/sqlite.ts';
import type { Store } from '../../lib/store/store.ts';
import { storeContract } from './store.contract.ts';

// One data directory per test: a later open(t) reopens the same file rather than a fresh one.
const dirs = new WeakMap<Test, string>();

async function open(t: Test): Promise<Store> {
  let dir = dirs.get(t);
  if (!dir) {
    dir = t.testdir();
    dirs.set(t, dir);
  }
  const store = await openStore({ dataDir: dir });
  t.equal(store.kind, 'sqlite');
  return store;
}

// openStore runs SQLite in a worker thread (lib/store/thread.ts); the same contract holds for
// the store run in this thread, which is what that worker wraps.
storeContract(t, open);
t.test('in this thread', async (t) => {
  storeContract(t, async (t) => {
    let dir = dirs.get(t);
    if (!dir) dirs.set(t, (dir = t.testdir()));
    const store = openSqliteStore(join(dir, 'sluice.db'));
    await store.migrate();
    return store;
  });
});

t.test('the worker thread: errors keep their kind, a closed store refuses calls', async (t) => {
  const store = await open(t);
  const key = { key_hash: 'd'.repeat(64), prefix: 'p', profile: 'team', name: 'n', ip_allow: '', created_at: '2025-03-01T10:00:00.000Z', expires_at: null };
  await store.createKey(key);
  await t.rejects(store.createKey({ ...key, key_hash: 'e'.repeat(64) }), { name: 'KeyConflictError' }, 'a conflict is still a KeyConflictError');
  await t.rejects((store as unknown as { noSuchMethod(): Promise<void> }).noSuchMethod(), { name: 'TypeError', message: /no method noSuchMethod/ });
  await store.close();
  await store.close();
  await t.rejects(store.listKeys(), /closed/, 'calls after close fail');
});

t.test('the worker thread: a file that cannot be opened fails every call', async (t) => {
  const dir = t.testdir({ 'sluice.db': {} }); // a directory where the database file should be
  await t.rejects(openStore({ dataDir: dir }), 'openStore refuses it');
});

t.test('two stores on one file see each other', async (t) => {
  const cli = await open(t);
  t.teardown(() => cli.close());
  const server = await open(t);
  t.teardown(() => server.close());

  const key = await cli.createKey({
    key_hash: 'c'.repeat(64),
    prefix: 'sk-sl-cccc',
    profile: 'team',
    name: 'ci',
    ip_allow: '',
    created_at: '2025-03-01T10:00:00.000Z',
    expires_at: null,
  });
  t.strictSame(await server.keyByHash(key.key_hash), key, 'server sees the key the CLI made');

  await server.touchKey(key.id, '2025-03-01T11:00:00.000Z');
  await server.insertAudit([{ ts: '2025-03-01T11:00:01.000Z', ip: '203.0.113.9', prefix: '', outcome: 'missing_key' }]);
  await server.insertRequests([
    {
      id: 'req-1', ts: '2025-03-01T11:00:02.000Z', endpoint: 'chat', profile: 'team', key_prefix: key.prefix,
      end_user: null, session: null, run: null, tier: null, requested_model: 'fast', model: 'm', stream: true,
      status: 200, outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0,
      cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.002, cost_source: 'upstream', provider: 'p',
      degradation: 'none', generation_id: 'g', ttfb_ms: 40, duration_ms: 90, overhead_ms: 2, tools: [],
    },
  ]);
  t.equal((await cli.listKeys())[0]?.last_used_at, '2025-03-01T11:00:00.000Z', 'CLI sees the touch');
  t.equal((await cli.listAudit()).length, 1, 'CLI sees the audit row');
  t.equal(await cli.spendSince('team', '2025-03-01T00:00:00.000Z'), 0.002, 'CLI sees the spend');

  await cli.revokeKey('team', 'ci', '2025-03-01T12:00:00.000Z');
  t.equal((await server.keyByHash(key.key_hash))?.revoked_at, '2025-03-01T12:00:00.000Z', 'server sees the revocation');
});

t.test('the worker thread: a small young generation even under the unit\'s --max-semi-space-size', async (t) => {
  // The flag, set for the event loop's isolate, used to size the worker's semi-spaces too (2 × 16
  // MiB of RSS for row batches). The worker's heap limit (old generation plus young) must be the
  // same with the flag as without it, while the main isolate's still follows the flag.
  const script = `
    const v8 = await import('node:v8');
    const { openThreadStore } = await import(${JSON.stringify(new URL('../../lib/store/thread.ts', import.meta.url).href)});
    const store = openThreadStore({ kind: 'sqlite', file: process.argv[2] });
    await store.migrate(); // the worker is running once it answers
    const worker = (await store.workerHeap()).heap_size_limit;
    await store.close();
    console.log(JSON.stringify({ main: v8.getHeapStatistics().heap_size_limit, worker }));`;
  const dir = t.testdir({ 'probe.mjs': script });
  const limits = (flags: string[]) => {
    const r = spawnSync(process.execPath, [...flags, join(dir, 'probe.mjs'), join(dir, 'sluice.db')], { encoding: 'utf8' });
    t.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout) as { main: number; worker: number };
  };
  const plain = limits([]);
  const unit = limits(['--max-semi-space-size=16']);
  t.ok(unit.main < plain.main, 'the flag still caps the main isolate');
  t.equal(unit.worker, plain.worker, 'but not the store worker');
});
