// SpendCache (lib/counters/spend-cache.ts) over MemoryCounters wrapped to log every call: adds of
// one event-loop turn reach the backing as one incr per counter, after the turn; reads are served
// from the last value learned (observed, read or returned by an incr) plus what is still pending
// or in flight; a stale value is refreshed behind the caller; a failed incr is retried; an
// answer from the fallback (the backing degraded) is not taken as the shared total. The flush timer
// and the clock are the test's own (`schedule`, `now`): no assertion waits on a real timer's turn.

import { setImmediate as turn } from 'node:timers/promises';
import t, { type Test } from 'tap';
import type { Counters } from '../../lib/counters/counters.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { SpendCache } from '../../lib/counters/spend-cache.ts';

function logged(t: Test) {
  const inner = new MemoryCounters();
  t.teardown(() => inner.close());
  const calls: string[] = [];
  let failIncr = 0;
  const counters = {
    get: async (k: string) => (calls.push(`get ${k}`), inner.get(k)),
    seed: async (k: string, v: number, ttl: number) => (calls.push(`seed ${k} ${v}`), inner.seed(k, v, ttl)),
    incr: async (k: string, a: number, ttl: number) => {
      calls.push(`incr ${k} ${a}`);
      if (failIncr > 0) {
        failIncr--;
        throw new Error('down');
      }
      return inner.incr(k, a, ttl);
    },
  } as unknown as Counters;
  return { inner, calls, counters, failNext: (n: number) => (failIncr = n) };
}

/** A flush timer the test fires itself: what SpendCache asked for, in order. */
function manualTimer() {
  const asked: Array<{ fn: () => void; ms: number }> = [];
  return { asked, schedule: (fn: () => void, ms: number) => void asked.push({ fn, ms }) };
}

t.test('adds travel together, one per counter, when the flush timer fires (10 ms after the first by default)', async (t) => {
  const { calls, counters, inner } = logged(t);
  const timer = manualTimer();
  const c = new SpendCache(counters, { schedule: timer.schedule });
  for (let i = 0; i < 5; i++) c.incr('day', 10, 60);
  c.incr('month', 7, 60);
  t.same(calls, [], 'nothing sent while the turn runs');
  t.equal(await c.get('day'), 50, 'counted here at once');
  await turn();
  t.same(calls.filter((x) => x.startsWith('incr')), [], 'nor at the end of the turn');
  t.same(timer.asked.map((a) => a.ms), [10], 'one timer for all of them, 10 ms');
  timer.asked[0]!.fn();
  await c.flush();
  t.same(calls.filter((x) => x.startsWith('incr')), ['incr day 50', 'incr month 7'], 'one incr per counter');
  t.equal(await inner.get('day'), 50);
  t.equal(await c.get('day'), 50, 'not counted twice once sent');
});

t.test('the default timer sends them by itself (waiting for the send, not for a time)', async (t) => {
  const { counters, inner } = logged(t);
  let sent!: () => void;
  const firstSend = new Promise<void>((r) => (sent = r));
  const incr = counters.incr.bind(counters);
  counters.incr = (k, a, ttl) => (sent(), incr(k, a, ttl));
  const c = new SpendCache(counters);
  c.incr('day', 10, 60);
  const alive = setInterval(() => {}, 1000); // the timer is unref'd: a server keeps the process up, this test must
  await firstSend;
  clearInterval(alive);
  await c.flush();
  t.equal(await inner.get('day'), 10);
});

t.test('with flushMs 0, adds travel at the end of the turn', async (t) => {
  const { calls, counters } = logged(t);
  const c = new SpendCache(counters, { flushMs: 0 });
  c.incr('day', 10, 60);
  c.incr('day', 5, 60);
  t.same(calls, [], 'nothing sent while the turn runs');
  await turn();
  t.same(calls, ['incr day 15'], 'sent once the turn ended');
  await c.flush();
});

