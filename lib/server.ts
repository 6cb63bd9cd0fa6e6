// The gateway: a minimal node:http server that routes each request, runs the ordered plugin chain
// (plugins/index.ts) resolved per route at start-up, then hands proxied requests to the proxy
// core. It is the only place that renders sluice's own errors (lib/errors.ts), in the request's
// dialect. Shutdown stops accepting, lets open streams finish within a grace period, flushes
// every row and closes the store.

import { readFileSync } from 'node:fs';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { createPlugins } from '../plugins/index.ts';
import { countAuthFailure } from '../plugins/ip-block.ts';
import { AutoRouter } from './auto.ts';
import { createBoard } from './board/index.ts';
import { retentionDays, startMaintenance } from './board/retention.ts'; // board: rollups upkeep
import { createMetrics } from './board/metrics.ts';
import { Budget } from './budget.ts';
import { Catalog } from './catalog.ts';
import { clientIp, compileIpList } from './client-ip.ts';
import { upstreamKeyVar, type Config } from './config.ts';
import { newRequestId, type Ctx, type Plugin, type Route } from './context.ts';
import type { Counters } from './counters/counters.ts';
import type { Deps } from './deps.ts';
import { GatewayError, renderError, type Dialect } from './errors.ts';
import { KeyCache } from './key-cache.ts';
import { createProxy } from './proxy.ts';
import { Recorder } from './recorder.ts';
import { createUpstreamLoops } from './upstream/index.ts'; // ring 1
import type { RequestRow, Store } from './store/store.ts';

export const VERSION: string = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;

export interface GatewayOptions {
  config: Config;
  store: Store;
  counters: Counters;
  log: Logger;
  env?: NodeJS.ProcessEnv;
  dataDir: string;
  now?: () => number;
  upstreamTimeoutMs?: number;
  bodyTimeoutMs?: number;
  /** How long a key lookup is cached: a revocation takes effect within this time (default 60 s). */
  keyCacheTtlMs?: number;
  /** Load the router catalog at start-up (tests that need no catalog may skip the fetch). */
  loadCatalog?: boolean;
}

interface RouteDef { route: Route; method: string; dialect: Dialect }

const ROUTES: Record<string, RouteDef> = {
  '/v1/chat/completions': { route: 'chat', method: 'POST', dialect: 'chat' },
  '/v1/messages': { route: 'messages', method: 'POST', dialect: 'messages' },
  '/v1/messages/count_tokens': { route: 'count_tokens', method: 'POST', dialect: 'messages' },
  '/v1/models': { route: 'models', method: 'GET', dialect: 'chat' },
};

/** Requests outside a known route still get an error in the dialect their headers suggest. */
function guessDialect(req: IncomingMessage, path: string): Dialect {
  return path.startsWith('/v1/messages') || req.headers['anthropic-version'] !== undefined ? 'messages' : 'chat';
}

