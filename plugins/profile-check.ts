// Step 6 of the auth chain: the key's profile must still be configured (403 otherwise) and must
// have an upstream key in the environment (503 otherwise). Fills in profile, router and upstream
// key for what follows; the upstream key is never logged or shown to the client.

import type { Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { ALL_V1 } from '../lib/routes.ts';

export function profileCheck(deps: Pick<Deps, 'config' | 'upstreamKeys'>): Plugin<'keyed', 'profiled'> {
  return {
    name: 'profile-check',
    routes: ALL_V1,
    needs: 'keyed',
    gives: 'profiled',
    run(ctx) {
      const profile = deps.config.profiles.get(ctx.key.row.profile);
      if (!profile) throw new GatewayError('profile_removed');
      const upstreamKey = deps.upstreamKeys.get(profile.name);
      if (!upstreamKey) throw new GatewayError('upstream_key_missing');
      ctx.profile = profile;
      // Configuration loading refuses a profile naming an unknown router.
      ctx.router = deps.config.routers.get(profile.router)!;
      ctx.upstreamKey = upstreamKey;
    },
  };
}
