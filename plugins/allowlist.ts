// Step 5 (second half): a key with an IP/CIDR allowlist is refused (403) from any other client
// address. The list was compiled once when the key was loaded; this is a BlockList lookup.
// A refusal is audited and counts toward the IP block like the key checks before it.

import { inList } from '../lib/client-ip.ts';
import type { Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { ALL_V1 } from '../lib/routes.ts';

export function allowlist(deps: Pick<Deps, 'authFailure'>): Plugin<'keyed'> {
  return {
    name: 'allowlist',
    routes: ALL_V1,
    needs: 'keyed',
    gives: 'keyed',
    // Not async: a passing request costs no promise (only a refusal awaits its audit).
    run(ctx) {
      const { allow, row } = ctx.key;
      if (allow && !inList(allow, ctx.ip)) {
        return deps.authFailure(ctx, 'ip_not_allowed', row.prefix).then(() => {
          throw new GatewayError('ip_not_allowed');
        });
      }
    },
  };
}
