// The /v1 routes, stated once: each route's path, its method, the dialect its errors are written
// in (null: guessed from the request's headers), and its path at the router (null: sluice answers
// it itself). The Route type, the set of
// proxied routes, the paths the handler serves, the upstream targets and the metrics' route labels
// are all derived from this table: adding a route is one entry here.

import type { Dialect } from './errors.ts';

interface RouteSpec {
  readonly path: string;
  readonly method: 'GET' | 'POST';
  /** Null: a GET whose errors take the dialect its headers suggest (`anthropic-version`: messages, else chat). */
  readonly dialect: Dialect | null;
  /** The path at the router, relative to its base URL; null when sluice answers the route. */
  readonly upstream: string | null;
}

export const ROUTE_TABLE = {
  chat: { path: '/v1/chat/completions', method: 'POST', dialect: 'chat', upstream: 'api/v1/chat/completions' },
  messages: { path: '/v1/messages', method: 'POST', dialect: 'messages', upstream: 'api/v1/messages' },
  count_tokens: { path: '/v1/messages/count_tokens', method: 'POST', dialect: 'messages', upstream: 'api/v1/messages/count_tokens' },
  responses: { path: '/v1/responses', method: 'POST', dialect: 'responses', upstream: 'api/v1/responses' },
  models: { path: '/v1/models', method: 'GET', dialect: 'chat', upstream: null },
  budget: { path: '/v1/budget', method: 'GET', dialect: null, upstream: null },
} as const satisfies Record<string, RouteSpec>;

export type Route = keyof typeof ROUTE_TABLE;
/** The routes sluice forwards to the router. */
export type ProxiedRoute = { [R in Route]: (typeof ROUTE_TABLE)[R]['upstream'] extends string ? R : never }[Route];

/** Every /v1 route, in the table's order. */
export const ALL_V1 = Object.keys(ROUTE_TABLE) as readonly Route[];
/** The routes sluice forwards to the router. */
export const PROXIED = ALL_V1.filter((r) => ROUTE_TABLE[r].upstream !== null) as readonly ProxiedRoute[];
/** The routes that generate: the budget and model resolution apply to them (count_tokens only counts). */
export const GENERATIVE = ['chat', 'messages', 'responses'] as const satisfies readonly ProxiedRoute[];

export function isRoute(name: string): name is Route {
  return Object.prototype.hasOwnProperty.call(ROUTE_TABLE, name);
}
