// Budget (lib/budget.ts) on a settable clock, over both counter backings and a SQLite store:
// the degradation thresholds, percent = max(day %, month %), retry-after to the blocking
// window's reset (at least 3600 s), UTC day and month windows, seeding from the store's rows,
// spend surviving a restart, and reconciliation that raises a lagging counter and never lowers one.
// On Redis also: an increment that times out at the client but still runs in Redis counts once.

import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import net, { type AddressInfo } from 'node:net';
import { Redis } from 'ioredis';
import t, { type Test } from 'tap';
import { Budget, degradationFor } from '../../lib/budget.ts';
import type { Profile } from '../../lib/config.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow, Store } from '../../lib/store/store.ts';
import { freshCounters, openRedisCounters, REDIS_URL, redisNamespace } from './counters.contract.ts';

t.test('degradationFor: the thresholds, exactly', async (t) => {
  const at = (p: number) => degradationFor(p);
  t.equal(at(0), 'none');
  t.equal(at(69.99), 'none');
  t.equal(at(70), 'fast-only');
  t.equal(at(84.99), 'fast-only');
  t.equal(at(85), 'max-tokens');
  t.equal(at(99.99), 'max-tokens');
  t.equal(at(100), 'blocked');
  t.equal(at(250), 'blocked');
});

function profile(name: string, daily_usd: number, monthly_usd: number): Profile {
  return { name, default_tier: 'fast', router: 'sim', budget: { daily_usd, monthly_usd }, l2_cache: false, rate_limits: { per_key_per_minute: 60, per_user_per_minute: 10 } };
}

function row(profile: string, usd: number, ts: string): RequestRow {
  return {
    id: randomUUID(), ts, endpoint: 'chat', profile, key_prefix: 'sluice_team_…abcd', end_user: null, session: null, run: null,
    tier: 'fast', requested_model: 'sluice/fast', model: 'google/gemini-2.5-flash', stream: false, status: 200, outcome: 'ok',
    input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: usd,
    cost_source: 'upstream', provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2, overhead_ms: 0.1, tools: [],
  };
}

const iso = (s: string) => new Date(Date.parse(s)).toISOString();

type Kind = 'memory' | 'redis';


async function setup(t: Test, kind: Kind, start: string) {
  const store: Store = await openStore({ dataDir: t.testdir() });
  t.teardown(() => store.close());
  const counters = await freshCounters(t, kind);
  const clock = { now: Date.parse(start) };
  const budget = new Budget({ counters, store, now: () => clock.now });
  return {
    store, counters, clock, budget,
    /** Rows already in the store (before any counter exists). */
    rows: (p: string, ...spent: Array<[number, string]>) => store.insertRequests(spent.map(([usd, ts]) => row(p, usd, iso(ts)))),
    /** What the gateway does with a finished request: count the spend, then (later) write the row. */
    async spend(p: string, usd: number) {
      await budget.add(p, usd, clock.now);
      await store.insertRequests([row(p, usd, new Date(clock.now).toISOString())]);
    },
    set: (s: string) => (clock.now = Date.parse(s)),
  };
}