export async function createGateway(opts: GatewayOptions) {
  const { config, store, counters, log } = opts;
  const env = opts.env ?? process.env;
  const now = opts.now ?? Date.now;
  const upstreamKeys = new Map<string, string>();
  for (const name of config.profiles.keys()) {
    const v = env[upstreamKeyVar(name)];
    if (v) upstreamKeys.set(name, v);
    else log.warn({ profile: name, variable: upstreamKeyVar(name) }, 'no upstream key for this profile: its requests will answer 503');
  }
  const trustedProxies = compileIpList((env.SLUICE_TRUSTED_PROXIES ?? '127.0.0.1/8,::1').split(','));
  const retention = retentionDays(env); // board: SLUICE_REQUEST_RETENTION_DAYS, checked before anything starts
  const catalog = new Catalog({ routers: config.routers.values(), log });
  if (opts.loadCatalog !== false) await catalog.start();
  const recorder = new Recorder({ store, log, dataDir: opts.dataDir });
  recorder.start();
  const budget = new Budget({ counters, store, now });
  // ring 1: usage refresh and cost reconciliation, off the request path (lib/upstream/index.ts)
  const upstream = createUpstreamLoops({ config, store, budget, log, env, now, upstreamKeys });
  await upstream.start();
  // board: the Prometheus metrics, fed by record(), authFailure() and the error renderer below
  const metrics = createMetrics({ config, budget, store, recorder, counters, inFlight: () => inFlight, version: VERSION });

  /** Every row goes through here: queued for the store, and its cost added to the profile's spend. */
  function record(row: RequestRow): void {
    recorder.add(row);
    metrics.row(row);
    budget.add(row.profile, row.cost_usd, Date.parse(row.ts)).catch((err) => log.error({ err: err.message }, 'budget spend could not be counted'));
  }

  const deps: Deps = {
    config, counters, log, now, upstreamKeys, catalog, recorder, budget,
    keyCache: new KeyCache({ store, now, ttlMs: opts.keyCacheTtlMs, onTouchError: (err) => log.warn({ err: (err as Error).message }, 'last_used_at update failed') }),
    auto: new AutoRouter({ auto: config.auto, counters, catalog, log, record, now }),
    async authFailure(ctx, outcome, prefix) {
      metrics.authFailure(outcome);
      log.info({ req: ctx.id, ip: ctx.ip, prefix, outcome }, 'auth failure');
      store.insertAudit([{ ts: new Date(now()).toISOString(), ip: ctx.ip, prefix, outcome }])
        .catch((err) => log.error({ err: err.message }, 'auth audit row could not be written'));
      await countAuthFailure(counters, ctx.ip);
    },
  };

  // Each route with its chain, resolved once: the hot path iterates only the plugins its route runs.
  const plugins = createPlugins(deps, { bodyTimeoutMs: opts.bodyTimeoutMs ?? 30_000 });
  const routes = new Map<string, RouteDef & { chain: Plugin[] }>();
  for (const [path, def] of Object.entries(ROUTES)) routes.set(path, { ...def, chain: plugins.filter((p) => p.routes.includes(def.route)) });

  const proxy = createProxy({ log, config, catalog, now, record, upstreamTimeoutMs: opts.upstreamTimeoutMs ?? 300_000 });
  const modelsBody = Buffer.from(JSON.stringify(modelList(config)));
  const started = Date.now();
  /** `GET /health?details`: what an operator checks when something degrades. */
  function health() {
    const degraded = counters.degraded || recorder.storeDown; // rows merely queued are normal
    return {
      status: degraded ? 'degraded' : 'ok',
      version: VERSION,
      uptime_s: Math.round((Date.now() - started) / 1000),
      store: { kind: store.kind, reachable: !recorder.storeDown, rows_written: recorder.written, rows_pending: recorder.pending },
      counters: { kind: counters.kind, degraded: counters.degraded },
      catalog: Object.fromEntries([...config.routers.keys()].map((r) => [r, { refreshed_at: catalog.refreshedAt.get(r) ?? null }])),
      in_flight: inFlight,
      ...upstream.health(), // ring 1: reconcile counts, last usage snapshot per profile
    };
  }
  let inFlight = 0;
  let idle: (() => void) | undefined;
  /** Resolved by hurry(): a second signal ends the shutdown's grace period at once. */
  let hurry!: () => void;
  const hurried = new Promise<void>((resolve) => (hurry = resolve));
  // board: rollup backfill (a 0.3.0 store) and raw-row retention, in the background
  const maintenance = startMaintenance({ store, log, now, retentionDays: retention });
  const board = createBoard({ deps, store, health, startedAt: started, metrics, maintenance, version: VERSION, env });

  /** Where a request goes: its path, its route (if any) and the dialect its errors are written in. */
  function locate(req: IncomingMessage) {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q === -1 ? url : url.slice(0, q);
    const def = routes.get(path);
    return { path, hasQuery: q !== -1, def, dialect: def?.dialect ?? guessDialect(req, path), ctx: undefined as Ctx | undefined };
  }

  async function handle(req: IncomingMessage, res: ServerResponse, where: ReturnType<typeof locate>): Promise<void> {
    const { path, def, dialect } = where;
    if (path === '/api/hello' && req.method === 'HEAD') {
      res.writeHead(204).end();
      return;
    }
    if (path === '/health' && (req.method === 'GET' || req.method === 'HEAD')) {
      if (!where.hasQuery) res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      else res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(health()));
      return;
    }
    const operator = req.method === 'GET' || req.method === 'HEAD' ? board.routes.get(path) : undefined;
    if (operator) return operator(req, res);
    if (!def) return renderError(res, dialect, new GatewayError('not_found'));
    if (req.method !== def.method) {
      res.setHeader('allow', def.method);
      return renderError(res, dialect, new GatewayError('method_not_allowed'));
    }
    const run = req.headers['x-sluice-run'];
    const ctx: Ctx = {
      id: newRequestId(), req, res, route: def.route, dialect, t0: performance.now(),
      ip: clientIp(req.socket.remoteAddress, req.headers['x-forwarded-for'], trustedProxies),
      changed: false, stream: false, endUser: null, session: null, run: typeof run === 'string' ? run.slice(0, 128) : null,
      requestedModel: null, tier: null, model: null, degradation: 'none', removed: [],
    };
    where.ctx = ctx; // the metrics of a refusal name its profile
    for (const plugin of def.chain) {
      const pending = plugin.run(ctx);
      if (pending) await pending; // only asynchronous plugins cost a tick
    }
    if (def.route === 'models') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': modelsBody.length }).end(modelsBody);
      return;
    }
    if (ctx.removed.length > 0) log.info({ req: ctx.id, prefix: ctx.key!.row.prefix, removed: ctx.removed }, 'sanitized request');
    if (ctx.stream) metrics.trackStream(res);
    proxy.forward(ctx);
  }

  const server = http.createServer({ requestTimeout: 120_000, headersTimeout: 30_000, keepAliveTimeout: 65_000 }, (req, res) => {
    inFlight++;
    res.once('close', () => {
      if (--inFlight === 0) idle?.();
    });
    const where = locate(req);
    handle(req, res, where).catch((err) => {
      const { dialect } = where;
      if (err instanceof GatewayError) {
        metrics.refusal(where.def?.route, where.ctx?.profile?.name, err.code);
        renderError(res, dialect, err);
        // A refused body may still be arriving: close the connection rather than read it on.
        if (err.code === 'request_too_large' || err.code === 'body_timeout') res.once('finish', () => lingeringClose(req));
      } else if (!req.complete && req.socket.destroyed) {
        // The client went away while its body was arriving (its socket, and so `res`, is gone): nothing to answer.
        log.debug({ err: (err as Error).message }, 'client closed before its request body was complete');
      } else {
        log.error({ err: (err as Error).message, stack: (err as Error).stack }, 'request failed inside the gateway');
        metrics.refusal(where.def?.route, where.ctx?.profile?.name, 'internal');
        renderError(res, dialect, new GatewayError('internal'));
      }
    });
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Malformed HTTP (bad request line, huge headers, a slow header block): answer plainly and
    // close; never crash. As Node's own handler does, write nothing when a response on this socket
    // has already begun (a pipelined bad request behind a streaming one): those bytes would land
    // inside that response. Just close.
    const current = (socket as { _httpMessage?: ServerResponse })._httpMessage;
    if (!socket.writable || current?.headersSent) return void socket.destroy();
    socket.end(err.code === 'HPE_HEADER_OVERFLOW' ? 'HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\r\n'
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'HTTP/1.1 408 Request Timeout\r\nconnection: close\r\n\r\n'
      : 'HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
  });

  const reconcile = setInterval(() => {
    budget.reconcile(config.profiles.keys()).catch((err) => log.warn({ err: err.message }, 'budget reconciliation failed'));
  }, 5 * 60_000).unref();

  return {
    server,
    deps,
    /** Ring 1's loops (usage refresh, cost reconciliation): tests drive them with runOnce(). */
    upstream,
    /** Ends a close()'s grace period now (a second SIGTERM or SIGINT); rows are still flushed. */
    hurry: () => hurry(),
    /** Upstream sockets in use and idle (leak checks). */
    upstreamSockets: () => proxy.sockets(),
    async listen(host: string, port: number): Promise<AddressInfo> {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, host, () => {
          server.off('error', reject);
          resolve();
        });
      });
      return server.address() as AddressInfo;
    },
    /**
     * Stops accepting, waits up to `graceMs` (or until hurry()) for open requests; then ends those
     * still open (a stream with one error event of its dialect, see proxy.interrupt), flushes every
     * row (spooling what the store cannot take) and closes.
     */
    async close(graceMs = 10_000): Promise<void> {
      clearInterval(reconcile);
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      const wait = async (ms: number, cutShort: boolean) => {
        if (inFlight === 0) return;
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((resolve) => (idle = resolve)),
          new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
          cutShort ? hurried : new Promise<void>(() => {}),
        ]);
        clearTimeout(timer);
      };
      await wait(graceMs, true);
      if (proxy.open > 0) {
        log.warn({ open: proxy.open }, 'grace period over: ending the streams still open with an error event');
        proxy.interrupt();
        // The error events were written: let them reach the clients before the sockets go.
        await wait(1000, false);
      }
      server.closeAllConnections();
      await closed;
      proxy.close();
      board.close();
      await maintenance.stop(); // board
      metrics.close();
      catalog.stop();
      await upstream.stop(); // ring 1
      await recorder.close();
      await budget.flush(); // spend increments still held in memory (lib/counters/spend-cache.ts)
    },
  };
}

export type Gateway = Awaited<ReturnType<typeof createGateway>>;

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

/** GET /v1/models: sluice/auto, the sluice/<tier> aliases and the tier models, in a shape both SDKs read. */
function modelList(config: Config) {
  const created = 1_760_000_000;
  const ids = ['sluice/auto', ...[...config.tiers.keys()].map((t) => `sluice/${t}`)];
  for (const t of config.tiers.values()) if (!ids.includes(t.model)) ids.push(t.model);
  const data = ids.map((id) => ({
    id, object: 'model', type: 'model', display_name: id, created, created_at: new Date(created * 1000).toISOString(), owned_by: 'sluice',
  }));
  return { object: 'list', data, has_more: false, first_id: ids[0], last_id: ids[ids.length - 1] };
}
