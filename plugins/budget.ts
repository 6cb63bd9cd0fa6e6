// Step 8 of the auth chain: the budget, on every proxied request except count_tokens. A request
// is handled at the higher stage of its profile's budget and its key's own caps (lib/budget.ts):
// 70 % → fast tier only, 85 % → also max_tokens 2048 (both applied by model-resolve), 100 % → 429
// naming the exhausted budget and when it resets, with retry-after to that reset (≥ 3600 s). A
// profile with a session cap also refuses a session that spent it today, while its other sessions
// (and requests without a session) go on. The view is left in ctx.budget for what reports it.

import { exhaustedWindow, micro, resetOf, retryAfterS, type Budget, type BudgetView } from '../lib/budget.ts';
import type { Plugin, ReadCtx } from '../lib/context.ts';
import { GatewayError } from '../lib/errors.ts';
import { GENERATIVE } from '../lib/routes.ts';

type Spend = Pick<Budget, 'view' | 'sessionSpend' | 'now'>;

export function budget(deps: { budget: Spend }): Plugin<'read'> {
  return {
    name: 'budget',
    routes: GENERATIVE,
    needs: 'read',
    gives: 'read',
    // The spend is known in memory after the first request of a profile (and of a capped key): no promise, no tick.
    run(ctx) {
      const view = deps.budget.view(ctx.profile, ctx.key.row);
      if (view instanceof Promise) return view.then((v) => apply(deps.budget, ctx, v));
      return apply(deps.budget, ctx, view);
    },
  };
}

function apply(spend: Spend, ctx: ReadCtx, view: BudgetView): void | Promise<void> {
  ctx.budget = view;
  if (view.stage === 'blocked') throw refusal(view, spend.now());
  ctx.degradation = view.stage;
  const cap = ctx.profile.session_daily_usd;
  if (cap == null || ctx.session === null) return;
  const spent = spend.sessionSpend(ctx.profile, ctx.session);
  if (typeof spent === 'number') return judgeSession(ctx, cap, spent, view, spend.now());
  return spent.then((s) => judgeSession(ctx, cap, s, view, spend.now()));
}

/** The session's spend (micro-USD) against the profile's cap per session and day. */
function judgeSession(ctx: ReadCtx, capUsd: number, spentMicro: number, view: BudgetView, now: number): void {
  if (spentMicro < micro(capUsd)) return;
  throw new GatewayError('session_budget_exhausted', {
    message: `daily session quota of profile ${ctx.profile.name} (${capUsd} USD) exhausted for this session; resets at 00:00 UTC`,
    headers: { 'retry-after': String(retryAfterS(view.profile.dayResetAt, now)) },
  });
}

/** The refusal of a blocked request: it names the budget that binds (lib/budget.ts) and when that budget resets. */
export function refusal(view: BudgetView, now: number): GatewayError {
  const s = view.binding;
  const window = exhaustedWindow(s);
  const limit = window === 'month' ? 'monthly' : 'daily';
  const what = s.scope === 'profile' ? `${limit} quota of profile ${s.name}` : `${limit} quota of key ${s.name}`;
  const at = resetOf(s);
  const when = window === 'month' ? `00:00 UTC on ${new Date(at).toISOString().slice(0, 10)}` : '00:00 UTC';
  return new GatewayError(s.scope === 'profile' ? 'budget_exhausted' : 'key_budget_exhausted', {
    message: `${what} exhausted; resets at ${when}`,
    headers: { 'retry-after': String(retryAfterS(at, now)) },
  });
}
