// The chain's order is checked, not assumed: a plugin placed before the one that produces what it
// reads does not compile (the `@ts-expect-error` lines below fail `tsc --noEmit` the day the types
// stop catching them), and a route whose share of the chain skips a producer, or a proxied route
// that never reads the body, fails at start-up (routeTable) instead of answering 500 at request time.

import t from 'tap';
import { Chain, checkChain, type AnyPlugin } from '../../lib/context.ts';
import type { Deps } from '../../lib/deps.ts';
import { routeTable } from '../../lib/handler.ts';
import { ALL_V1, ROUTE_TABLE } from '../../lib/routes.ts';
import { allowlist } from '../../plugins/allowlist.ts';
import { budget } from '../../plugins/budget.ts';
import { createPlugins } from '../../plugins/index.ts';
import { ipBlock } from '../../plugins/ip-block.ts';
import { keyAuth } from '../../plugins/key-auth.ts';
import { profileCheck } from '../../plugins/profile-check.ts';
import { endUserRateLimit, keyRateLimit } from '../../plugins/rate-limit.ts';
import { readBody } from '../../plugins/read-body.ts';

/** The factories only keep what they are given; nothing here runs a request. */
const deps = { config: { tiers: new Map() } } as unknown as Deps;

t.test('the real chain passes the start-up check on every route', async (t) => {
  const plugins = createPlugins(deps, { bodyTimeoutMs: 1000 });
  const routes = routeTable(plugins);
  t.same([...routes.keys()].sort(), ALL_V1.map((r) => ROUTE_TABLE[r].path).sort(), 'every route of the table is served');
  t.same(routes.get('/v1/models')!.chain.map((p) => p.name), ['ip-block', 'key-auth', 'allowlist', 'profile-check'], 'models: the header-only checks');
  t.same(routes.get('/v1/budget')!.chain.map((p) => p.name), ['ip-block', 'key-auth', 'allowlist', 'profile-check', 'rate-limit (key)'],
    'budget: the header-only checks and the key over its rate limit; no body read, no budget step');
  t.equal(routes.get('/v1/budget')!.dialect, null, "budget: a GET's errors take the dialect its headers suggest");
  t.equal(routes.get('/v1/messages')!.chain.at(-1)!.name, 'sanitize');
});

t.test('a misordered chain does not compile', async (t) => {
  // @ts-expect-error the allowlist reads the key, which key-auth has not produced yet
  Chain.start().then(allowlist(deps));
  // @ts-expect-error reading the body needs the profile (its rate limits), which profile-check produces
  Chain.start().then(ipBlock(deps)).then(keyAuth(deps)).then(readBody(deps, { timeoutMs: 1 }));
  // @ts-expect-error the budget reads the body's model: it must come after read-body
  Chain.start().then(keyAuth(deps)).then(profileCheck(deps)).then(budget(deps));
  const ok = Chain.start().then(keyAuth(deps)).then(allowlist(deps)).then(profileCheck(deps)).then(keyRateLimit(deps)).then(readBody(deps, { timeoutMs: 1 })).then(endUserRateLimit(deps));
  t.equal(ok.plugins.length, 6, 'in order, it does');
});

t.test('a route whose chain skips a producer fails at start-up, naming the plugin', async (t) => {
  const real = createPlugins(deps, { bodyTimeoutMs: 1000 });
  const swapped = [...real];
  const a = swapped.findIndex((p) => p.name === 'allowlist');
  const k = swapped.findIndex((p) => p.name === 'key-auth');
  [swapped[a], swapped[k]] = [swapped[k]!, swapped[a]!];
  t.throws(() => routeTable(swapped), /route chat: allowlist needs the keyed phase/);

  const noBody = real.filter((p) => p.name !== 'read-body');
  t.throws(() => routeTable(noBody), /rate-limit \(key, end user; IP block\) needs the read phase/);

  // A producer that runs on fewer routes than what depends on it: the route it skips is named.
  const narrow: AnyPlugin[] = real.map((p) => (p.name === 'read-body' ? { ...p, routes: ['chat', 'messages', 'responses'] } : p));
  t.throws(() => routeTable(narrow), /route count_tokens:/);

  // GET /v1/budget reads the key's profile: a chain that stops short of it, or reads a body, fails at start-up.
  const budgetShort: AnyPlugin[] = real.map((p) => (p.name === 'profile-check' || p.name === 'rate-limit (key)' ? { ...p, routes: p.routes.filter((r) => r !== 'budget') } : p));
  t.throws(() => routeTable(budgetShort), /route budget: it must end with the key and its profile found/);
  const budgetBody: AnyPlugin[] = real.map((p) => (p.name === 'read-body' ? { ...p, routes: [...p.routes, 'budget'] } : p));
  t.throws(() => routeTable(budgetBody), /route budget:/);

  const headerOnly = real.filter((p) => p.needs !== 'read' && p.gives !== 'read');
  t.throws(() => routeTable(headerOnly), /route chat: no plugin reads the body/);
  t.equal(checkChain('models', headerOnly.filter((p) => p.routes.includes('models'))), 'profiled');
});
