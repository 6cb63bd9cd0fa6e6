// lib/budget-report.ts on hand-made standings: which budget and window the headers and the body of
// GET /v1/budget name (the binding one; a block's own window; the later reset when the key and its
// profile are both blocked), the used percentage cut to one decimal from a table, and the headers
// pushed into a head array in the proxy core's form.

import t from 'tap';
import { BUDGET_HEADERS, pushBudgetHeaders, usedText, windowOf } from '../../lib/budget-report.ts';
import type { BudgetView, Standing } from '../../lib/budget.ts';

const DAY_END = Date.parse('2026-03-11T00:00:00.000Z');
const MONTH_END = Date.parse('2026-04-01T00:00:00.000Z');

function standing(o: Partial<Standing>): Standing {
  return {
    scope: 'profile', name: 'team', stage: 'none', percent: 0, day_usd: 0, month_usd: 0, daily_usd: 10, monthly_usd: 100,
    dayResetAt: DAY_END, monthResetAt: MONTH_END, ...o,
  };
}
function view(profile: Standing, key: Standing | null, binding = profile): BudgetView {
  return { stage: binding.stage, percent: binding.percent, binding, profile, key };
}
const head = (v: BudgetView) => {
  const h: string[] = ['content-type', 'text/event-stream'];
  pushBudgetHeaders(h, v);
  return Object.fromEntries(h.reduce<string[][]>((a, x, i) => (i % 2 ? a[a.length - 1]!.push(x) : a.push([x]), a), []));
};

t.test('the used percentage: cut to one decimal, never rounded up into a stage', async (t) => {
  t.equal(usedText(0), '0.0');
  t.equal(usedText(42), '42.0');
  t.equal(usedText(14.3), '14.3', 'a value a float multiply lands just below');
  t.equal(usedText(69.99), '69.9', 'not 70.0: the stage is still none');
  t.equal(usedText(99.96), '99.9');
  t.equal(usedText(100), '100.0');
  t.equal(usedText(171.66), '171.6', 'past the table: computed');
  t.equal(usedText(-0.5), '0.0', 'never negative');
  t.equal(usedText(42), usedText(42.04), 'the same text for the same tenth');
});

t.test('the window a standing speaks of', async (t) => {
  t.equal(windowOf(standing({})), 'day', 'nothing spent: today');
  t.equal(windowOf(standing({ day_usd: 4, month_usd: 20, percent: 40 })), 'day', 'the day at 40 %, the month at 20 %');
  t.equal(windowOf(standing({ day_usd: 1, month_usd: 75, percent: 75, stage: 'fast-only' })), 'month', 'the month binds');
  t.equal(windowOf(standing({ scope: 'key', daily_usd: null, monthly_usd: 5, month_usd: 1, percent: 20 })), 'month', 'a monthly cap alone');
  // Blocked by the month, the day even further over: the block ends with the month.
  t.equal(windowOf(standing({ daily_usd: 5, monthly_usd: 6, day_usd: 7, month_usd: 7, percent: 140, stage: 'blocked' })), 'month');
  t.equal(windowOf(standing({ day_usd: 10, month_usd: 10, percent: 100, stage: 'blocked' })), 'day');
});

t.test('the headers: the binding budget, or the later reset when both are blocked', async (t) => {
  const profile = standing({ day_usd: 3.75, month_usd: 3.75, percent: 37.5 });
  const key = standing({ scope: 'key', name: 'alice', stage: 'fast-only', percent: 75, day_usd: 0.75, month_usd: 0.75, daily_usd: 1, monthly_usd: null });
  t.strictSame(head(view(profile, null)), {
    'content-type': 'text/event-stream',
    [BUDGET_HEADERS.stage]: 'none', [BUDGET_HEADERS.used]: '37.5', [BUDGET_HEADERS.scope]: 'profile', [BUDGET_HEADERS.reset]: '2026-03-11T00:00:00.000Z',
  }, 'appended after what the head already holds, in writeHead array form');
  t.match(head(view(profile, key, key)), { [BUDGET_HEADERS.stage]: 'fast-only', [BUDGET_HEADERS.used]: '75.0', [BUDGET_HEADERS.scope]: 'key' });
  const keyDay = standing({ scope: 'key', name: 'alice', stage: 'blocked', percent: 120, day_usd: 1.2, month_usd: 1.2, daily_usd: 1, monthly_usd: null });
  const profileMonth = standing({ stage: 'blocked', percent: 101, day_usd: 4, month_usd: 101 });
  t.match(head(view(profileMonth, keyDay, keyDay)), { [BUDGET_HEADERS.stage]: 'blocked', [BUDGET_HEADERS.scope]: 'profile', [BUDGET_HEADERS.reset]: '2026-04-01T00:00:00.000Z' },
    'both blocked: the profile, whose month ends later, is the one that decides');
});
