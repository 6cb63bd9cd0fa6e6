// Step 7 of the auth chain: at most N requests per key and M per (key, end user) in fixed
// 60-second windows (defaults 60 and 10, per profile in profiles.yaml). Over either: 429 with
// retry-after 5. The chain runs this factory twice. Before the body is read ('key'), a key this
// process already saw over its limit is refused from memory (an over-limit client never makes
// sluice buffer its body). After it ('end-user', the end user usually lives in the body), the
// counted step of lib/admission.ts reads the IP block and counts the key's and the end user's
// windows at once (and reads the budget's spend: the profile's, a capped key's, a capped
// session's). A request without an end user counts toward the key's limit only. GET /v1/budget
// is refused by the first step too while its key is over its limit, and counts toward no window:
// a status line polling it takes nothing from the agent's own requests.

import type { Plugin } from '../lib/context.ts';
import type { Verdicts } from '../lib/admission.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { PROXIED, type Route } from '../lib/routes.ts';

/** The routes a key over its limit is refused on before anything else is read: the proxied ones and GET /v1/budget. */
const KEY_LIMITED: readonly Route[] = [...PROXIED, 'budget'];

export function keyRateLimit(deps: Pick<Deps, 'admission'>): Plugin<'profiled'> {
  return {
    name: 'rate-limit (key)',
    routes: KEY_LIMITED,
    needs: 'profiled',
    gives: 'profiled',
    run(ctx) {
      if (deps.admission.keyFullHere(ctx.key.row.id, ctx.profile.rate_limits)) throw new GatewayError('rate_limit_exceeded');
    },
  };
}

export function endUserRateLimit(deps: Pick<Deps, 'admission'>): Plugin<'read'> {
  return {
    name: 'rate-limit (key, end user; IP block)',
    routes: PROXIED,
    needs: 'read',
    gives: 'read',
    // On the embedded counters the step answers at once: no promise, no tick.
    run(ctx) {
      const verdicts = deps.admission.admit({
        ip: ctx.ip, keyId: ctx.key.row.id, limits: ctx.profile.rate_limits, endUser: ctx.endUser, profile: ctx.profile.name,
        key: ctx.key.row, session: ctx.profile.session_daily_usd == null ? null : ctx.session,
      });
      if (verdicts instanceof Promise) return verdicts.then(judge);
      judge(verdicts);
    },
  };
}

/** The address first, then the windows. */
function judge(v: Verdicts): void {
  if (v.ipBlocked) throw new GatewayError('ip_blocked');
  if (v.keyOver || v.endUserOver) throw new GatewayError('rate_limit_exceeded');
}
