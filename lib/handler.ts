// The per-request handler: locates a request (operator routes, /health, the /v1 routes), builds
// its context, runs the route's plugin chain (resolved once at start-up), answers GET /v1/models
// and GET /v1/budget itself and hands a proxied request to the proxy core. It is the only place
// that renders sluice's own errors, in the request's dialect, and it counts the requests in flight
// for the shutdown. It never writes a row (the proxy core does) and never holds a request past its
// response.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BlockList, Socket } from 'node:net';
import type { Logger } from 'pino';
import type { Metrics } from './board/metrics.ts';
import type { Health } from './board/types.ts';
import { budgetHeadersOn, budgetReport, setBudgetHeaders, type BudgetReader } from './budget-report.ts';
import { canonicalIp, clientIp, inList } from './client-ip.ts';
import { checkChain, newContext, type AnyPlugin, type Ctx, type ProfiledCtx, type ReadCtx } from './context.ts';
import { GatewayError, renderError, type Dialect } from './errors.ts';
import { ALL_V1, ROUTE_TABLE, type Route } from './routes.ts';
import type { RequestTracer } from './trace/request.ts';

/** A /v1 route as the handler serves it: its method, its errors' dialect (null: guessed per request) and its share of the chain. */
export interface RouteDef { route: Route; method: string; dialect: Dialect | null; chain: readonly AnyPlugin[] }

/**
 * Each /v1 route by path (lib/routes.ts) with the plugins that run on it, in chain order, checked
 * once at start-up: each plugin's phase is reached before it on that route, a proxied route's
 * chain reaches the read phase the proxy core needs, and GET /v1/budget's ends at the profiled
 * phase it reads (no body). A chain that breaks any of these throws here.
 */
export function routeTable(plugins: readonly AnyPlugin[]): Map<string, RouteDef> {
  const routes = new Map<string, RouteDef>();
  for (const route of ALL_V1) {
    const spec = ROUTE_TABLE[route];
    const chain = plugins.filter((p) => p.routes.includes(route));
    const reached = checkChain(route, chain);
    if (spec.upstream !== null && reached !== 'read') throw new Error(`plugin chain of route ${route}: no plugin reads the body the proxy core forwards`);
    if (route === 'budget' && reached !== 'profiled') throw new Error('plugin chain of route budget: it must end with the key and its profile found, which GET /v1/budget reads');
    routes.set(spec.path, { route, method: spec.method, dialect: spec.dialect, chain });
  }
  return routes;
}

type OperatorRoute = (req: IncomingMessage, res: ServerResponse) => unknown;

export interface HandlerOptions {
  /** Each /v1 route with its chain, resolved at start-up (routeTable). */
  routes: Map<string, RouteDef>;
  /** The board's GET/HEAD routes (/, /api/summary, /api/health, /metrics), consulted before the /v1 routes. */
  operatorRoutes: Map<string, OperatorRoute>;
  /** What `GET /health?details` shows: only the status a load balancer needs (the details are the board's). */
  status: () => Health['status'];
  forward: (ctx: ReadCtx) => void;
  metrics: Pick<Metrics, 'refusal' | 'trackStream'>;
  trustedProxies: BlockList;
  /** The GET /v1/models body, serialised once. */
  modelsBody: Buffer;
  /** What GET /v1/budget reads: the key's and its profile's standing, a session's spend (lib/budget-report.ts). */
  budget: BudgetReader;
  log: Logger;
  /** The trace hooks (lib/trace/request.ts); null or absent while tracing is off, and then no hook runs. */
  trace?: RequestTracer | null;
}

/** Requests outside a known route, and GETs of a route without a dialect of its own (a GET has no body), get errors in the dialect their path or headers suggest. */
function guessDialect(req: IncomingMessage, path: string): Dialect {
  if (path.startsWith('/v1/responses')) return 'responses';
  return path.startsWith('/v1/messages') || req.headers['anthropic-version'] !== undefined ? 'messages' : 'chat';
}

