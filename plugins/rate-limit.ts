// Step 7 of the auth chain: at most N requests per key and M per (key, end user) in fixed
// 60-second windows (defaults 60 and 10, per profile in profiles.yaml). Over either: 429 with
// retry-after 5. The chain runs this factory twice: the key's limit before the body is read (an
// over-limit client never makes sluice buffer its body), the end user's after it (the end user
// usually lives in the body). A request without an end user counts toward the key's limit only.

import { PROXIED, type Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';

const WINDOW_S = 60;

export function rateLimit(deps: Pick<Deps, 'counters'>, scope: 'key' | 'end-user'): Plugin {
  return {
    name: `rate-limit (${scope})`,
    routes: PROXIED,
    async run(ctx) {
      const limits = ctx.profile!.rate_limits;
      const id = ctx.key!.row.id;
      const verdict = scope === 'key'
        ? await deps.counters.consume(`rl:key:${id}`, limits.per_key_per_minute, WINDOW_S)
        : ctx.endUser === null ? undefined
        : await deps.counters.consume(`rl:user:${id}:${ctx.endUser}`, limits.per_user_per_minute, WINDOW_S);
      if (verdict && !verdict.allowed) throw new GatewayError('rate_limit_exceeded');
    },
  };
}