t.test('reads: the first awaited, then served; stale ones refreshed behind; observed values count', async (t) => {
  const { calls, counters, inner } = logged(t);
  const clock = { now: 0 };
  const timer = manualTimer();
  const c = new SpendCache(counters, { readTtlMs: 30, flushMs: 5, now: () => clock.now, schedule: timer.schedule });
  await inner.incr('day', 100, 60);
  t.equal(await c.get('day'), 100);
  clock.now += 29;
  t.equal(await c.get('day'), 100);
  t.equal(calls.length, 1, 'one read for both');
  await inner.incr('day', 5, 60); // another process
  c.observe('day', 105);
  t.equal(await c.get('day'), 105, 'an observed value is used');
  await inner.incr('day', 5, 60);
  clock.now += 30;
  t.equal(c.now('day'), 105, 'a stale value is answered at once');
  await turn(); // the refresh it started has answered
  t.equal(calls.length, 2, 'and refreshed behind');
  t.equal(c.now('day'), 110, 'a stale value is refreshed');
  t.equal(await c.get('missing'), undefined, 'a missing counter stays missing');
  t.equal(await c.seed('missing', 9, 60), 9);
  c.incr('missing', 1, 60);
  t.equal(await c.get('missing'), 10);
  t.same(timer.asked.map((a) => a.ms), [5], 'the flush asked for its timer');
  timer.asked[0]!.fn();
  await c.flush();
  t.equal(await inner.get('missing'), 10, 'flushed by its timer');
});

t.test('a failed incr goes back to pending and is sent again', async (t) => {
  const { counters, inner, failNext } = logged(t);
  const timer = manualTimer();
  const c = new SpendCache(counters, { schedule: timer.schedule });
  failNext(1);
  c.incr('day', 3, 60);
  await c.flush();
  t.equal(await c.get('day'), 3, 'still counted here');
  t.equal(await inner.get('day'), undefined, 'not in the backing yet');
  t.equal(timer.asked.length, 2, 'the failure asked for another flush');
  timer.asked[1]!.fn();
  await c.flush();
  t.equal(await inner.get('day'), 3, 'sent on the next flush');
});

t.test('old windows are forgotten', async (t) => {
  const { counters } = logged(t);
  const clock = { now: 0 };
  const c = new SpendCache(counters, { now: () => clock.now, schedule: () => {} });
  await c.get('yesterday');
  const tallies = (c as unknown as { tallies: Map<string, unknown> }).tallies;
  clock.now = 61_000;
  c.incr('today', 1, 60);
  await c.flush();
  t.notOk(tallies.has('yesterday'));
  t.ok(tallies.has('today'));
});

t.test('a read that overlaps an increment in flight is not taken: the increment counts once', async (t) => {
  // Redis applies INCRBY at once but RedisCounters answers only after its EXPIRE: a GET or the
  // request step's read in between already includes the increment still counted as in flight.
  const inner = new MemoryCounters();
  t.teardown(() => inner.close());
  const held: Array<() => void> = [];
  const counters = {
    get: (k: string) => inner.get(k),
    seed: (k: string, v: number, ttl: number) => inner.seed(k, v, ttl),
    incr: async (k: string, a: number, ttl: number) => {
      const total = await inner.incr(k, a, ttl);
      await new Promise<void>((r) => held.push(r));
      return total;
    },
  } as unknown as Counters;
  const c = new SpendCache(counters, { readTtlMs: 0, flushMs: 0 });
  t.equal(await c.get('day'), undefined);
  c.incr('day', 2, 60);
  await turn(); // flushed: applied in the backing, not answered
  t.equal(await inner.get('day'), 2, 'the backing holds it');
  c.observe('day', 2); // the request step read it
  t.equal(c.now('day'), 2, 'an observed value overlapping the flight is not taken');
  await turn(); // the stale refresh now() started has answered
  t.equal(c.now('day'), 2, 'nor is a refresh');
  c.incr('day', 1.5, 60);
  t.equal(c.now('day'), 3.5, 'pending counts at once, in flight once');
  await turn();
  t.equal(held.length, 2, 'both increments in flight');
  for (const r of held.splice(0)) r();
  await c.flush();
  t.equal(c.now('day'), 3.5, 'the answers bring the total');
  t.equal(await inner.get('day'), 3.5);
});

