// plugins/key-auth.ts and the lookup cache under it (lib/key-cache.ts), without a server: which
// header carries the key, the outcome audited for each refusal (steps 2–5) with its prefix, that a
// malformed key is refused before any lookup, the expiry boundary, and the cache's 60 s, its
// last_used_at touches on misses only, its caching of unknown hashes, its stale fallback, and one
// query for lookups of a hash in flight at once.

import t from 'tap';
import type { Ctx } from '../../lib/context.ts';
import { GatewayError } from '../../lib/errors.ts';
import { KeyCache } from '../../lib/key-cache.ts';
import { displayPrefix, generateKey, hashKey, parseKey } from '../../lib/keys.ts';
import type { AuditOutcome, KeyRow, Store } from '../../lib/store/store.ts';
import { keyAuth, presentedKey } from '../../plugins/key-auth.ts';

const NOW = Date.UTC(2031, 4, 10, 12);

function row(key: string, over: Partial<KeyRow> = {}): KeyRow {
  const { profile, token } = parseKey(key)!;
  return {
    id: 7, key_hash: hashKey(key), prefix: displayPrefix(profile, token), profile, name: 'n', ip_allow: '',
    created_at: new Date(NOW - 86_400_000).toISOString(), expires_at: null, last_used_at: null, revoked_at: null, daily_usd: null, monthly_usd: null, ...over,
  };
}

/** A Store with only what the cache uses; counts lookups and touches. */
function fakeStore(rows: KeyRow[]) {
  const calls = { lookups: [] as string[], touches: [] as Array<[number, string]>, fail: false };
  const store = {
    async keyByHash(hash: string) {
      calls.lookups.push(hash);
      if (calls.fail) throw new Error('store down');
      const r = rows.find((k) => k.key_hash === hash);
      return r ? { ...r } : undefined;
    },
    async touchKey(id: number, at: string) {
      calls.touches.push([id, at]);
    },
  } as unknown as Store;
  return { store, calls };
}

function setup(rows: KeyRow[]) {
  const clock = { now: NOW };
  const { store, calls } = fakeStore(rows);
  const failures: Array<{ outcome: AuditOutcome; prefix: string }> = [];
  const keyCache = new KeyCache({ store, now: () => clock.now, onTouchError: () => {} });
  const plugin = keyAuth({ keyCache, now: () => clock.now, async authFailure(_ctx, outcome, prefix) { failures.push({ outcome, prefix }); } });
  async function run(headers: Record<string, string>): Promise<{ ctx: Ctx; err?: GatewayError }> {
    const ctx = { id: 'r', ip: '203.0.113.1', req: { headers } } as unknown as Ctx;
    try {
      await plugin.run(ctx);
      return { ctx };
    } catch (err) {
      return { ctx, err: err as GatewayError };
    }
  }
  return { clock, calls, failures, run };
}

t.test('presentedKey reads Bearer or x-api-key', async (t) => {
  t.equal(presentedKey({ authorization: 'Bearer abc' }), 'abc');
  t.equal(presentedKey({ authorization: 'bearer abc' }), 'abc', 'the scheme is case-insensitive');
  t.equal(presentedKey({ authorization: 'BEARER  abc ' }), 'abc', 'surrounding blanks go');
  t.equal(presentedKey({ 'x-api-key': 'xyz' }), 'xyz');
  t.equal(presentedKey({ authorization: 'Bearer abc', 'x-api-key': 'xyz' }), 'abc', 'Bearer wins when both are sent');
  t.equal(presentedKey({ authorization: 'Basic dXNlcjpwYXNz', 'x-api-key': 'xyz' }), 'xyz', 'another scheme falls back to x-api-key');
  t.equal(presentedKey({ authorization: 'Basic dXNlcjpwYXNz' }), undefined);
  t.equal(presentedKey({ authorization: 'Bearer ' }), undefined);
  t.equal(presentedKey({ 'x-api-key': '' }), undefined);
  t.equal(presentedKey({}), undefined);
});

