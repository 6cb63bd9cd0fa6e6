// The per-request context that plugins read and fill in, the phases it goes through, and the
// Plugin contract. A plugin decides: it sets fields here or throws a GatewayError; it never writes
// to the response. The context is made with every field it will ever have (one shape for V8), and
// its type follows the chain: a plugin names the phase it needs (`open`, `keyed` once key-auth
// found the key, `profiled` once profile-check found its profile, `read` once the body is read)
// and the phase it leaves; `Chain.then` refuses at compile time a plugin whose phase is not reached
// yet, and `checkChain` refuses at start-up a route whose chain, filtered by route, skips one.
// The context carries no secrets beyond `upstreamKey`, which only the proxy core reads.

import { randomFillSync } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BlockList } from 'node:net';
import type { BudgetView } from './budget.ts';
import type { Profile, Router } from './config.ts';
import type { Dialect } from './errors.ts';
import type { ProxiedRoute, Route } from './routes.ts';
import type { Degradation, KeyRow } from './store/store.ts';

export interface AuthedKey {
  row: KeyRow;
  /** ip_allow compiled once per key lookup; undefined = any address. */
  allow: BlockList | undefined;
}

/** A request as it arrives: nothing about its key, profile or body is known yet. */
export interface Ctx {
  readonly id: string;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly route: Route;
  readonly dialect: Dialect;
  /** performance.now() when the request arrived. */
  readonly t0: number;
  ip: string;
  key: AuthedKey | null;
  profile: Profile | null;
  router: Router | null;
  /** The profile's upstream key ('' until profile-check). */
  upstreamKey: string;
  /** The body as received (empty until read-body), and parsed. */
  raw: Buffer;
  body: Record<string, any> | null;
  stream: boolean;
  endUser: string | null;
  session: string | null;
  run: string | null;
  requestedModel: string | null;
  tier: string | null;
  model: string | null;
  degradation: Degradation;
  /** The stage the request is handled at and the standings it comes from (plugins/budget.ts); null until that step ran. */
  budget: BudgetView | null;
  /** What the sanitizer removed, for the request's log line. */
  removed: string[];
  /** What model resolution changed to keep the request valid and in budget (docs/rewrites.md), for the same line. */
  adjusted: string[];
}

/** After key-auth: the key is known, not revoked, not expired. */
export interface KeyedCtx extends Ctx {
  key: AuthedKey;
}

/** After profile-check: the key's profile is configured and has its upstream key. */
export interface ProfiledCtx extends KeyedCtx {
  profile: Profile;
  router: Router;
}

/** After read-body: the body is read, scanned, and names a model (read-body runs on the proxied routes only). */
export interface ReadCtx extends ProfiledCtx {
  readonly route: ProxiedRoute;
  body: Record<string, any>;
  requestedModel: string;
}

/** The phases, in the order a chain reaches them, with the context each one guarantees. */
export interface Phases {
  open: Ctx;
  keyed: KeyedCtx;
  profiled: ProfiledCtx;
  read: ReadCtx;
}
export type Phase = keyof Phases;
export const PHASES = ['open', 'keyed', 'profiled', 'read'] as const satisfies readonly Phase[];

/** The phases reached once `P` is: P and every earlier one. */
type Reached = { open: 'open'; keyed: 'open' | 'keyed'; profiled: 'open' | 'keyed' | 'profiled'; read: Phase };

/**
 * A step of the chain. It runs on the routes it names, needs the phase `N` (its `run` sees that
 * phase's context) and leaves the context at phase `G` (the same, unless it produces the next).
 */
export interface Plugin<N extends Phase = Phase, G extends Phase = N> {
  readonly name: string;
  /** The routes the plugin runs on; resolved per route at start-up so the hot path skips the rest. */
  readonly routes: readonly Route[];
  readonly needs: N;
  readonly gives: G;
  /** A property, not a method, so that its parameter is checked strictly when a chain is built. */
  readonly run: (ctx: Phases[N]) => void | Promise<void>;
}

/** Any plugin, as a route's chain holds it (the phases were checked when the chain was built). */
export type AnyPlugin = Plugin<any, any>;

/**
 * The chain, built step by step: `then` accepts a plugin only if the chain has reached the phase
 * it needs, so a misordered chain does not compile. `plugins` is the result, in order.
 */
export class Chain<P extends Phase> {
  readonly plugins: readonly AnyPlugin[];
  private constructor(plugins: readonly AnyPlugin[]) {
    this.plugins = plugins;
  }

  static start(): Chain<'open'> {
    return new Chain<'open'>([]);
  }

  then<N extends Reached[P], G extends Phase>(plugin: Plugin<N, G>): Chain<G extends Reached[P] ? P : G> {
    return new Chain([...this.plugins, plugin]);
  }
}

/**
 * Checks one route's chain (the plugins that run on it, in order): each plugin's phase must have
 * been reached by the ones before it on that route. Throws at start-up naming the first that is
 * not. Returns the phase the route's chain ends at.
 */
export function checkChain(route: Route, chain: readonly AnyPlugin[]): Phase {
  let reached = 0;
  for (const p of chain) {
    const needs = PHASES.indexOf(p.needs);
    if (needs > reached) throw new Error(`plugin chain of route ${route}: ${p.name} needs the ${p.needs} phase, which no plugin before it on that route reaches`);
    reached = Math.max(reached, PHASES.indexOf(p.gives));
  }
  return PHASES[reached]!;
}

/** A new context, every field present from the start. */
export function newContext(req: IncomingMessage, res: ServerResponse, route: Route, dialect: Dialect, ip: string, run: string | null): Ctx {
  return {
    id: newRequestId(), req, res, route, dialect, t0: performance.now(), ip,
    key: null, profile: null, router: null, upstreamKey: '', raw: EMPTY, body: null,
    stream: false, endUser: null, session: null, run,
    requestedModel: null, tier: null, model: null, degradation: 'none', budget: null, removed: [], adjusted: [],
  };
}
const EMPTY = Buffer.alloc(0);

// Request ids are UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness, with a
// counter in rand_a so ids of one millisecond still sort by arrival. Time-ordered ids make the
// row inserts append to the end of the primary-key index instead of landing on a random page.
const pool = Buffer.alloc(16 * 256);
let poolAt = pool.length;
let lastMs = 0;
let seq = 0;

export function newRequestId(now = Date.now()): string {
  if (poolAt === pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const b = pool.subarray(poolAt, (poolAt += 16));
  seq = now === lastMs ? (seq + 1) & 0xfff : b[6] & 0x7f; // start low, so a busy millisecond rarely wraps
  lastMs = now;
  b.writeUIntBE(now, 0, 6);
  b[6] = 0x70 | (seq >> 8);
  b[7] = seq & 0xff;
  b[8] = 0x80 | (b[8] & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