t.test('increments answered out of order: the newer answer stands, nothing counted twice or lost', async (t) => {
  // RedisCounters answers a counter's first add only after its EXPIRE, so a later add's INCRBY
  // can answer first; the older answer (an older total) must not replace it.
  const inner = new MemoryCounters();
  t.teardown(() => inner.close());
  const held: Array<() => void> = [];
  let first = true;
  const counters = {
    get: (k: string) => inner.get(k),
    seed: (k: string, v: number, ttl: number) => inner.seed(k, v, ttl),
    incr: async (k: string, a: number, ttl: number) => {
      const total = await inner.incr(k, a, ttl);
      if (first) {
        first = false;
        await new Promise<void>((r) => held.push(r)); // the first add's EXPIRE
      }
      return total;
    },
  } as unknown as Counters;
  const c = new SpendCache(counters, { flushMs: 0 });
  t.equal(await c.get('day'), undefined);
  c.incr('day', 2, 60);
  await turn(); // the first add: applied, its answer held
  c.incr('day', 1.5, 60);
  t.equal(c.now('day'), 3.5, 'both counted here');
  await turn(); // the second add: applied after the first, answered 3.5
  await turn();
  t.equal(held.length, 1, 'the first answer still held');
  t.equal(await inner.get('day'), 3.5, 'both applied');
  t.equal(c.now('day'), 3.5, 'the second answer includes the first add, still in flight: counted once');
  held[0]!();
  await c.flush();
  t.equal(c.now('day'), 3.5, 'the first add\'s older answer (2) does not replace it');
  t.equal(await inner.get('day'), 3.5);
  c.incr('day', 1, 60);
  await c.flush();
  t.equal(c.now('day'), 4.5, 'later adds count on top as before');
});

t.test('an increment the fallback answered (it timed out, and may have run) counts once; memory\'s total is not taken', async (t) => {
  // RedisCounters answers from its in-memory fallback, degraded, when an INCRBY times out at the
  // client: the INCRBY may still run in Redis. That answer is the total of the process's memory
  // (2), not of the shared counter (32): taken as the value, a month seeded at 30 read as 2.
  const shared = new MemoryCounters();
  const fallback = new MemoryCounters();
  t.teardown(() => Promise.all([shared.close(), fallback.close()]));
  let stalled = false;
  const counters = {
    degraded: false,
    get: (k: string) => (counters.degraded ? fallback : shared).get(k),
    seed: (k: string, v: number, ttl: number) => shared.seed(k, v, ttl),
    incr: async (k: string, a: number, ttl: number) => {
      const total = await shared.incr(k, a, ttl); // it reaches Redis either way
      if (!stalled) return total;
      counters.degraded = true; // the client gave up waiting
      return fallback.incr(k, a, ttl);
    },
  };
  const c = new SpendCache(counters as unknown as Counters, { readTtlMs: 0, schedule: () => {} });
  t.equal(await c.get('month'), undefined);
  t.equal(await c.seed('month', 30, 60), 30);
  stalled = true;
  c.incr('month', 2, 60);
  await c.flush();
  t.equal(c.now('month'), 32, 'the seeded 30 and the 2, not the fallback\'s total of 2');
  c.observe('month', 2); // the request step read memory's value while degraded
  await turn(); // and now()'s refresh (readTtlMs 0) read memory too
  t.equal(c.now('month'), 32, 'nor is a value the fallback read taken');
  stalled = false;
  counters.degraded = false; // Redis answers again
  c.incr('month', 1.5, 60);
  await c.flush();
  t.equal(c.now('month'), 33.5, 'Redis\'s next total includes the increment that timed out: counted once');
  t.equal(await shared.get('month'), 33.5, 'and Redis has it once: it was not sent again');
  c.observe('month', 33.5);
  t.equal(c.now('month'), 33.5, 'a shared read agrees');
});
