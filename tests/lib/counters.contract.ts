// The Counters contract: every behaviour a backing must show, run as-is against MemoryCounters and
// RedisCounters (tests/lib/counters-memory.test.ts, tests/lib/counters-redis.test.ts). The suite
// asserts only on the Counters interface; it never reaches into a backing's keys or client.
// Also here: `openRedisCounters`, a RedisCounters on its own random key namespace, removed at
// teardown, that FAILS (never skips) when Redis is unreachable. Other tests reuse it.

import { randomBytes } from 'node:crypto';
import { setTimeout as delay } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Test } from 'tap';
import type { Counters } from '../../lib/counters/counters.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { RedisCounters } from '../../lib/counters/redis.ts';
import { createLogger } from '../../lib/log.ts';

export const REDIS_URL = process.env.SLUICE_TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

export interface Backing {
  kind: Counters['kind'];
  /** A fresh, empty Counters for t, closed at t's teardown. */
  open(t: Test): Promise<Counters>;
}

/** A name no earlier run used: Redis outlives test runs. */
export function unique(name: string): string {
  return `${name}:${randomBytes(4).toString('hex')}`;
}

/**
 * Resolves when an ioredis client is ready; rejects after `ms` naming the last connection error,
 * or at the first connection error with `failFast` (a first connect: Redis is not there).
 */
export async function whenReady(client: Redis, ms: number, opts: { failFast?: boolean } = {}): Promise<void> {
  if (client.status === 'ready') return;
  let lastError = '';
  let onReady!: () => void;
  let onError!: (err: Error) => void;
  let onClose!: () => void;
  let timer: NodeJS.Timeout | undefined;
  try {
    await new Promise<void>((resolve, reject) => {
      const unreachable = () => new Error(`Redis is not reachable (${lastError || client.status}); start it or set SLUICE_TEST_REDIS_URL`);
      onReady = resolve;
      onError = (err) => {
        lastError = err.message;
        if (opts.failFast) reject(unreachable());
      };
      onClose = () => reject(unreachable());
      client.once('ready', onReady);
      client.on('error', onError);
      if (opts.failFast) client.once('close', onClose);
      timer = setTimeout(() => reject(unreachable()), ms);
    });
  } finally {
    clearTimeout(timer);
    client.off('ready', onReady);
    client.off('error', onError);
    client.off('close', onClose);
  }
}

/** A key namespace of its own for t; every key under it is deleted at t's teardown. */
export function redisNamespace(t: Test): string {
  const prefix = `sluice-test-${randomBytes(6).toString('hex')}:`;
  t.teardown(() => deleteNamespace(prefix));
  return prefix;
}

async function deleteNamespace(prefix: string): Promise<void> {
  const admin = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null });
  admin.on('error', () => {}); // connect() below rejects with the same error
  try {
    try {
      await admin.connect();
    } catch {
      return; // Redis unreachable: the test has failed on that already, and wrote nothing here
    }
    let cursor = '0';
    do {
      const [next, keys] = await admin.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 500);
      if (keys.length > 0) await admin.del(...keys);
      cursor = next;
    } while (cursor !== '0');
  } finally {
    admin.disconnect();
  }
}

/**
 * A RedisCounters on `prefix` (a fresh namespace unless given), connected and ready, closed at
 * t's teardown. Redis being unreachable is a failure: this throws, and the test fails with it.
 */
export async function openRedisCounters(
  t: Test,
  opts: { url?: string; prefix?: string; log?: Logger; commandTimeoutMs?: number } = {},
): Promise<RedisCounters> {
  const prefix = opts.prefix ?? redisNamespace(t);
  const counters = new RedisCounters({ url: opts.url ?? REDIS_URL, log: opts.log ?? createLogger('silent'), prefix, commandTimeoutMs: opts.commandTimeoutMs });
  t.teardown(() => counters.close());
  await whenReady(counters.client, 3000, { failFast: true });
  return counters;
}

/** A fresh backing of either kind for one test, closed at its end (Redis in a namespace of its own). */
export async function freshCounters(t: Test, kind: 'memory' | 'redis'): Promise<Counters> {
  if (kind === 'redis') return openRedisCounters(t);
  const c = new MemoryCounters();
  t.teardown(() => c.close());
  return c;
}

