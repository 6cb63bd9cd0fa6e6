// The budget step on its own (plugins/budget.ts): the stage a request gets is the higher of its
// key's and its profile's (over a real Budget on memory counters and a SQLite store), the view it
// leaves in ctx.budget, which budget binds when both are exhausted, and every refusal's words, code
// and headers (over hand-made views): the profile's day and month, the key's day and month, and the
// session cap.

import t from 'tap';
import { Budget, type BudgetView, type Standing } from '../../lib/budget.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import type { GatewayError } from '../../lib/errors.ts';
import { openStore } from '../../lib/store/open.ts';
import { budget } from '../../plugins/budget.ts';
import { capsProfile, keyRow, requestCtx } from '../helpers/budget-caps.ts';

const NOON = Date.parse('2025-03-15T12:00:00Z');
const DAY_END = Date.parse('2025-03-16T00:00:00Z');
const MONTH_END = Date.parse('2025-04-01T00:00:00Z');

t.test('the stage is the higher of the key\'s and the profile\'s', async (t) => {
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const store = await openStore({ dataDir: t.testdir() });
  t.teardown(() => store.close());
  const spend = new Budget({ counters, store, now: () => NOON });
  const step = budget({ budget: spend });
  const team = capsProfile('team', { daily: 10, monthly: 1000 });
  const daily = keyRow(1, 'k', 'team', { daily: 1 });
  /** Sets the profile's and the key's spend of today (as percentages of 10 USD and of the key's 1 USD cap), returns the request's stage and binding scope. */
  const at = async (profilePct: number, keyPct: number, key = daily) => {
    const p = new Budget({ counters: new MemoryCounters(), store, now: () => NOON });
    const ctx = requestCtx(team, key);
    await p.view(team, key); // seeds both windows from the (empty) store
    await p.add('team', profilePct / 10, NOON);
    const row = { id: 'x', ts: new Date(NOON).toISOString(), profile: 'other', cost_usd: keyPct / 100, key_id: key.id, session: null } as const;
    await p.addRow(row as unknown as Parameters<Budget['addRow']>[0]);
    try {
      await budget({ budget: p }).run(ctx);
    } catch (err) {
      return [(err as GatewayError).code, ctx.budget!.binding.scope];
    }
    return [ctx.degradation, ctx.budget!.binding.scope];
  };
  t.strictSame(await at(0, 0), ['none', 'profile'], 'neither: none, the profile binds on a tie');
  t.strictSame(await at(70, 0), ['fast-only', 'profile']);
  t.strictSame(await at(0, 70), ['fast-only', 'key']);
  t.strictSame(await at(70, 85), ['max-tokens', 'key'], 'the key higher');
  t.strictSame(await at(85, 70), ['max-tokens', 'profile'], 'the profile higher');
  t.strictSame(await at(72, 71), ['fast-only', 'profile'], 'the same stage: the higher percentage binds');
  t.strictSame(await at(71, 72), ['fast-only', 'key']);
  t.strictSame(await at(50, 100), ['key_budget_exhausted', 'key']);
  t.strictSame(await at(100, 50), ['budget_exhausted', 'profile']);
  t.strictSame(await at(100, 120), ['budget_exhausted', 'profile'], 'both exhausted until midnight: the profile is named');
  const monthly = keyRow(2, 'm', 'team', { monthly: 1 });
  t.strictSame(await at(100, 100, monthly), ['key_budget_exhausted', 'key'], 'both exhausted, the key until the month\'s end: the key, which resets later');

  // A key without caps: the profile's standing, one view reused while the spend stays the same.
  const free = keyRow(3, 'free', 'team');
  const a = requestCtx(team, free);
  const b = requestCtx(team, free);
  t.equal(await step.run(a), undefined);
  t.equal(step.run(b), undefined, 'known spend: no promise');
  t.equal(a.budget, b.budget, 'the same view object for both requests: nothing allocated per request');
  t.match(a.budget, { stage: 'none', percent: 0, key: null, profile: { scope: 'profile', name: 'team', daily_usd: 10, monthly_usd: 1000 } });
  t.equal(a.budget!.binding, a.budget!.profile);
  await spend.add('team', 1, NOON);
  const c = requestCtx(team, free);
  step.run(c);
  t.not(c.budget, a.budget, 'a new view once the spend changed');
  t.equal(c.budget!.percent, 10);
  t.equal(a.budget!.percent, 0, 'the earlier view is left as it was');
});

