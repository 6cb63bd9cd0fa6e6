// Steps 2–5 of the auth chain: the key is present, well-formed (checked without touching the
// store), known, and neither revoked nor expired. Every refusal here is audited and counts toward
// the IP block, and all of them answer the same 401 body. The key itself is never kept or logged.

import type { Ctx, Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { displayPrefix, hashKey, isExpired, parseKey } from '../lib/keys.ts';
import { ALL_V1 } from '../lib/routes.ts';

/** The client key from `Authorization: Bearer …` or `x-api-key` (Bearer wins when both are sent). */
export function presentedKey(headers: Record<string, string | string[] | undefined>): string | undefined {
  const auth = headers.authorization;
  if (typeof auth === 'string' && auth.length > 7 && auth.slice(0, 7).toLowerCase() === 'bearer ') return auth.slice(7).trim();
  const x = headers['x-api-key'];
  return typeof x === 'string' && x !== '' ? x.trim() : undefined;
}

export function keyAuth(deps: Pick<Deps, 'keyCache' | 'authFailure' | 'now'>): Plugin<'open', 'keyed'> {
  return {
    name: 'key-auth',
    routes: ALL_V1,
    needs: 'open',
    gives: 'keyed',
    // A key in the cache is checked without a promise; a miss, or a refusal, goes the async way.
    run(ctx) {
      const key = presentedKey(ctx.req.headers);
      const parts = key ? parseKey(key) : undefined;
      if (key && parts) {
        const hash = hashKey(key);
        const cached = deps.keyCache.peek(hash);
        if (cached && !cached.row.revoked_at && !isExpired(cached.row, deps.now())) {
          ctx.key = cached;
          return;
        }
        return check(ctx, key, parts, hash);
      }
      return check(ctx, key, parts, '');
    },
  };

  async function check(ctx: Ctx, key: string | undefined, parts: ReturnType<typeof parseKey>, hash: string): Promise<void> {
    if (!key) {
      await deps.authFailure(ctx, 'missing_key', '');
      throw new GatewayError('invalid_api_key');
    }
    if (!parts) {
      await deps.authFailure(ctx, 'malformed_key', '');
      throw new GatewayError('invalid_api_key');
    }
    const prefix = displayPrefix(parts.profile, parts.token);
    let found;
    try {
      found = await deps.keyCache.lookup(hash);
    } catch {
      // The store is away and this key was never seen: not the client's fault, so no audit and
      // no count toward the IP block; a retryable 503 instead of a 401 it could not earn.
      throw new GatewayError('store_unavailable');
    }
    const outcome = !found ? 'unknown_key'
      : found.row.revoked_at ? 'revoked_key'
      : isExpired(found.row, deps.now()) ? 'expired_key'
      : undefined;
    if (outcome) {
      await deps.authFailure(ctx, outcome, prefix);
      throw new GatewayError('invalid_api_key');
    }
    ctx.key = found!; // no outcome: a row was found
  }
}
