// Step 7 of the auth chain: at most N requests per key and M per (key, end user) in fixed
// 60-second windows (defaults 60 and 10, per profile in profiles.yaml). Over either: 429 with
// retry-after 5. The chain runs this factory twice. Before the body is read ('key'), a key this
// process already saw over its limit is refused from memory (an over-limit client never makes
// sluice buffer its body). After it ('end-user', the end user usually lives in the body), the
// IP block, the key's window and the end user's are read and counted in one step, which also
// reads the profile's budget spend for the budget step: on Redis one script, one round trip.
// A request without an end user counts toward the key's limit only.

import { PROXIED, type Ctx, type Plugin } from '../lib/context.ts';
import type { Check, CheckResult } from '../lib/counters/counters.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { AUTH_FAILURE_LIMIT, AUTH_FAILURE_OPTS, AUTH_FAILURE_WINDOW_S, authFailureBucket } from './ip-block.ts';

/** Requests and end users count in fixed windows of this length. */
export const WINDOW_S = 60;

/** The key's window (plugins/read-body.ts also counts a body that never completes in it). */
export function keyWindow(keyId: number): string {
  return `rl:key:${keyId}`;
}

function keyBucket(ctx: Ctx): string {
  return keyWindow(ctx.key!.row.id);
}

export function rateLimit(deps: Pick<Deps, 'counters' | 'budget'>, scope: 'key' | 'end-user'): Plugin {
  const { counters, budget } = deps;
  if (scope === 'key') {
    return {
      name: 'rate-limit (key)',
      routes: PROXIED,
      run(ctx) {
        if (counters.refused(keyBucket(ctx), ctx.profile!.rate_limits.per_key_per_minute, WINDOW_S, { next: true })) throw new GatewayError('rate_limit_exceeded');
      },
    };
  }
  return {
    name: 'rate-limit (key, end user; IP block)',
    routes: PROXIED,
    // On the embedded counters the step answers at once: no promise, no tick.
    run(ctx) {
      const limits = ctx.profile!.rate_limits;
      // In chain order: the address first (peeked, never counted here), then the key, then the end user.
      const checks: Check[] = [
        { bucket: authFailureBucket(ctx.ip), limit: AUTH_FAILURE_LIMIT - 1, windowS: AUTH_FAILURE_WINDOW_S, blockS: AUTH_FAILURE_OPTS.blockS, peek: true },
        { bucket: keyBucket(ctx), limit: limits.per_key_per_minute, windowS: WINDOW_S },
      ];
      if (ctx.endUser !== null) checks.push({ bucket: `rl:user:${ctx.key!.row.id}:${ctx.endUser}`, limit: limits.per_user_per_minute, windowS: WINDOW_S });
      const spendKeys = budget.spendKeys(ctx.profile!.name);
      const result = counters.check(checks, spendKeys);
      if (result instanceof Promise) return result.then((r) => judge(r, spendKeys));
      judge(result, spendKeys);
    },
  };

  /** Hands the spend read on to the budget, then refuses a blocked address or a window over its limit. */
  function judge({ verdicts, values }: CheckResult, spendKeys: readonly string[]): void {
    for (let i = 0; i < spendKeys.length; i++) budget.observe(spendKeys[i]!, values[i]);
    if (!verdicts[0]!.allowed) throw new GatewayError('ip_blocked');
    for (let i = 1; i < verdicts.length; i++) if (verdicts[i] && !verdicts[i]!.allowed) throw new GatewayError('rate_limit_exceeded');
  }
}
