// Key caps and session caps inside a profile's budget (lib/budget.ts, plugins/budget.ts), over
// both counter backings and a SQLite store, through a request's real steps: the counted step of
// lib/admission.ts (which reads the spend), the budget step, and the cost added as the server adds
// a finished row (then the row written). Two keys share a profile; the one capped at 1 USD a day
// degrades at 70 and 85 % and is refused at 100 % while the other stays at normal and the profile
// counts both; a key's counters are seeded from and reconciled with the store's ledger. A session
// past its profile's cap is refused; another session of the same key, and requests without a
// session, go on. The clock is set by hand: no test waits for time to pass.

import t, { type Test } from 'tap';
import { Admission } from '../../lib/admission.ts';
import { Budget } from '../../lib/budget.ts';
import type { Profile } from '../../lib/config.ts';
import type { ReadCtx } from '../../lib/context.ts';
import type { Counters } from '../../lib/counters/counters.ts';
import type { Deps } from '../../lib/deps.ts';
import type { GatewayError } from '../../lib/errors.ts';
import { openStore } from '../../lib/store/open.ts';
import type { KeyRow, Store } from '../../lib/store/store.ts';
import { budget as budgetStep } from '../../plugins/budget.ts';
import { endUserRateLimit } from '../../plugins/rate-limit.ts';
import { capsProfile, keyRow, requestCtx, spentRow } from '../helpers/budget-caps.ts';
import { freshCounters } from './counters.contract.ts';

type Kind = 'memory' | 'redis';


/** One gateway process's budget over `counters` and `store`, with the two steps a request takes through it. */
function gateway(counters: Counters, store: Store, clock: { now: number }) {
  // Flushes run when the test says (spend() below), never on a timer of their own.
  const budget = new Budget({ counters, store, now: () => clock.now, cache: { schedule: () => {} } });
  const deps = { admission: new Admission({ counters, budget }), budget } as unknown as Deps;
  const counted = endUserRateLimit(deps);
  const step = budgetStep(deps);
  return {
    budget,
    /** A request through the counted step and the budget step: its context, or the refusal. */
    async request(profile: Profile, key: KeyRow, session: string | null = null): Promise<ReadCtx | GatewayError> {
      const ctx = requestCtx(profile, key, session);
      try {
        await counted.run(ctx);
        await step.run(ctx);
        return ctx;
      } catch (err) {
        return err as GatewayError;
      }
    },
    /** A finished request's cost, added as the server adds it, sent to the counters, then its row written. */
    async spend(key: KeyRow, usd: number, session: string | null = null): Promise<void> {
      const row = spentRow(key, usd, clock.now, session);
      await budget.addRow(row);
      await budget.flush();
      await store.insertRequests([row]);
    },
  };
}

async function setup(t: Test, kind: Kind, start: string) {
  const store = await openStore({ dataDir: t.testdir() });
  t.teardown(() => store.close());
  const clock = { now: Date.parse(start) };
  return { store, clock, ...gateway(await freshCounters(t, kind), store, clock) };
}

/** The degradation a served request got, or the refusal's code. */
function outcome(r: ReadCtx | GatewayError): string {
  return 'code' in r ? r.code : r.degradation;
}