for (const kind of ['memory', 'redis'] as const) {
  t.test(`on ${kind} counters`, async (t) => {
    t.test('percent is the higher of day % and month %', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const day = profile('dayish', 10, 100);
      const month = profile('monthish', 10, 100);
      await b.rows('dayish', [40, '2025-03-03T12:00:00Z'], [5, '2025-03-15T08:00:00Z']);
      await b.rows('monthish', [88, '2025-03-03T12:00:00Z'], [5, '2025-03-15T08:00:00Z']);
      const first = b.budget.state(day);
      t.ok(first instanceof Promise, 'the first state reads (and seeds) the windows');
      let s = await first;
      t.match(s, { day_usd: 5, month_usd: 45, degradation: 'none', blocked: false });
      t.equal(s.percent, 50, 'day 50 % beats month 45 %');
      const known = b.budget.state(day);
      t.notOk(known instanceof Promise, 'once known, the state answers at once');
      t.match(known, { day_usd: 5, month_usd: 45 });
      await b.spend('dayish', 3);
      s = await b.budget.state(day);
      t.equal(s.percent, 80);
      t.equal(s.degradation, 'fast-only');
      s = await b.budget.state(month);
      t.equal(s.percent, 93, 'month 93 % beats day 50 %');
      t.equal(s.degradation, 'max-tokens');
      t.equal(new Date(s.dayResetAt).toISOString(), '2025-03-16T00:00:00.000Z');
      t.equal(new Date(s.monthResetAt).toISOString(), '2025-04-01T00:00:00.000Z');
    });

    t.test('adds: the first of a window seeds it (a promise), the next are counted at once', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const p = profile('adds', 10, 100);
      await b.rows('adds', [2, '2025-03-15T08:00:00Z']);
      const first = b.budget.add('adds', 1, b.clock.now);
      t.ok(first instanceof Promise);
      await first;
      t.equal(b.budget.add('adds', 0.25, b.clock.now), undefined, 'no promise once seeded');
      t.equal(b.budget.add('adds', 0, b.clock.now), undefined, 'nothing to count');
      t.match(b.budget.state(p), { day_usd: 3.25, month_usd: 3.25 }, 'the store\'s 2 + 1 + 0.25, at once');
    });

    t.test('the state at each threshold', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const p = profile('steps', 100, 10_000);
      const seen: Array<[number, string, boolean]> = [];
      for (const usd of [69.99, 0.01, 14.99, 0.01, 14.99, 0.01]) {
        await b.spend('steps', usd);
        const s = await b.budget.state(p);
        seen.push([Math.round(s.percent * 100) / 100, s.degradation, s.blocked]);
      }
      t.same(seen, [
        [69.99, 'none', false],
        [70, 'fast-only', false],
        [84.99, 'fast-only', false],
        [85, 'max-tokens', false],
        [99.99, 'max-tokens', false],
        [100, 'max-tokens', true],
      ]);
      // Budgets whose exact thresholds a float division of dollars misses by one ulp.
      await b.spend('seventy', 0.567);
      t.match(await b.budget.state(profile('seventy', 0.81, 100)), { percent: 70, degradation: 'fast-only' }, '0.567 of 0.81 is 70 %');
      await b.spend('eighty-five', 0.0595);
      t.match(await b.budget.state(profile('eighty-five', 0.07, 100)), { percent: 85, degradation: 'max-tokens' }, '0.0595 of 0.07 is 85 %');
      await b.rows('month-85', [1.3175, '2025-03-02T10:00:00Z']);
      t.match(await b.budget.state(profile('month-85', 100, 1.55)), { percent: 85, degradation: 'max-tokens' }, 'the month too');
    });

    t.test('retry-after counts to the reset of the window that blocks, at least 3600 s', async (t) => {
      const cases: Array<{ what: string; at: string; rows: Array<[number, string]>; retry: number }> = [
        { what: 'day block at 23:30 → the 3600 s floor', at: '2025-03-15T23:30:00Z', rows: [[10, '2025-03-15T09:00:00Z']], retry: 3600 },
        { what: 'day block at 10:00 → 14 h to midnight', at: '2025-03-15T10:00:00Z', rows: [[10, '2025-03-15T09:00:00Z']], retry: 50_400 },
        { what: 'day block while the month sits at 99 % → still the day', at: '2025-03-15T10:00:00Z', rows: [[89, '2025-03-02T09:00:00Z'], [10, '2025-03-15T09:00:00Z']], retry: 50_400 },
        { what: 'month block mid-month → to the 1st', at: '2025-03-20T10:00:00Z', rows: [[100, '2025-03-02T09:00:00Z']], retry: 11 * 86_400 + 14 * 3600 },
        { what: 'month block on the 31st → to the 1st', at: '2025-03-31T10:00:00Z', rows: [[100, '2025-03-02T09:00:00Z']], retry: 14 * 3600 },
        { what: 'month block on the 31st at 23:30 → the floor', at: '2025-03-31T23:30:00Z', rows: [[100, '2025-03-02T09:00:00Z']], retry: 3600 },
        { what: 'month block on 28 February → to 1 March', at: '2025-02-28T06:00:00Z', rows: [[100, '2025-02-01T00:00:00Z']], retry: 18 * 3600 },
        { what: 'both block → the month reset', at: '2025-03-20T10:00:00Z', rows: [[90, '2025-03-02T09:00:00Z'], [10, '2025-03-20T09:00:00Z']], retry: 11 * 86_400 + 14 * 3600 },
        { what: 'a fraction of a second rounds up', at: '2025-03-15T10:00:00.250Z', rows: [[10, '2025-03-15T09:00:00Z']], retry: 50_400 },
      ];
      for (const c of cases) {
        const b = await setup(t, kind, c.at);
        const name = `case-${cases.indexOf(c)}`;
        await b.rows(name, ...c.rows);
        const s = await b.budget.state(profile(name, 10, 100));
        t.equal(s.blocked, true, `${c.what}: blocked`);
        t.equal(s.retryAfterS, c.retry, c.what);
        t.ok(Number.isInteger(s.retryAfterS));
      }
    });

    t.test('midnight resets the day spend, not the month', async (t) => {
      const b = await setup(t, kind, '2025-03-15T23:00:00Z');
      const p = profile('nightly', 10, 100);
      await b.rows('nightly', [20, '2025-03-03T12:00:00Z']);
      await b.spend('nightly', 9);
      t.match(await b.budget.state(p), { day_usd: 9, month_usd: 29, degradation: 'max-tokens' });
      b.set('2025-03-15T23:59:59.999Z');
      t.match(await b.budget.state(p), { day_usd: 9 }, 'the last millisecond of the day still counts it');
      b.set('2025-03-16T00:00:00Z');
      const s = await b.budget.state(p);
      t.match(s, { day_usd: 0, month_usd: 29, degradation: 'none', blocked: false });
      t.equal(s.percent, 29);
      await b.spend('nightly', 1);
      t.match(await b.budget.state(p), { day_usd: 1, month_usd: 30 }, 'the new day counts from zero');
    });

    t.test('a month end resets both windows', async (t) => {
      const b = await setup(t, kind, '2025-03-31T22:00:00Z');
      const p = profile('monthly', 10, 100);
      await b.rows('monthly', [90, '2025-03-05T12:00:00Z']);
      await b.spend('monthly', 10);
      t.match(await b.budget.state(p), { day_usd: 10, month_usd: 100, blocked: true });
      b.set('2025-04-01T00:00:00Z');
      const s = await b.budget.state(p);
      t.match(s, { day_usd: 0, month_usd: 0, degradation: 'none', blocked: false });
      t.equal(s.percent, 0);
    });

    t.test('missing counters are seeded from the store', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      await b.rows('seeded',
        [50, '2025-02-28T23:59:59.999Z'], // the month before
        [20, '2025-03-01T00:00:00Z'], //      the first instant of the month
        [2, '2025-03-14T23:59:59.999Z'], //   yesterday
        [0.25, '2025-03-15T00:00:00Z'], //    the first instant of today
        [1.5, '2025-03-15T09:30:00Z'],
      );
      await b.rows('other', [7, '2025-03-15T09:00:00Z']);
      const s = await b.budget.state(profile('seeded', 10, 100));
      t.equal(s.day_usd, 1.75);
      t.equal(s.month_usd, 23.75);
    });

    t.test('spend added after a restart keeps the earlier spend', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const p = profile('restarted', 10, 100);
      await b.rows('restarted', [30, '2025-03-02T10:00:00Z']);
      await b.spend('restarted', 2);
      await b.spend('restarted', 1.5);
      t.match(await b.budget.state(p), { day_usd: 3.5, month_usd: 33.5 });
      // A new process: fresh counters, the same store; its first act is adding a finished request.
      const fresh = new Budget({ counters: await freshCounters(t, kind), store: b.store, now: () => b.clock.now });
      await fresh.add('restarted', 0.5, b.clock.now);
      t.match(await fresh.state(p), { day_usd: 4, month_usd: 34 }, 'the store’s rows were seeded before the add');
    });

    t.test('reconcile raises a counter that fell behind and never lowers one', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const behind = profile('behind', 10, 100);
      const ahead = profile('ahead', 10, 100);
      t.match(await b.budget.state(behind), { day_usd: 0, month_usd: 0 }, 'seeded at zero');
      // Rows another instance wrote while its counter increments were lost.
      await b.rows('behind', [2, '2025-03-15T09:00:00Z'], [4, '2025-03-03T09:00:00Z']);
      t.match(await b.budget.state(behind), { day_usd: 0 }, 'a live counter is not re-read from the store');
      await b.budget.add('ahead', 5, b.clock.now); // counted; its row is not written yet
      await b.rows('ahead', [1, '2025-03-15T09:00:00Z']);
      await b.budget.reconcile(['behind', 'ahead', 'untouched']);
      t.match(await b.budget.state(behind), { day_usd: 2, month_usd: 6 }, 'raised to the store');
      t.match(await b.budget.state(ahead), { day_usd: 5, month_usd: 5 }, 'never lowered');
      await b.budget.reconcile(['behind']);
      t.match(await b.budget.state(behind), { day_usd: 2, month_usd: 6 }, 'a second pass changes nothing');
    });

    t.test('amounts are counted in whole micro-USD', async (t) => {
      const b = await setup(t, kind, '2025-03-15T10:00:00Z');
      const p = profile('micro', 0.001, 0.02);
      for (let i = 0; i < 10; i++) await b.spend('micro', 0.000_012_3);
      const s = await b.budget.state(p);
      t.equal(s.day_usd, 0.00012, 'ten adds of 12.3 µUSD count 12 each');
      t.equal(s.percent, 12);
      await b.budget.add('micro', 0, b.clock.now);
      await b.budget.add('micro', -1, b.clock.now);
      t.equal((await b.budget.state(p)).day_usd, 0.00012, 'zero and negative costs add nothing');
    });
  });
}

