// Step 5 (second half): a key with an IP/CIDR allowlist is refused (403) from any other client
// address. The list was compiled once when the key was loaded; this is a BlockList lookup.
// A refusal is audited and counts toward the IP block like the key checks before it.

import { inList } from '../lib/client-ip.ts';
import { ALL_V1, type Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';

export function allowlist(deps: Pick<Deps, 'authFailure'>): Plugin {
  return {
    name: 'allowlist',
    routes: ALL_V1,
    // Not async: a passing request costs no promise (only a refusal awaits its audit).
    run(ctx) {
      const allow = ctx.key!.allow;
      if (allow && !inList(allow, ctx.ip)) {
        return deps.authFailure(ctx, 'ip_not_allowed', ctx.key!.row.prefix).then(() => {
          throw new GatewayError('ip_not_allowed');
        });
      }
    },
  };
}