for (const kind of ['memory', 'redis'] as const) {
  t.test(`on ${kind} counters`, async (t) => {
    t.test('a key capped at 1 USD a day degrades and blocks itself; its colleague stays at normal', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team', { daily: 10, monthly: 100 });
      const runaway = keyRow(1, 'runaway', 'team', { daily: 1 });
      const colleague = keyRow(2, 'colleague', 'team');

      const seen: Array<[string, string, string]> = [];
      for (const usd of [0, 0.7, 0.15, 0.15]) {
        if (usd > 0) await g.spend(runaway, usd);
        seen.push([String(usd), outcome(await g.request(team, runaway)), outcome(await g.request(team, colleague))]);
      }
      t.strictSame(seen, [
        ['0', 'none', 'none'],
        ['0.7', 'fast-only', 'none'],
        ['0.15', 'max-tokens', 'none'],
        ['0.15', 'key_budget_exhausted', 'none'],
      ], 'the capped key: 70 % fast-only, 85 % max-tokens, 100 % refused; the other key: normal throughout');

      const refused = (await g.request(team, runaway)) as GatewayError;
      t.match(refused, { status: 429, code: 'key_budget_exhausted', message: 'daily quota of key runaway exhausted; resets at 00:00 UTC' });
      t.strictSame(refused.headers, { 'x-should-retry': 'false', 'retry-after': String(12 * 3600) }, 'the profile block\'s headers: retry-after to midnight UTC');

      const served = (await g.request(team, colleague)) as ReadCtx;
      t.equal(served.budget!.key, null, 'an uncapped key has no standing of its own');
      t.equal(served.budget!.binding, served.budget!.profile, 'its stage is its profile\'s');
      t.match(served.budget!.profile, { scope: 'profile', name: 'team', stage: 'none', day_usd: 1 }, 'the profile counts the capped key\'s spend');

      await g.spend(colleague, 0.5);
      const again = (await g.request(team, colleague)) as ReadCtx;
      t.equal(again.budget!.profile.day_usd, 1.5, 'and both keys\' spend');
      t.match(await g.budget.state(team), { day_usd: 1.5, month_usd: 1.5, percent: 15, degradation: 'none' }, 'the profile\'s own state agrees');
      t.equal(await g.store.keyLedgerSpendSince(runaway.id, '2025-03-15T00:00:00.000Z'), 1, "the store's ledger holds the key's spend");
      t.equal(outcome(await g.request(team, runaway)), 'key_budget_exhausted', 'the colleague\'s spend does not free the capped key');
    });

    t.test('the stage is the higher of the key\'s and the profile\'s, and the view says which binds', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team', { daily: 10, monthly: 1000 });
      const capped = keyRow(1, 'capped', 'team', { daily: 5 });
      const free = keyRow(2, 'free', 'team');
      await g.spend(capped, 3.6); // key 72 %, profile 36 %
      let v = ((await g.request(team, capped)) as ReadCtx).budget!;
      t.match(v, { stage: 'fast-only', percent: 72, binding: { scope: 'key', name: 'capped', daily_usd: 5, monthly_usd: null } });
      await g.spend(free, 5); // profile 86 %, key still 72 %
      v = ((await g.request(team, capped)) as ReadCtx).budget!;
      t.match(v, { stage: 'max-tokens', binding: { scope: 'profile', name: 'team' }, key: { stage: 'fast-only' } }, 'the profile binds once it is higher');
      t.equal(v.percent, 86);
      t.equal(outcome(await g.request(team, free)), 'max-tokens', 'the profile\'s stage holds for every key');
      await g.spend(free, 1.4); // profile 100 %
      t.match(await g.request(team, capped), { code: 'budget_exhausted', message: 'daily quota of profile team exhausted; resets at 00:00 UTC' },
        'a blocked profile is named, not the key');
    });

    t.test('a monthly cap, seeding after a restart, and the day and month resets', async (t) => {
      const g = await setup(t, kind, '2025-03-20T10:00:00Z');
      const team = capsProfile('team');
      const monthly = keyRow(3, 'monthly', 'team', { monthly: 2 });
      await g.store.insertRequests([spentRow(monthly, 1.5, Date.parse('2025-03-02T10:00:00Z'))]);
      t.equal(outcome(await g.request(team, monthly)), 'fast-only', 'the first request seeds the key\'s month from the store (75 %)');
      await g.spend(monthly, 0.5);
      const refused = (await g.request(team, monthly)) as GatewayError;
      t.match(refused, { code: 'key_budget_exhausted', message: 'monthly quota of key monthly exhausted; resets at 00:00 UTC on 2025-04-01' });
      t.equal(refused.headers['retry-after'], String(11 * 86_400 + 14 * 3600), 'to the month\'s end');

      // Another process (fresh counters, the same store): the key's spend comes from the store.
      const other = gateway(await freshCounters(t, kind), g.store, g.clock);
      t.equal(outcome(await other.request(team, monthly)), 'key_budget_exhausted', 'seeded from the store, still refused');
      g.clock.now = Date.parse('2025-04-01T00:00:00Z');
      t.equal(outcome(await other.request(team, monthly)), 'none', 'a new month frees it');

      const daily = keyRow(4, 'daily', 'team', { daily: 1 });
      g.clock.now = Date.parse('2025-04-01T23:00:00Z');
      await other.request(team, daily);
      await other.spend(daily, 1);
      t.equal(outcome(await other.request(team, daily)), 'key_budget_exhausted');
      g.clock.now = Date.parse('2025-04-02T00:00:00Z');
      t.equal(outcome(await other.request(team, daily)), 'none', 'midnight UTC frees a daily cap');
    });

    t.test('caps set on a key later count what it spent before them today', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team');
      const before = keyRow(5, 'later', 'team');
      await g.request(team, before);
      await g.spend(before, 0.9);
      t.equal(outcome(await g.request(team, before)), 'none', 'no caps: normal');
      const after = { ...before, daily_usd: 1 };
      t.equal(outcome(await g.request(team, after)), 'max-tokens', 'with a 1 USD cap its 0.9 USD of today reads 90 %');
    });

    t.test('reconcile raises a capped key\'s counters to the ledger', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team');
      const key = keyRow(9, 'behind', 'team', { daily: 1 });
      t.equal(outcome(await g.request(team, key)), 'none', 'seeded at zero');
      // Rows another instance wrote while its increments were lost.
      await g.store.insertRequests([spentRow(key, 0.9, g.clock.now)]);
      t.equal(outcome(await g.request(team, key)), 'none', 'a live counter is not re-read from the store');
      await g.budget.reconcile(['team']);
      t.equal(outcome(await g.request(team, key)), 'max-tokens', 'raised to the store\'s 0.9 USD');
    });

    t.test('a session past its cap is refused alone', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team', { session: 0.5 });
      const key = keyRow(6, 'agent', 'team');
      t.equal(outcome(await g.request(team, key, 'loop')), 'none');
      await g.spend(key, 0.3, 'loop');
      t.equal(outcome(await g.request(team, key, 'loop')), 'none', '0.3 of 0.5 USD: served');
      await g.spend(key, 0.2, 'loop');
      const refused = (await g.request(team, key, 'loop')) as GatewayError;
      t.match(refused, {
        status: 429, code: 'session_budget_exhausted',
        message: 'daily session quota of profile team (0.5 USD) exhausted for this session; resets at 00:00 UTC',
      });
      t.strictSame(refused.headers, { 'x-should-retry': 'false', 'retry-after': String(12 * 3600) });
      t.equal(outcome(await g.request(team, key, 'other')), 'none', 'another session of the same key goes on');
      await g.spend(key, 3);
      await g.spend(key, 3);
      t.equal(outcome(await g.request(team, key)), 'none', 'requests without a session are not capped by this rule');
      t.equal(outcome(await g.request(team, key, 'other')), 'none', 'and spend without a session counts toward no session');
      const fresh = (await g.request(team, key, 'fresh')) as ReadCtx;
      t.equal(fresh.budget!.profile.day_usd, 6.5, 'the profile counts every session and none');
      g.clock.now = Date.parse('2025-03-16T00:00:00Z');
      t.equal(outcome(await g.request(team, key, 'loop')), 'none', 'a new UTC day frees the session');
    });

    t.test('a profile without a session cap reads no session counter', async (t) => {
      const g = await setup(t, kind, '2025-03-15T12:00:00Z');
      const team = capsProfile('team');
      const key = keyRow(7, 'plain', 'team');
      t.strictSame(g.budget.spendKeys('team', key, null), ['spend:day:team:2025-03-15', 'spend:month:team:2025-03'], 'an uncapped key in an uncapped profile: the profile\'s two counters, as before');
      const capped = keyRow(8, 'capped', 'team', { daily: 1 });
      t.strictSame(g.budget.spendKeys('team', capped, null), [
        'spend:day:team:2025-03-15', 'spend:month:team:2025-03', 'spend:key:day:8:2025-03-15', 'spend:key:month:8:2025-03',
      ], 'a capped key adds its own two');
      const withSession = g.budget.spendKeys('team', key, 'a'.repeat(256));
      t.equal(withSession.length, 3, 'a capped session adds one');
      t.match(withSession[2], /^spend:session:day:team:[0-9a-f]{24}:2025-03-15$/, 'its label hashed: a bounded counter name');
      await g.spend(key, 50, 'any');
      t.equal(outcome(await g.request(team, key, 'any')), 'none', 'no session cap: any session spends freely');
    });
  });
}