/**
 * Codex's remote compaction endpoint. The router has none (it is stateless), so it is a 404 that
 * says so: Codex with a custom provider compacts locally through /v1/responses (docs/responses.md).
 */
const COMPACT_PATH = '/v1/responses/compact';
const NO_COMPACT = 'The router has no remote compaction endpoint: compact locally (Codex does with a custom provider).';

/** Where a request goes: its path, its route (if any), the dialect of its errors, its context once made. */
class Where {
  readonly path: string;
  readonly hasQuery: boolean;
  readonly def: RouteDef | undefined;
  readonly dialect: Dialect;
  /** Set once the context exists: the metrics of a refusal name its profile. */
  ctx: Ctx | undefined = undefined;
  constructor(req: IncomingMessage, routes: HandlerOptions['routes']) {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    this.path = q === -1 ? url : url.slice(0, q);
    this.hasQuery = q !== -1;
    this.def = routes.get(this.path);
    this.dialect = this.def?.dialect ?? guessDialect(req, this.path);
  }
}

/** During a drain: whether a response begun now on this connection says `connection: close` (lib/lifecycle/drain.ts makes them). */
export type Closes = (socket: Socket) => boolean;

export function createHandler(opts: HandlerOptions) {
  const { routes, operatorRoutes, metrics, log, modelsBody, trustedProxies } = opts;
  const trace = opts.trace ?? null;
  let inFlight = 0;
  let xffNoted = false;
  let idle: (() => void) | undefined;
  /** Set by drain(): whether a response begun now on a connection says `connection: close`. */
  let closes: Closes | null = null;
  // One listener function for every response, not a closure per request.
  function onResponseClose(): void {
    if (--inFlight === 0) idle?.();
  }

  async function handle(req: IncomingMessage, res: ServerResponse, where: Where): Promise<void> {
    const { path, def, dialect } = where;
    if (path === '/api/hello' && req.method === 'HEAD') {
      res.writeHead(204).end();
      return;
    }
    if (path === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      if (!where.hasQuery) res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ status: opts.status() }));
      return;
    }
    const operator = req.method === 'GET' || req.method === 'HEAD' ? operatorRoutes.get(path) : undefined;
    if (operator) return void (await operator(req, res));
    if (!def) return renderError(res, dialect, path === COMPACT_PATH ? new GatewayError('not_found', { message: NO_COMPACT }) : new GatewayError('not_found'));
    if (req.method !== def.method) {
      res.setHeader('allow', def.method);
      return renderError(res, dialect, new GatewayError('method_not_allowed'));
    }
    // A trusted proxy's X-Forwarded-For that cannot be read is refused: taking the proxy's own
    // address instead would count every client behind it as one.
    const ip = clientIp(req.socket.remoteAddress, req.headers['x-forwarded-for'], trustedProxies);
    if (ip === null) throw new GatewayError('invalid_forwarded_for');
    if (!xffNoted && req.headers['x-forwarded-for'] !== undefined && !inList(trustedProxies, canonicalIp(req.socket.remoteAddress ?? '') ?? '')) {
      // Once per process: a front proxy left out of SLUICE_TRUSTED_PROXIES makes every client one address.
      xffNoted = true;
      log.warn({ peer: ip }, 'X-Forwarded-For from a peer not named in SLUICE_TRUSTED_PROXIES is ignored: if this peer is your front proxy, name it there');
    }
    const run = req.headers['x-sluice-run'];
    const ctx = newContext(req, res, def.route, dialect, ip, typeof run === 'string' ? run.slice(0, 128) : null);
    where.ctx = ctx;
    if (trace !== null) trace.begin(ctx); // the request's SERVER span
    const chain = def.chain;
    for (let i = 0; i < chain.length; i++) {
      const pending = chain[i].run(ctx);
      if (pending) await pending; // only asynchronous plugins cost a tick
    }
    if (def.route === 'models') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': modelsBody.length }).end(modelsBody);
      return;
    }
    if (def.route === 'budget') {
      // The chain ends with the key and its profile found (routeTable checked it): no body is read, nothing is spent or counted.
      const body = Buffer.from(JSON.stringify(await budgetReport(opts.budget, ctx as ProfiledCtx)));
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store', 'content-length': body.length }).end(body);
      return;
    }
    // A proxied route's chain reaches the read phase: routeTable checked it at start-up.
    const read = ctx as ReadCtx;
    if (read.removed.length > 0 || read.adjusted.length > 0) {
      log.info({ req: read.id, prefix: read.key.row.prefix, removed: read.removed, adjusted: read.adjusted, degradation: read.degradation }, 'sanitized request');
    }
    if (read.stream) metrics.trackStream(res);
    opts.forward(read);
  }

  /** Renders what stopped a request: a catalogue error in its dialect, anything else as `internal`. */
  function fail(req: IncomingMessage, res: ServerResponse, where: Where, err: unknown): void {
    const { dialect } = where;
    if (err instanceof GatewayError) {
      metrics.refusal(where.def?.route, where.ctx?.profile?.name, err.code);
      if (trace !== null) trace.refused(res, err.code);
      // A refusal once the budget step ran (its own 429s among them) tells the budget as a response does.
      const ctx = where.ctx;
      if (ctx !== undefined && ctx.budget !== null && ctx.profile !== null && budgetHeadersOn(ctx.profile) && !res.headersSent) setBudgetHeaders(res, ctx.budget);
      renderError(res, dialect, err);
      // A refused body may still be arriving: close the connection rather than read it on (a body
      // sluice will not take says so with `connection: close`; others Node reads past on its own).
      if (!req.complete && (err.code === 'request_too_large' || err.code === 'body_timeout' || err.headers.connection === 'close')) {
        res.once('finish', () => lingeringClose(req));
      }
    } else if (!req.complete && req.socket.destroyed) {
      // The client went away while its body was arriving (its socket, and so `res`, is gone): nothing to answer.
      log.debug({ err }, 'client closed before its request body was complete');
    } else {
      log.error({ err }, 'request failed inside the gateway');
      metrics.refusal(where.def?.route, where.ctx?.profile?.name, 'internal');
      if (trace !== null) trace.refused(res, 'internal');
      renderError(res, dialect, new GatewayError('internal'));
    }
  }

  return {
    /** The node:http request listener. */
    listener(req: IncomingMessage, res: ServerResponse): void {
      inFlight++;
      res.on('close', onResponseClose);
      if (closes !== null && closes(req.socket)) res.setHeader('connection', 'close');
      const where = new Where(req, routes);
      handle(req, res, where).catch((err) => fail(req, res, where, err));
    },
    /** HTTP requests being answered right now. */
    get inFlight(): number {
      return inFlight;
    },
    /**
     * The drain: every request from now on on a connection `which` names is answered with
     * `connection: close` (Node then closes the connection once the response is sent); called
     * again as the drain goes on (lib/lifecycle/drain.ts). Those already being answered are told
     * by the server (closeAfterResponse in lib/lifecycle/drain.ts), which knows the connections.
     */
    drain(which: Closes): void {
      closes = which;
    },
    /** Resolves once no request is in flight (at once if none is). */
    idle(): Promise<void> {
      if (inFlight === 0) return Promise.resolve();
      return new Promise<void>((resolve) => (idle = resolve));
    },
  };
}

/** How long the connection of a refused body keeps draining after the refusal (see lingeringClose). */
const LINGER_MS = 2_000;

/**
 * Closes the connection of a request whose body was refused while it may still be arriving (413,
 * 408). Destroying the socket at once makes the kernel answer the unread bytes with a reset, which
 * can discard the refusal before the client reads it. So: FIN first, then read and drop whatever
 * still comes for at most LINGER_MS (a "lingering close", as nginx does), then destroy.
 */
function lingeringClose(req: IncomingMessage): void {
  const socket = req.socket;
  if (socket.destroyed) return;
  const timer = setTimeout(() => socket.destroy(), LINGER_MS).unref();
  socket.once('close', () => clearTimeout(timer));
  socket.end();
  req.resume();
}