/** A standing with `day`/`month` USD spent against limits (null: none). */
function standing(scope: Standing['scope'], name: string, daily: number | null, monthly: number | null, day: number, month: number): Standing {
  const percent = Math.max(daily === null ? 0 : (day / daily) * 100, monthly === null ? 0 : (month / monthly) * 100);
  const stage = percent >= 100 ? 'blocked' : percent >= 85 ? 'max-tokens' : percent >= 70 ? 'fast-only' : 'none';
  return { scope, name, stage, percent, day_usd: day, month_usd: month, daily_usd: daily, monthly_usd: monthly, dayResetAt: DAY_END, monthResetAt: MONTH_END };
}

/** A view bound by `binding` (which budget binds is lib/budget.ts's choice, tested above). */
function view(profile: Standing, key: Standing | null, binding: Standing = key ?? profile): BudgetView {
  return { stage: binding.stage, percent: binding.percent, binding, profile, key };
}

/** The refusal the step throws for a view (and the session's spend in micro-USD). */
async function refusal(v: BudgetView, o: { session?: string; sessionCap?: number; sessionSpent?: number } = {}): Promise<GatewayError | undefined> {
  const team = capsProfile('team', { session: o.sessionCap ?? null });
  const step = budget({ budget: { view: () => v, sessionSpend: () => o.sessionSpent ?? 0, now: () => NOON } });
  try {
    await step.run(requestCtx(team, keyRow(1, 'laptop', 'team'), o.session ?? null));
    return undefined;
  } catch (err) {
    return err as GatewayError;
  }
}

t.test('every refusal says which budget is exhausted and when it resets', async (t) => {
  const normal = standing('profile', 'team', 10, 100, 1, 1);
  const cases: Array<[what: string, v: BudgetView, code: string, message: string, retryAfter: number]> = [
    ['profile, day', view(standing('profile', 'team', 10, 100, 10, 20), null), 'budget_exhausted', 'daily quota of profile team exhausted; resets at 00:00 UTC', 12 * 3600],
    ['profile, month', view(standing('profile', 'team', 10, 100, 5, 100), null), 'budget_exhausted', 'monthly quota of profile team exhausted; resets at 00:00 UTC on 2025-04-01', 16 * 86_400 + 12 * 3600],
    ['profile, day and month: the month', view(standing('profile', 'team', 10, 100, 10, 100), null), 'budget_exhausted', 'monthly quota of profile team exhausted; resets at 00:00 UTC on 2025-04-01', 16 * 86_400 + 12 * 3600],
    ['key, day', view(normal, standing('key', 'laptop', 1, null, 1, 1)), 'key_budget_exhausted', 'daily quota of key laptop exhausted; resets at 00:00 UTC', 12 * 3600],
    ['key, month', view(normal, standing('key', 'laptop', null, 5, 0, 5)), 'key_budget_exhausted', 'monthly quota of key laptop exhausted; resets at 00:00 UTC on 2025-04-01', 16 * 86_400 + 12 * 3600],
    ['profile binding, the key blocked too', view(standing('profile', 'team', 10, 100, 1, 100), standing('key', 'laptop', 1, null, 1, 1), standing('profile', 'team', 10, 100, 1, 100)), 'budget_exhausted', 'monthly quota of profile team exhausted; resets at 00:00 UTC on 2025-04-01', 16 * 86_400 + 12 * 3600],
  ];
  for (const [what, v, code, message, retryAfter] of cases) {
    const err = await refusal(v);
    t.match(err, { status: 429, code, message }, what);
    t.strictSame(err?.headers, { 'x-should-retry': 'false', 'retry-after': String(retryAfter) }, `${what}: headers`);
  }
});

t.test('the session cap: refused at its cap, with its reset; below it, or without a session, served', async (t) => {
  const v = view(standing('profile', 'team', 10, 100, 1, 1), null);
  const err = await refusal(v, { session: 's', sessionCap: 0.25, sessionSpent: 250_000 });
  t.match(err, { status: 429, code: 'session_budget_exhausted', message: 'daily session quota of profile team (0.25 USD) exhausted for this session; resets at 00:00 UTC' });
  t.strictSame(err?.headers, { 'x-should-retry': 'false', 'retry-after': String(12 * 3600) });
  t.equal(await refusal(v, { session: 's', sessionCap: 0.25, sessionSpent: 249_999 }), undefined, 'a micro-dollar below the cap: served');
  t.equal(await refusal(v, { sessionCap: 0.25, sessionSpent: 10_000_000 }), undefined, 'no session: not capped by this rule');
  t.equal(await refusal(v, { session: 's', sessionSpent: 10_000_000 }), undefined, 'no cap in the profile: not read');
  const blocked = await refusal(view(standing('profile', 'team', 10, 100, 10, 10), null), { session: 's', sessionCap: 0.25, sessionSpent: 1_000_000 });
  t.equal(blocked?.code, 'budget_exhausted', 'a blocked profile is named before the session');
});
