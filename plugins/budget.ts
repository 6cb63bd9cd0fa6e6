// Step 8 of the auth chain: the profile's budget state on every proxied request except
// count_tokens. 70 % → fast tier only, 85 % → also max_tokens 2048 (both applied by
// model-resolve), 100 % → 429 with retry-after to the blocking window's reset (≥ 3600 s).

import type { Budget } from '../lib/budget.ts';
import type { Plugin } from '../lib/context.ts';
import { GatewayError } from '../lib/errors.ts';

export function budget(deps: { budget: Budget }): Plugin {
  return {
    name: 'budget',
    routes: ['chat', 'messages', 'responses'],
    async run(ctx) {
      const state = await deps.budget.state(ctx.profile!);
      if (state.blocked) throw new GatewayError('budget_exhausted', { headers: { 'retry-after': String(state.retryAfterS) } });
      ctx.degradation = state.degradation;
    },
  };
}
