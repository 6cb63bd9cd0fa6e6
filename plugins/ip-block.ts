// Step 1 of the auth chain: an address with 20 auth failures in 10 minutes is refused for the
// window (429, retry-after 600), valid key or not; IPv6 counts per /64 (the window and its rules:
// lib/admission.ts). An address this process saw blocked is refused here, before anything else,
// from memory. On the proxied routes the window itself is read later, in the one counted step of
// plugins/rate-limit.ts (a block counted by another process shows there); GET /v1/models has no
// such step: it reads the window here.

import type { Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { ALL_V1 } from '../lib/routes.ts';

export function ipBlock(deps: Pick<Deps, 'admission'>): Plugin<'open'> {
  const { admission } = deps;
  return {
    name: 'ip-block',
    routes: ALL_V1,
    needs: 'open',
    gives: 'open',
    run(ctx) {
      if (admission.blockedHere(ctx.ip)) throw new GatewayError('ip_blocked');
      if (ctx.route === 'models') {
        return admission.failures(ctx.ip).then((v) => {
          if (!v.allowed) throw new GatewayError('ip_blocked');
        });
      }
    },
  };
}
