// The plugin chain, in order. This literal is the auth chain of the spec: reading it top to
// bottom tells what a request goes through before the proxy core forwards it (step 9) and the
// recorder writes its row (step 10). Header-only checks come first, so a client that fails them
// never makes sluice read its body. Each plugin declares the routes it runs on and the phase it
// needs (lib/context.ts): `then` does not compile a plugin placed before the one that produces
// what it reads, and the server checks each route's share of the chain at start-up.

import { Chain, type AnyPlugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { allowlist } from './allowlist.ts';
import { budget } from './budget.ts';
import { ipBlock } from './ip-block.ts';
import { keyAuth } from './key-auth.ts';
import { modelResolve } from './model-resolve.ts';
import { profileCheck } from './profile-check.ts';
import { endUserRateLimit, keyRateLimit } from './rate-limit.ts';
import { readBody } from './read-body.ts';
import { sanitize } from './sanitize.ts';
import { sanitizeResponses } from './sanitize-responses.ts';

export function createPlugins(deps: Deps, opts: { bodyTimeoutMs: number }): readonly AnyPlugin[] {
  return Chain.start()
    .then(ipBlock(deps))                               // 1    an address seen blocked (20 auth failures in 10 min) → 429
    .then(keyAuth(deps))                               // 2–5  key present, well-formed, known, not revoked or expired → else 401   ⇒ keyed
    .then(allowlist(deps))                             // 5    client address inside the key's allowlist → else 403
    .then(profileCheck(deps))                          // 6    profile still configured (403), upstream key present (503)           ⇒ profiled
    .then(keyRateLimit(deps))                          // 7    a key seen over its requests per minute → 429, body unread
    .then(readBody(deps, { timeoutMs: opts.bodyTimeoutMs })) // room for the body first, then read and scanned once; end user and session ⇒ read
    .then(endUserRateLimit(deps))                      // 1, 7 IP block, key and (key, end user) windows counted in one step → 429
    .then(sanitizeResponses())                         //      responses: stateful fields the stateless router cannot honour → 400
    .then(budget(deps))                                // 8    daily and monthly budget → degrade, or 429 at 100 %
    .then(modelResolve(deps))                          //      aliases, sluice/auto, degradation, fallback lists, output cap + thinking budget
    .then(sanitize())                                  //      messages-dialect fields non-vendor models reject
    .plugins;
}
