// Step 8 of the auth chain: the profile's budget state on every proxied request except
// count_tokens. 70 % → fast tier only, 85 % → also max_tokens 2048 (both applied by
// model-resolve), 100 % → 429 with retry-after to the blocking window's reset (≥ 3600 s).

import type { Budget, BudgetState } from '../lib/budget.ts';
import type { Plugin, ReadCtx } from '../lib/context.ts';
import { GatewayError } from '../lib/errors.ts';
import { GENERATIVE } from '../lib/routes.ts';

export function budget(deps: { budget: Budget }): Plugin<'read'> {
  return {
    name: 'budget',
    routes: GENERATIVE,
    needs: 'read',
    gives: 'read',
    // The spend is known in memory after a profile's first request: no promise, no tick.
    run(ctx) {
      const state = deps.budget.state(ctx.profile);
      if (state instanceof Promise) return state.then((s) => apply(ctx, s));
      apply(ctx, state);
    },
  };
}

function apply(ctx: ReadCtx, state: BudgetState): void {
  if (state.blocked) throw new GatewayError('budget_exhausted', { headers: { 'retry-after': String(state.retryAfterS) } });
  ctx.degradation = state.degradation;
}
