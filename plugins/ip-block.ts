// Step 1 of the auth chain: an address with 20 auth failures in 10 minutes is refused for the
// window (429, retry-after 600), valid key or not. IPv6 counts per /64. This file owns the block's
// window both ways: `countAuthFailure` (called for every failure of steps 2–5) and the check.

import { ipBlockBucket } from '../lib/client-ip.ts';
import { ALL_V1, type Plugin } from '../lib/context.ts';
import type { Counters, Verdict } from '../lib/counters/counters.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';

export const AUTH_FAILURE_LIMIT = 20;
export const AUTH_FAILURE_WINDOW_S = 600;

/** The window counts failures; the 20th blocks the bucket for the whole window. */
export function authFailureBucket(ip: string): string {
  return `authfail:${ipBlockBucket(ip)}`;
}
export const AUTH_FAILURE_OPTS = { blockS: AUTH_FAILURE_WINDOW_S } as const;

/** Counts one failure of steps 2–5 against the client's address. */
export function countAuthFailure(counters: Counters, ip: string): Promise<Verdict> {
  return counters.consume(authFailureBucket(ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, AUTH_FAILURE_OPTS);
}

/** The address's failure window, without counting (allowed false while it is blocked). */
export function authFailureState(counters: Counters, ip: string): Promise<Verdict> {
  return counters.peek(authFailureBucket(ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, AUTH_FAILURE_OPTS);
}

/**
 * An address this process saw blocked is refused here, before anything else, from memory. On the
 * proxied routes the window itself is read later, in the one counted step of plugins/rate-limit.ts
 * (a block counted by another process shows there); GET /v1/models has no such step: it reads here.
 */
export function ipBlock(deps: Pick<Deps, 'counters'>): Plugin {
  const { counters } = deps;
  return {
    name: 'ip-block',
    routes: ALL_V1,
    run(ctx) {
      if (counters.refused(authFailureBucket(ctx.ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, AUTH_FAILURE_OPTS)) throw new GatewayError('ip_blocked');
      if (ctx.route === 'models') {
        return authFailureState(counters, ctx.ip).then((v) => {
          if (!v.allowed) throw new GatewayError('ip_blocked');
        });
      }
    },
  };
}