t.test('each refusal is audited with its outcome and prefix, and all throw the same error', async (t) => {
  const valid = generateKey('dev');
  const revoked = generateKey('dev');
  const expired = generateKey('dev');
  const expiresNow = generateKey('dev');
  const later = generateKey('assistant');
  const unknown = generateKey('dev');
  const s = setup([
    row(valid),
    row(revoked, { id: 8, revoked_at: new Date(NOW - 1000).toISOString() }),
    row(expired, { id: 9, expires_at: new Date(NOW - 1000).toISOString() }),
    row(expiresNow, { id: 10, expires_at: new Date(NOW).toISOString() }),
    row(later, { id: 11, expires_at: new Date(NOW + 1000).toISOString() }),
  ]);
  const pre = (k: string) => row(k).prefix;
  const cases: Array<[Record<string, string>, AuditOutcome, string]> = [
    [{}, 'missing_key', ''],
    [{ authorization: 'Bearer ' }, 'missing_key', ''],
    [{ authorization: 'Bearer sluice_dev_short' }, 'malformed_key', ''],
    [{ 'x-api-key': `${valid}0` }, 'malformed_key', ''],
    [{ 'x-api-key': valid.toUpperCase() }, 'malformed_key', ''],
    [{ authorization: `Bearer ${unknown}` }, 'unknown_key', pre(unknown)],
    [{ 'x-api-key': revoked }, 'revoked_key', pre(revoked)],
    [{ authorization: `Bearer ${expired}` }, 'expired_key', pre(expired)],
    [{ authorization: `Bearer ${expiresNow}` }, 'expired_key', pre(expiresNow)],
  ];
  for (const [headers, outcome, prefix] of cases) {
    const before = s.failures.length;
    const { ctx, err } = await s.run(headers);
    t.ok(err instanceof GatewayError, `${outcome}: refused`);
    t.equal(err?.code, 'invalid_api_key', `${outcome}: one error for every refusal`);
    t.same(s.failures.slice(before), [{ outcome, prefix }], `${outcome}: audited once, prefix "${prefix}"`);
    t.equal(ctx.key, undefined, `${outcome}: no key on the context`);
  }
  t.equal(s.calls.lookups.length, 4, 'only well-formed keys were looked up');
  for (const [headers, name] of [[{ authorization: `Bearer ${valid}` }, 'Bearer'], [{ 'x-api-key': later }, 'x-api-key']] as const) {
    const { ctx, err } = await s.run(headers);
    t.equal(err, undefined, `${name}: accepted`);
    t.equal(ctx.key?.row.key_hash, hashKey(presentedKey(headers)!), `${name}: the key is on the context`);
  }
  t.equal(s.failures.length, cases.length, 'valid keys are not audited');
});

t.test('the cache: 60 s, unknown hashes too, touches on misses only', async (t) => {
  const valid = generateKey('dev');
  const s = setup([row(valid, { ip_allow: '203.0.113.0/24,2001:db8::/64' })]);
  const hash = hashKey(valid);
  const first = await s.run({ authorization: `Bearer ${valid}` });
  t.same(s.calls.lookups, [hash]);
  t.same(s.calls.touches, [[7, new Date(NOW).toISOString()]], 'a miss touches last_used_at');
  t.equal(first.ctx.key?.row.last_used_at, new Date(NOW).toISOString());
  t.equal(first.ctx.key?.allow?.check('203.0.113.9', 'ipv4'), true, 'the allowlist is compiled with the key');
  t.equal(first.ctx.key?.allow?.check('2001:db8::1', 'ipv6'), true);
  t.equal(first.ctx.key?.allow?.check('198.51.100.1', 'ipv4'), false);
  s.clock.now = NOW + 59_999;
  await s.run({ authorization: `Bearer ${valid}` });
  t.equal(s.calls.lookups.length, 1, 'a hit within 60 s');
  t.equal(s.calls.touches.length, 1, 'a hit does not touch');
  s.clock.now = NOW + 60_000;
  await s.run({ authorization: `Bearer ${valid}` });
  t.equal(s.calls.lookups.length, 2, 'a miss at 60 s');
  t.same(s.calls.touches.at(-1), [7, new Date(NOW + 60_000).toISOString()]);

  const unknown = generateKey('dev');
  for (let i = 0; i < 5; i++) await s.run({ 'x-api-key': unknown });
  t.equal(s.calls.lookups.length, 3, 'an unknown hash is looked up once and cached');
  t.equal(s.calls.touches.length, 2, 'an unknown hash touches nothing');
});

