// The Store contract: every behaviour a backing must show, run as-is against SQLite and Postgres
// (tests/lib/store-sqlite.test.ts, tests/lib/store-postgres.test.ts). Owns only assertions on the
// Store interface; must never reach into a backing's tables, SQL or driver.
// `open(t)` yields a migrated store on t's own database: empty on the first call for a given t,
// the same database again on later calls with that t (that is how reopening is tested).

import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import { KeyConflictError, type AuditRow, type NewKey, type RequestRow, type Store } from '../../lib/store/store.ts';

export type OpenStore = (t: Test) => Promise<Store>;

let keySeq = 0;
function newKey(over: Partial<NewKey> = {}): NewKey {
  keySeq += 1;
  return {
    key_hash: `${keySeq.toString(16).padStart(8, '0')}${'ab'.repeat(28)}`,
    prefix: `sk-sl-${keySeq.toString().padStart(4, '0')}`,
    profile: 'team',
    name: `key-${keySeq}`,
    ip_allow: '',
    created_at: '2025-03-01T10:00:00.000Z',
    expires_at: null,
    ...over,
  };
}

function requestRow(over: Partial<RequestRow> = {}): RequestRow {
  return {
    id: randomUUID(),
    ts: '2025-03-01T12:00:00.000Z',
    endpoint: 'chat',
    profile: 'team',
    key_prefix: 'sk-sl-0001',
    end_user: null,
    session: null,
    run: null,
    tier: null,
    requested_model: null,
    model: null,
    stream: false,
    status: 200,
    outcome: 'ok',
    input_tokens: 0,
    output_tokens: 0,
    cache_read_tokens: 0,
    cache_write_tokens: 0,
    reasoning_tokens: 0,
    cost_usd: 0,
    cost_source: 'estimate',
    provider: null,
    degradation: 'none',
    generation_id: null,
    ttfb_ms: null,
    duration_ms: 1,
    overhead_ms: null,
    tools: [],
    key_id: null,
    ...over,
  };
}

function byId(a: { id: string }, b: { id: string }): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}