/**
 * A relay to Redis that can hold what clients send (a stalled Redis, or a client whose process
 * was starved): held bytes reach Redis, in order, on release.
 */
async function holdingRelay(t: Test) {
  const target = new URL(REDIS_URL);
  let held: Array<() => void> | null = null;
  const server = net.createServer((client) => {
    const redis = net.connect(Number(target.port || 6379), target.hostname);
    client.on('data', (chunk) => (held ? held.push(() => redis.write(chunk)) : redis.write(chunk)));
    redis.pipe(client);
    client.on('error', () => redis.destroy()).on('close', () => redis.destroy());
    redis.on('error', () => client.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return {
    url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}${target.pathname}`,
    hold: () => void (held ??= []),
    release() {
      const h = held ?? [];
      held = null;
      for (const send of h) send();
    },
  };
}

t.test('on redis: an increment that times out at the client but runs in Redis counts once', async (t) => {
  const store: Store = await openStore({ dataDir: t.testdir() });
  t.teardown(() => store.close());
  const relay = await holdingRelay(t);
  const ns = redisNamespace(t);
  const counters = await openRedisCounters(t, { url: relay.url, prefix: ns, commandTimeoutMs: 500 });
  // What Redis holds, read beside the relay until it shows `want` (10 s at most): the released
  // INCRBYs and this read travel on different connections, so Redis may run the read first.
  const direct = new Redis(REDIS_URL);
  t.teardown(() => direct.disconnect());
  const inRedis = async (key: string, want: number) => {
    const deadline = Date.now() + 10_000;
    let v = Number(await direct.get(ns + key));
    while (v !== want && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
      v = Number(await direct.get(ns + key));
    }
    return v;
  };
  const now = Date.parse('2025-03-15T10:00:00Z');
  // Flushes run when the test says (budget.flush()), never on a timer of their own.
  const budget = new Budget({ counters, store, now: () => now, cache: { schedule: () => {} } });
  const p = profile('stalled', 10, 100);
  await store.insertRequests([row('stalled', 30, iso('2025-03-02T10:00:00Z'))]);
  await budget.add('stalled', 2, now); // seeds the windows from the store (month 30), then counts 2
  relay.hold();
  await budget.flush(); // the INCRBYs wait in the relay, time out, and the fallback answers
  t.equal(counters.degraded, true, 'the client gave up on Redis');
  relay.release(); // and Redis runs them after all
  t.match(budget.state(p), { day_usd: 2, month_usd: 32 }, 'the fallback\'s total (2) does not replace the month\'s 30');
  t.equal(await inRedis('spend:month:stalled:2025-03', 32_000_000), 32_000_000, 'Redis ran the INCRBY that timed out');
  budget.add('stalled', 1, now);
  await budget.flush(); // Redis's answer includes the INCRBYs that timed out (under load it may time out too)
  t.match(budget.state(p), { day_usd: 3, month_usd: 33 }, 'each increment counted once');
  t.equal(await inRedis('spend:month:stalled:2025-03', 33_000_000), 33_000_000, 'and Redis holds each once: none was sent twice');
  t.equal(await inRedis('spend:day:stalled:2025-03-15', 3_000_000), 3_000_000);
});