t.test('the cache: a store failure keeps a known key on its last state, and fails an unseen one', async (t) => {
  const valid = generateKey('dev');
  const s = setup([row(valid)]);
  await s.run({ authorization: `Bearer ${valid}` });
  s.calls.fail = true;
  s.clock.now = NOW + 61_000;
  const stale = await s.run({ authorization: `Bearer ${valid}` });
  t.equal(stale.err, undefined, 'a key seen before keeps working while the store is away');
  const unseen = await s.run({ authorization: `Bearer ${generateKey('dev')}` });
  t.ok(unseen.err instanceof GatewayError && unseen.err.code === 'store_unavailable', 'an unseen key answers 503 store_unavailable, not a 401');
  t.equal(s.failures.length, 0, 'a store failure is not an auth failure');
});

t.test('the cache: lookups of one hash in flight at once share one query and one touch', async (t) => {
  const valid = generateKey('dev');
  const s = setup([row(valid)]);
  // A burst arriving as the entry expires: every request misses before the first lookup answers.
  const burst = await Promise.all(Array.from({ length: 50 }, () => s.run({ authorization: `Bearer ${valid}` })));
  t.ok(burst.every((r) => r.err === undefined && r.ctx.key?.row.id === 7), 'all 50 pass');
  t.same(s.calls.lookups, [hashKey(valid)], 'one store query');
  t.equal(s.calls.touches.length, 1, 'one touch');
  s.clock.now = NOW + 60_000;
  await Promise.all([s.run({ authorization: `Bearer ${valid}` }), s.run({ authorization: `Bearer ${valid}` })]);
  t.equal(s.calls.lookups.length, 2, 'once expired, the next burst queries once more');

  s.calls.fail = true;
  const unseen = generateKey('dev');
  const failed = await Promise.all([s.run({ 'x-api-key': unseen }), s.run({ 'x-api-key': unseen })]);
  t.ok(failed.every((r) => r.err instanceof GatewayError && r.err.code === 'store_unavailable'), 'a failed query fails every request that shared it');
  t.equal(s.calls.lookups.length, 3, 'with one query');
  s.calls.fail = false;
  t.equal((await s.run({ 'x-api-key': unseen })).err?.code, 'invalid_api_key', 'the failure is not kept: the next request asks again');
  t.equal(s.calls.lookups.length, 4);
});

t.test('the cache primed from one listing: keys used since the cut are hits, others are looked up', async (t) => {
  const recent = generateKey('dev');
  const stale = generateKey('dev');
  const never = generateKey('dev');
  const rows = [
    row(recent, { id: 1, last_used_at: new Date(NOW - 3_600_000).toISOString(), ip_allow: '203.0.113.0/24' }),
    row(stale, { id: 2, last_used_at: new Date(NOW - 3 * 86_400_000).toISOString() }),
    row(never, { id: 3 }),
  ];
  const { store, calls } = fakeStore(rows);
  const cache = new KeyCache({ store, now: () => NOW, onTouchError: () => {} });
  t.equal(cache.prime(rows, NOW - 86_400_000), 1, 'only the key used in the last day');
  const hit = cache.peek(hashKey(recent));
  t.equal(hit?.row.id, 1, 'a hit without a promise');
  t.equal(hit?.allow?.check('203.0.113.7', 'ipv4'), true, 'with its allowlist compiled');
  t.equal(cache.peek(hashKey(stale)), undefined);
  await cache.lookup(hashKey(stale));
  t.same(calls.lookups, [hashKey(stale)], 'the others go to the store as before');
  t.same(calls.touches.map(([id]) => id), [2], 'priming touched nothing');
  const small = new KeyCache({ store, now: () => NOW, max: 1, onTouchError: () => {} });
  t.equal(small.prime([rows[0]!, { ...rows[1]!, last_used_at: rows[0]!.last_used_at }], 0), 1, 'never past the bound');
});

t.test('the cache is bounded', async (t) => {
  const { store, calls } = fakeStore([]);
  const cache = new KeyCache({ store, now: () => NOW, max: 2, onTouchError: () => {} });
  await cache.lookup('a');
  await cache.lookup('b');
  await cache.lookup('c');
  t.equal(calls.lookups.length, 3);
  await cache.lookup('c');
  await cache.lookup('b');
  t.equal(calls.lookups.length, 3, 'the two newest are still cached');
  await cache.lookup('a');
  t.equal(calls.lookups.length, 4, 'the oldest was evicted');
});