export function storeContract(t: Test, open: OpenStore): void {
  /** Opens t's store and closes it when t ends. */
  async function storeFor(tt: Test): Promise<Store> {
    const store = await open(tt);
    tt.teardown(() => store.close());
    return store;
  }

  t.test('migrate twice is harmless and keeps the data', async (t) => {
    const store = await storeFor(t);
    t.ok(store.kind === 'sqlite' || store.kind === 'postgres', `kind is ${store.kind}`);
    const key = await store.createKey(newKey());
    await store.migrate();
    await store.migrate();
    t.strictSame(await store.keyByHash(key.key_hash), key);
  });

  t.test('createKey returns the stored row with a fresh id', async (t) => {
    const store = await storeFor(t);
    const input = newKey({ ip_allow: '10.0.0.0/8,192.168.1.7' });
    const first = await store.createKey(input);
    t.type(first.id, 'number');
    t.strictSame(first, { id: first.id, ...input, last_used_at: null, revoked_at: null, daily_usd: null, monthly_usd: null }, 'no caps unless given');
    const second = await store.createKey(newKey());
    t.ok(second.id > first.id, 'ids increase');
  });

  t.test('keyByHash finds a key and returns undefined for an unknown hash', async (t) => {
    const store = await storeFor(t);
    const key = await store.createKey(newKey());
    await store.createKey(newKey());
    t.strictSame(await store.keyByHash(key.key_hash), key);
    t.equal(await store.keyByHash('f'.repeat(64)), undefined);
  });

  t.test('one active key per (profile, name)', async (t) => {
    const store = await storeFor(t);
    const key = await store.createKey(newKey({ profile: 'team', name: 'ci' }));
    await t.rejects(store.createKey(newKey({ profile: 'team', name: 'ci' })), KeyConflictError);
    const otherName = await store.createKey(newKey({ profile: 'team', name: 'laptop' }));
    const otherProfile = await store.createKey(newKey({ profile: 'ops', name: 'ci' }));
    t.strictSame(await store.listKeys(), [key, otherName, otherProfile]);

    // A duplicate hash is a different failure and must not be reported as a name conflict.
    const err = await store.createKey(newKey({ key_hash: key.key_hash, name: 'fresh' })).then(
      () => undefined,
      (e: unknown) => e,
    );
    t.ok(err instanceof Error, 'a duplicate key_hash is rejected');
    t.notOk(err instanceof KeyConflictError, 'and is not a KeyConflictError');
  });

  t.test('revokeKey revokes the active key only', async (t) => {
    const store = await storeFor(t);
    const key = await store.createKey(newKey({ profile: 'team', name: 'ci' }));
    const other = await store.createKey(newKey({ profile: 'team', name: 'laptop' }));
    const at = '2025-03-02T08:30:00.250Z';

    const revoked = await store.revokeKey('team', 'ci', at);
    t.strictSame(revoked, { ...key, revoked_at: at });
    t.strictSame(await store.keyByHash(key.key_hash), { ...key, revoked_at: at });
    t.strictSame(await store.keyByHash(other.key_hash), other, 'other keys untouched');

    t.equal(await store.revokeKey('team', 'ci', '2025-03-03T00:00:00.000Z'), undefined, 'nothing active');
    t.equal(await store.revokeKey('team', 'nobody', at), undefined, 'unknown name');
    t.equal(await store.revokeKey('ops', 'laptop', at), undefined, 'name exists only in another profile');

    const again = await store.createKey(newKey({ profile: 'team', name: 'ci' }));
    t.equal(again.revoked_at, null);
    t.strictSame(await store.listKeys('team'), [{ ...key, revoked_at: at }, other, again]);
  });

  t.test('touchKey sets last_used_at', async (t) => {
    const store = await storeFor(t);
    const key = await store.createKey(newKey());
    const other = await store.createKey(newKey());
    await store.touchKey(key.id, '2025-03-01T11:00:00.001Z');
    t.equal((await store.keyByHash(key.key_hash))?.last_used_at, '2025-03-01T11:00:00.001Z');
    await store.touchKey(key.id, '2025-03-01T11:05:00.000Z');
    t.strictSame(await store.keyByHash(key.key_hash), { ...key, last_used_at: '2025-03-01T11:05:00.000Z' });
    t.strictSame(await store.keyByHash(other.key_hash), other, 'other keys untouched');
  });

  t.test('listKeys with and without a profile, ordered by id', async (t) => {
    const store = await storeFor(t);
    t.strictSame(await store.listKeys(), []);
    const a1 = await store.createKey(newKey({ profile: 'a' }));
    const b1 = await store.createKey(newKey({ profile: 'b' }));
    const a2 = await store.createKey(newKey({ profile: 'a' }));
    t.strictSame(await store.listKeys(), [a1, b1, a2]);
    t.strictSame(await store.listKeys('a'), [a1, a2]);
    t.strictSame(await store.listKeys('b'), [b1]);
    t.strictSame(await store.listKeys('nobody'), []);
  });

  t.test('expires_at round-trips, null and set', async (t) => {
    const store = await storeFor(t);
    const never = await store.createKey(newKey({ expires_at: null }));
    const soon = await store.createKey(newKey({ expires_at: '2025-04-01T00:00:00.500Z' }));
    t.equal(never.expires_at, null);
    t.equal(soon.expires_at, '2025-04-01T00:00:00.500Z');
    t.equal((await store.keyByHash(never.key_hash))?.expires_at, null);
    t.equal((await store.keyByHash(soon.key_hash))?.expires_at, '2025-04-01T00:00:00.500Z');
    t.strictSame(await store.listKeys(), [never, soon]);
  });

  t.test('insertAudit and listAudit, newest first, with ids', async (t) => {
    const store = await storeFor(t);
    await store.insertAudit([]);
    t.strictSame(await store.listAudit(), []);
    const rows: AuditRow[] = [
      { ts: '2025-03-01T10:00:00.000Z', ip: '203.0.113.9', prefix: '', outcome: 'missing_key' },
      { ts: '2025-03-01T10:00:02.000Z', ip: '2001:db8::1', prefix: 'sk-sl-abcd', outcome: 'unknown_key' },
    ];
    await store.insertAudit(rows);
    // Inserted after, but older: order follows ts, not insertion.
    const older: AuditRow = { ts: '2025-03-01T09:59:59.999Z', ip: '198.51.100.4', prefix: 'sk-sl-0001', outcome: 'revoked_by_admin' };
    const newest: AuditRow = { ts: '2025-03-01T10:00:03.000Z', ip: '203.0.113.9', prefix: 'sk-sl-0002', outcome: 'ip_not_allowed' };
    await store.insertAudit([older, newest]);

    const listed = await store.listAudit();
    t.strictSame(listed.map(({ id: _id, ...row }) => row), [newest, rows[1], rows[0], older]);
    for (const row of listed) t.type(row.id, 'number');
    t.equal(new Set(listed.map((r) => r.id)).size, 4, 'ids are distinct');
    t.strictSame(await store.listAudit(2), listed.slice(0, 2));
  });

  t.test('insertRequests round-trips every column exactly', async (t) => {
    const store = await storeFor(t);
    const bare = requestRow({ ts: '2025-03-01T12:00:00.000Z', endpoint: 'count_tokens' });
    const full = requestRow({
      ts: '2025-03-01T12:00:01.123Z',
      endpoint: 'messages',
      profile: 'research',
      key_prefix: 'sk-sl-9f3a',
      end_user: 'user-42',
      session: 'sess-7',
      run: 'bench-2025-03-01',
      tier: 'fast',
      requested_model: 'fast',
      model: 'anthropic/claude-sonnet-4',
      stream: true,
      status: 502,
      outcome: 'upstream_error',
      input_tokens: 123_456,
      output_tokens: 789,
      cache_read_tokens: 1024,
      cache_write_tokens: 2048,
      reasoning_tokens: 17,
      cost_usd: 0.000734,
      cost_source: 'upstream',
      provider: 'Anthropic',
      degradation: 'max-tokens',
      generation_id: 'gen-1741-abc',
      ttfb_ms: 312,
      duration_ms: 4567,
      overhead_ms: 0.37,
      tools: ['web_search', 'read_file', 'with "quotes", commas & ünïcode'],
      key_id: 2_147_483_647,
    });
    const disconnected = requestRow({
      ts: '2025-03-01T12:00:02.000Z',
      stream: true,
      status: 200,
      outcome: 'client_disconnect',
      cost_usd: 1.5e-7,
      degradation: 'fast-only',
      ttfb_ms: 0,
      overhead_ms: 0,
      tools: ['one'],
    });
    await store.insertRequests([bare, full, disconnected]);
    t.strictSame(await store.listRequests(), [disconnected, full, bare]);
  });

  t.test('insertRequests writes a repeated id once', async (t) => {
    const store = await storeFor(t);
    await store.insertRequests([]);
    const a = requestRow({ ts: '2025-03-01T12:00:00.000Z', cost_usd: 0.5 });
    const b = requestRow({ ts: '2025-03-01T12:00:01.000Z', cost_usd: 0.25 });
    await store.insertRequests([a, a]);
    t.strictSame(await store.listRequests(), [a], 'twice in one batch');
    await store.insertRequests([b, a]);
    await store.insertRequests([a]);
    t.strictSame(await store.listRequests(), [b, a], 'again across batches');
    // The first write wins: a replay with changed fields does not overwrite.
    await store.insertRequests([{ ...a, cost_usd: 99 }]);
    t.strictSame(await store.listRequests(), [b, a]);
    t.equal(await store.spendSince('team', '2025-01-01T00:00:00.000Z'), 0.75);
  });

  t.test('insertRequests lands a batch whole or not at all, however large', async (t) => {
    const store = await storeFor(t);
    const bad = { ...requestRow(), status: 'not a number' as unknown as number };
    await t.rejects(store.insertRequests([requestRow(), bad]), 'a bad row fails the batch');
    t.strictSame(await store.listRequests(), [], 'and none of it is written');

    // Big enough that a backing may split it into several statements.
    const base = Date.UTC(2025, 2, 1);
    const many = Array.from({ length: 5000 }, (_, i) =>
      requestRow({ ts: new Date(base + i * 1000).toISOString(), cost_usd: 0.125 }),
    );
    await t.rejects(store.insertRequests([...many, bad]), 'a bad row at the end fails a large batch');
    t.strictSame(await store.listRequests(), [], 'and none of it is written');
    await store.insertRequests(many);
    t.equal(await store.spendSince('team', new Date(base).toISOString()), 625);
    t.strictSame(await store.listRequests(2), [many[4999], many[4998]]);
  });

  t.test('listRequests is newest first and honours the limit', async (t) => {
    const store = await storeFor(t);
    t.strictSame(await store.listRequests(), []);
    const at = (s: number) => requestRow({ ts: new Date(Date.UTC(2025, 2, 1, 12, 0, s)).toISOString() });
    const rows = [at(3), at(1), at(5), at(2), at(4)];
    await store.insertRequests(rows.slice(0, 3));
    await store.insertRequests(rows.slice(3));
    const newestFirst = [...rows].sort((x, y) => (x.ts < y.ts ? 1 : -1));
    t.strictSame(await store.listRequests(), newestFirst);
    t.strictSame(await store.listRequests(2), newestFirst.slice(0, 2));
    t.strictSame(await store.listRequests(1), newestFirst.slice(0, 1));
  });

  t.test("spendSince sums only the profile's rows at or after since", async (t) => {
    const store = await storeFor(t);
    const since = '2025-03-01T00:00:00.000Z';
    t.equal(await store.spendSince('a', since), 0, 'an empty table gives 0');
    await store.insertRequests([
      requestRow({ profile: 'a', ts: '2025-02-28T23:59:59.999Z', cost_usd: 100 }),
      requestRow({ profile: 'a', ts: since, cost_usd: 0.25 }),
      requestRow({ profile: 'a', ts: '2025-03-01T00:00:00.001Z', cost_usd: 0.5 }),
      requestRow({ profile: 'a', ts: '2025-03-05T00:00:00.000Z', cost_usd: 1.125 }),
      requestRow({ profile: 'b', ts: '2025-03-02T00:00:00.000Z', cost_usd: 40 }),
    ]);
    t.equal(await store.spendSince('a', since), 1.875, 'boundary row included, the row 1 ms earlier not');
    t.equal(await store.spendSince('a', '2025-03-01T00:00:00.001Z'), 1.625);
    t.equal(await store.spendSince('a', '2025-02-01T00:00:00.000Z'), 101.875);
    t.equal(await store.spendSince('b', since), 40);
    t.equal(await store.spendSince('a', '2025-04-01T00:00:00.000Z'), 0, 'nothing since gives 0');
    t.equal(await store.spendSince('nobody', since), 0, 'unknown profile gives 0');
  });

  t.test('key caps: set at creation, changed, kept and cleared on the active key only', async (t) => {
    const store = await storeFor(t);
    const capped = await store.createKey(newKey({ profile: 'team', name: 'ci', daily_usd: 1, monthly_usd: 12.5 }));
    t.match(capped, { daily_usd: 1, monthly_usd: 12.5 }, 'created with caps');
    const monthOnly = await store.createKey(newKey({ profile: 'team', name: 'laptop', daily_usd: null, monthly_usd: 0.000001 }));
    t.strictSame([monthOnly.daily_usd, monthOnly.monthly_usd], [null, 0.000001], 'one cap alone, a micro-dollar kept exactly');
    t.strictSame(await store.keyByHash(capped.key_hash), capped);

    const changed = await store.setKeyCaps('team', 'ci', { daily_usd: 2.25, monthly_usd: null });
    t.strictSame(changed, { ...capped, daily_usd: 2.25, monthly_usd: null }, 'both caps set at once: one changed, one cleared');
    t.strictSame(await store.keyByHash(capped.key_hash), changed);
    t.strictSame(await store.keyByHash(monthOnly.key_hash), monthOnly, 'other keys untouched');
    const kept = await store.setKeyCaps('team', 'ci', { monthly_usd: 40 });
    t.strictSame([kept?.daily_usd, kept?.monthly_usd], [2.25, 40], 'a cap left out is kept');
    t.strictSame(await store.setKeyCaps('team', 'ci', {}), kept, 'nothing given: nothing changes');
    const cleared = await store.setKeyCaps('team', 'ci', { daily_usd: null, monthly_usd: null });
    t.strictSame([cleared?.daily_usd, cleared?.monthly_usd], [null, null], 'cleared');

    t.equal(await store.setKeyCaps('team', 'nobody', { daily_usd: 1, monthly_usd: null }), undefined, 'unknown name');
    t.equal(await store.setKeyCaps('ops', 'ci', { daily_usd: 1, monthly_usd: null }), undefined, 'name exists only in another profile');
    await store.revokeKey('team', 'ci', '2025-03-02T00:00:00.000Z');
    t.equal(await store.setKeyCaps('team', 'ci', { daily_usd: 1, monthly_usd: null }), undefined, 'a revoked key is not changed');
    const again = await store.createKey(newKey({ profile: 'team', name: 'ci' }));
    const set = await store.setKeyCaps('team', 'ci', { daily_usd: 3, monthly_usd: 30 });
    t.equal(set?.id, again.id, 'the active key of the name, not the revoked one');
    t.equal((await store.listKeys('team')).find((k) => k.id === capped.id)?.daily_usd, null, 'the revoked key keeps what it had');
  });

  t.test("keyLedgerSpendSince sums one key's rows by id, from midnight or any time", async (t) => {
    const store = await storeFor(t);
    const since = '2025-03-01T00:00:00.000Z';
    t.equal(await store.keyLedgerSpendSince(7, since), 0, 'an empty store gives 0');
    await store.insertRequests([
      requestRow({ key_id: 7, ts: '2025-02-28T23:59:59.999Z', cost_usd: 100 }),
      requestRow({ key_id: 7, ts: since, cost_usd: 0.25 }),
      requestRow({ key_id: 7, ts: '2025-03-01T10:00:00.000Z', cost_usd: 0.5, profile: 'other', key_prefix: 'sk-sl-0001' }),
      requestRow({ key_id: 7, ts: '2025-03-05T00:00:00.000Z', cost_usd: 1.125 }),
      // The same display prefix, another key: counted apart.
      requestRow({ key_id: 8, ts: '2025-03-02T00:00:00.000Z', cost_usd: 40 }),
      requestRow({ ts: '2025-03-02T00:00:00.000Z', cost_usd: 9 }),
    ]);
    t.equal(await store.keyLedgerSpendSince(7, since), 1.875, 'boundary row included, the row 1 ms earlier not, whatever its profile');
    t.equal(await store.keyLedgerSpendSince(7, '2025-03-05T00:00:00.000Z'), 1.125, 'from a later midnight');
    t.equal(await store.keyLedgerSpendSince(7, '2025-03-01T00:00:00.001Z'), 1.625, 'from a time that is not a midnight');
    t.equal(await store.keyLedgerSpendSince(8, since), 40);
    t.equal(await store.keyLedgerSpendSince(9, since), 0, 'unknown key gives 0');
    t.equal(await store.ledgerSpendSince('team', since), 50.375, "the profile's ledger counts every row, with a key or not");
  });

  t.test('a reopened store still has the data', async (t) => {
    const first = await open(t);
    const key = await first.createKey(newKey({ expires_at: '2026-01-01T00:00:00.000Z' }));
    await first.touchKey(key.id, '2025-03-01T10:30:00.000Z');
    const audit: AuditRow = { ts: '2025-03-01T10:00:00.000Z', ip: '203.0.113.9', prefix: '', outcome: 'malformed_key' };
    await first.insertAudit([audit]);
    const rows = [requestRow({ cost_usd: 0.000734, tools: ['x'] }), requestRow({ stream: true })].sort(byId);
    await first.insertRequests(rows);
    await first.close();

    const second = await storeFor(t);
    t.strictSame(await second.listKeys(), [{ ...key, last_used_at: '2025-03-01T10:30:00.000Z' }]);
    t.strictSame((await second.listAudit()).map(({ id: _id, ...row }) => row), [audit]);
    t.strictSame([...(await second.listRequests())].sort(byId), rows);
    t.equal(await second.spendSince('team', '2025-03-01T00:00:00.000Z'), 0.000734);
    const next = await second.createKey(newKey());
    t.ok(next.id > key.id, 'ids keep increasing after reopening');
  });
}