export function countersContract(t: Test, backing: Backing): void {
  t.test('kind names the backing, and a healthy backing is not degraded', async (t) => {
    const c = await backing.open(t);
    t.equal(c.kind, backing.kind);
    t.equal(c.degraded, false);
  });

  t.test('consume counts within the limit and refuses beyond it', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('within');
    const seen = [];
    for (let i = 0; i < 5; i++) seen.push(await c.consume(bucket, 3, 60));
    t.same(seen.map((v) => v.allowed), [true, true, true, false, false]);
    t.same(seen.slice(0, 3).map((v) => v.count), [1, 2, 3], 'the count includes this hit');
    for (const v of seen.slice(3)) t.ok(v.count > 3, `a refused hit reports a count over the limit (${v.count})`);
    for (const v of seen) t.ok(v.msLeft > 0 && v.msLeft <= 60_000, `0 < msLeft ${v.msLeft} <= the window`);
    t.ok(seen[4]!.msLeft <= seen[0]!.msLeft, 'a fixed window: later hits do not push its end out');
  });

  t.test('points are counted as given', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('points');
    t.match(await c.consume(bucket, 10, 60, { points: 4 }), { allowed: true, count: 4 });
    t.match(await c.consume(bucket, 10, 60, { points: 6 }), { allowed: true, count: 10 });
    t.match(await c.consume(bucket, 10, 60, { points: 1 }), { allowed: false });
  });

  t.test('concurrent hits never admit more than the limit', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('race');
    const all = await Promise.all(Array.from({ length: 25 }, () => c.consume(bucket, 10, 60)));
    const allowed = all.filter((v) => v.allowed);
    t.equal(allowed.length, 10);
    t.same(allowed.map((v) => v.count).sort((a, b) => a - b), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 'each admitted hit has its own count');
  });

  t.test('a block refuses for its whole duration, beyond the window', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('block');
    t.match(await c.consume(bucket, 2, 1, { blockS: 30 }), { allowed: true, count: 1 });
    t.match(await c.consume(bucket, 2, 1, { blockS: 30 }), { allowed: true, count: 2 });
    const over = await c.consume(bucket, 2, 1, { blockS: 30 });
    t.equal(over.allowed, false);
    t.ok(over.msLeft > 1000 && over.msLeft <= 30_000, `the refusal lasts the block (msLeft ${over.msLeft}), not the 1 s window`);
    const peeked = await c.peek(bucket, 2, 1, { blockS: 30 });
    t.equal(peeked.allowed, false, 'peek sees the block');
    t.ok(peeked.msLeft > 1000, `peek reports the block's end (msLeft ${peeked.msLeft})`);
    t.match(await c.consume(bucket, 2, 1, { blockS: 30 }), { allowed: false }, 'still refusing');
  });

  t.test('peek reports a window without counting', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('peek');
    t.same(await c.peek(bucket, 3, 60), { allowed: true, count: 0, msLeft: 0 }, 'an unknown bucket is empty');
    await c.consume(bucket, 3, 60);
    await c.consume(bucket, 3, 60);
    const p1 = await c.peek(bucket, 3, 60);
    t.match(p1, { allowed: true, count: 2 });
    t.ok(p1.msLeft > 0 && p1.msLeft <= 60_000);
    t.match(await c.peek(bucket, 3, 60), { count: 2 }, 'peeking twice counts nothing');
    t.match(await c.consume(bucket, 3, 60), { allowed: true, count: 3 }, 'the peeks were not counted');
    t.match(await c.peek(bucket, 3, 60), { allowed: true, count: 3 }, 'at the limit is not over it');
    await c.consume(bucket, 3, 60);
    const over = await c.peek(bucket, 3, 60);
    t.equal(over.allowed, false, 'over the limit');
    t.ok(over.count > 3);
  });

  t.test('incr adds integers exactly and returns the total', async (t) => {
    const c = await backing.open(t);
    const key = unique('incr');
    t.equal(await c.incr(key, 5, 60), 5, 'a new counter starts at the amount');
    t.equal(await c.incr(key, 7, 60), 12);
    t.equal(await c.get(key), 12);
    const totals = await Promise.all(Array.from({ length: 200 }, () => c.incr(key, 1_234_567, 60)));
    t.equal(await c.get(key), 12 + 200 * 1_234_567, 'concurrent adds lose nothing');
    t.equal(new Set(totals).size, 200, 'each add saw its own total');
    t.ok(totals.every(Number.isInteger));
    const big = unique('big');
    await c.incr(big, 4_000_000_000, 60);
    t.equal(await c.incr(big, 4_000_000_001, 60), 8_000_000_001, 'totals beyond 32 bits stay exact');
  });

  t.test('get and getText of a missing key are undefined', async (t) => {
    const c = await backing.open(t);
    t.equal(await c.get(unique('missing')), undefined);
    t.equal(await c.getText(unique('missing')), undefined);
  });

  t.test('seed sets only when missing and returns the value held', async (t) => {
    const c = await backing.open(t);
    const key = unique('seed');
    t.equal(await c.seed(key, 10, 60), 10);
    t.equal(await c.seed(key, 99, 60), 10, 'a second seed keeps the first value');
    t.equal(await c.get(key), 10);
    t.equal(await c.incr(key, 5, 60), 15, 'incr continues from the seed');
    t.equal(await c.seed(key, 0, 60), 15, 'a seed never lowers a live counter');
    const counted = unique('counted');
    await c.incr(counted, 3, 60);
    t.equal(await c.seed(counted, 100, 60), 3, 'a counter made by incr is not replaced');
    const raced = unique('raced');
    const values = await Promise.all([1, 2, 3, 4, 5, 6, 7, 8].map((v) => c.seed(raced, v, 60)));
    t.equal(new Set(values).size, 1, `concurrent seeds all return the one value held (${values.join(',')})`);
    t.equal(await c.get(raced), values[0]);
  });

  t.test('setText and getText', async (t) => {
    const c = await backing.open(t);
    const key = unique('text');
    await c.setText(key, 'agent', 60);
    t.equal(await c.getText(key), 'agent');
    await c.setText(key, 'reasoning', 60);
    t.equal(await c.getText(key), 'reasoning', 'setText replaces');
    const odd = 'ünïcode ✓ with spaces: and "quotes"';
    await c.setText(key, odd, 60);
    t.equal(await c.getText(key), odd, 'text comes back exactly');
  });

  // The one test that lets time pass: the end of a window and the expiry of a ttl are the
  // behaviour under test and no event announces them, so it waits them out, once, for all.
  t.test('windows end, blocks outlast them, ttls expire', async (t) => {
    const c = await backing.open(t);
    const plain = unique('window');
    const blocked = unique('blocked');
    const n = unique('n');
    const stretched = unique('stretched');
    const kept = unique('kept');
    const seeded = unique('seeded');
    const text = unique('text');
    t.match(await c.consume(plain, 1, 1), { allowed: true, count: 1 });
    t.match(await c.consume(plain, 1, 1), { allowed: false });
    await c.consume(blocked, 1, 1, { blockS: 30 });
    t.match(await c.consume(blocked, 1, 1, { blockS: 30 }), { allowed: false });
    await c.incr(n, 1, 1);
    await c.incr(stretched, 1, 1);
    await c.incr(stretched, 1, 3600); // a later ttl does not extend the first
    await c.incr(kept, 1, 3600);
    await c.seed(seeded, 7, 1);
    await c.setText(text, 'fast', 1);
    t.equal(await c.get(n), 1, 'alive before its ttl');
    await delay(1200);
    t.match(await c.consume(plain, 1, 1), { allowed: true, count: 1 }, 'a new window starts from zero');
    t.match(await c.consume(blocked, 1, 1, { blockS: 30 }), { allowed: false }, 'the block outlasts the window');
    t.equal(await c.get(n), undefined, 'incr ttl expired');
    t.equal(await c.get(stretched), undefined, 'the ttl counts from creation');
    t.equal(await c.get(kept), 1, 'a longer ttl is still alive');
    t.equal(await c.get(seeded), undefined, 'seed ttl expired');
    t.equal(await c.getText(text), undefined, 'setText ttl expired');
    t.equal(await c.incr(n, 4, 60), 4, 'an expired counter starts over');
  });

  t.test('check: peeks and consumes in order; the first refusal stops the counting', async (t) => {
    const c = await backing.open(t);
    const ip = unique('check-ip');
    const key = unique('check-key');
    const user = unique('check-user');
    const checks = [
      { bucket: ip, limit: 1, windowS: 60, blockS: 60, peek: true },
      { bucket: key, limit: 3, windowS: 60 },
      { bucket: user, limit: 1, windowS: 60 },
    ];
    const spend = unique('check-spend');
    await c.incr(spend, 42, 60);
    const { verdicts: first, values } = await c.check(checks, [spend, unique('check-missing')]);
    t.same(values, [42, undefined], 'plain counters read in the same step');
    t.match(first, [{ allowed: true, count: 0 }, { allowed: true, count: 1 }, { allowed: true, count: 1 }]);
    t.ok(first[1]!.msLeft > 59_000 && first[1]!.msLeft <= 60_000, 'the window runs from its first point');
    const { verdicts: second } = await c.check(checks);
    t.match(second, [{ allowed: true }, { allowed: true, count: 2 }, { allowed: false, count: 2 }], 'the user window refuses');
    t.equal(c.refused(user, 1, 60), true, 'a refusal is remembered');
    t.equal(c.refused(key, 3, 60), false, 'an allowance is not');
    t.equal(c.refused(user, 1, 60, { next: true }), true, 'next: at the limit or over');
    t.match(await c.consume(key, 3, 60), { count: 3 }, 'check and consume count in the same window');
    t.equal(c.refused(key, 3, 60, { next: true }), true, 'a window at its limit refuses the next point');
    const { verdicts: third } = await c.check(checks);
    t.match(third, [{ allowed: true }, { allowed: false, count: 4 }, undefined], 'after the key refuses, the user is not counted');
    t.match(await c.peek(user, 1, 60), { count: 2 });
    // The address blocked (by consume, as auth failures count): the peek refuses and nothing is counted.
    await c.consume(ip, 1, 60, { blockS: 60 });
    await c.consume(ip, 1, 60, { blockS: 60 });
    const { verdicts: blocked } = await c.check(checks);
    t.match(blocked, [{ allowed: false }, undefined, undefined]);
    t.equal(c.refused(ip, 1, 60, { blockS: 60 }), true);
    t.match(await c.peek(key, 3, 60), { count: 4 }, 'the key was not counted while the address was blocked');
    t.equal(c.refused(unique('never'), 1, 60), false);
  });

  t.test('check: a consume with a block counts in the same window as consume, and crossing the limit blocks', async (t) => {
    const c = await backing.open(t);
    const bucket = unique('check-block');
    const checks = [{ bucket, limit: 2, windowS: 1, blockS: 30 }];
    t.match((await c.check(checks)).verdicts, [{ allowed: true, count: 1 }]);
    t.match(await c.consume(bucket, 2, 1, { blockS: 30 }), { allowed: true, count: 2 }, 'consume continues the window check opened');
    const { verdicts: [over] } = await c.check(checks);
    t.match(over, { allowed: false, count: 3 }, 'the point over the limit is refused');
    t.ok(over!.msLeft > 1000 && over!.msLeft <= 30_000, `the refusal lasts the block (msLeft ${over!.msLeft}), not the 1 s window`);
    t.equal(c.refused(bucket, 2, 1, { blockS: 30 }), true, 'the refusal is remembered');
    const peeked = await c.peek(bucket, 2, 1, { blockS: 30 });
    t.match(peeked, { allowed: false, count: 3 }, 'peek sees the block check made');
    const again = (await c.check([...checks, { bucket: unique('after'), limit: 5, windowS: 60 }])).verdicts;
    t.match(again, [{ allowed: false, count: 4 }, undefined], 'still refusing, and nothing after it counted');
    t.ok(again[0]!.msLeft <= over!.msLeft, 'a later point does not push the block out');
    t.match(await c.peek(unique('untouched'), 2, 1, { blockS: 30 }), { allowed: true, count: 0 }, 'another bucket is open');
  });

  t.test('operations issued together: each answers for itself and stops only at its own refusal', async (t) => {
    const c = await backing.open(t);
    const full = unique('together-full');
    const a = unique('together-a');
    const b = unique('together-b');
    const spend = unique('together-spend');
    await c.consume(full, 1, 60, { points: 2 });
    await c.incr(spend, 7, 60);
    const [first, second, third, fourth] = await Promise.all([
      c.check([{ bucket: full, limit: 1, windowS: 60, peek: true }, { bucket: a, limit: 5, windowS: 60 }], [spend]),
      c.check([{ bucket: a, limit: 5, windowS: 60 }, { bucket: b, limit: 5, windowS: 60 }], [unique('together-missing'), spend]),
      c.consume(b, 5, 60, { points: 3 }),
      c.peek(a, 5, 60),
    ]);
    t.match(first, { verdicts: [{ allowed: false, count: 2 }, undefined], values: [7] }, 'the first refuses and counts nothing after');
    t.match(second, { verdicts: [{ allowed: true, count: 1 }, { allowed: true, count: 1 }], values: [undefined, 7] }, 'the second counts its own windows');
    t.match(third, { allowed: true, count: 4 }, 'a consume beside them counts its points after them');
    t.match(fourth, { allowed: true, count: 1 }, 'a peek beside them sees what came before it');
  });

  t.test('refused ends with the window', async (t) => {
    const c = await backing.open(t);
    const b = unique('short');
    await c.consume(b, 1, 1);
    t.match(await c.consume(b, 1, 1), { allowed: false });
    t.equal(c.refused(b, 1, 1), true);
    t.equal(c.refused(b, 2, 1), false, 'another limit is another window');
    await delay(1100);
    t.equal(c.refused(b, 1, 1), false, 'the window ended');
  });
}
