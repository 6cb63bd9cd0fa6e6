// The gateway's wiring and lifecycle: builds the dependencies, the plugin chain of each route
// (plugins/index.ts, resolved once), the proxy core (lib/proxy/) and the board, and puts the
// per-request handler (lib/handler.ts) behind a minimal node:http server with its connection
// bounds (caps per client address and in all, the header and keep-alive timeouts). Shutdown stops
// accepting, lets open streams finish within a grace period, flushes every row and closes.
// Nothing here runs per request.

import { readFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo, type BlockList } from 'node:net';
import type { Logger } from 'pino';
import { createPlugins } from '../plugins/index.ts';
import { Admission } from './admission.ts';
import type { Health } from './board/types.ts';
import { AutoRouter } from './auto.ts';
import { createBoard } from './board/index.ts';
import { startMaintenance } from './store/upkeep.ts';
import { createMetrics } from './board/metrics.ts';
import { Budget } from './budget.ts';
import { Catalog } from './catalog.ts';
import { canonicalIp, inList, ipBlockBucket } from './client-ip.ts';
import type { Config } from './config.ts';
import type { Counters } from './counters/counters.ts';
import type { Deps } from './deps.ts';
import { createHandler, routeTable, type Closes } from './handler.ts';
import { KeyCache } from './key-cache.ts';
import { closeAfterResponse, closesAll, DRAIN_IDLE_MS, DRAIN_SPREAD_MS, pause, spreadSteps, untilIdle, type HttpSocket } from './lifecycle/drain.ts';
import { createProxy } from './proxy/index.ts';
import { Recorder } from './recorder.ts';
import { upstreamKeysOf, type Settings } from './settings.ts';
import { createUpstreamLoops } from './upstream/index.ts';
import { Loop } from './upstream/loop.ts';
import type { RequestRow, Store } from './store/store.ts';
import type { TraceSettings } from './trace/settings.ts';
import { createTracing } from './trace/tracing.ts';

export const VERSION: string = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')).version;

export interface GatewayOptions {
  config: Config;
  store: Store;
  counters: Counters;
  log: Logger;
  /** Every SLUICE_* setting, read once at start-up (lib/settings.ts, readSettings). */
  settings: Settings;
  dataDir: string;
  now?: () => number;
  /** How long a request body may take to arrive (30 s; tests shorten it). */
  bodyTimeoutMs?: number;
  /** Load the router catalog at start-up (tests that need no catalog may skip the fetch). */
  loadCatalog?: boolean;
  /** How long a drain spreads its `connection: close` over the open connections (DRAIN_SPREAD_MS; tests set it). */
  drainSpreadMs?: number;
  /** How long a drain lets idle connections live (DRAIN_IDLE_MS; tests shorten it). */
  drainIdleMs?: number;
  /** The OTEL_* trace settings (lib/trace/settings.ts, readTraceSettings); null or absent: tracing off. */
  trace?: TraceSettings | null;
}

/** The connection bounds (lib/settings.ts has their defaults and why). */
type ConnectionLimits = Pick<Settings, 'maxConnections' | 'maxPerAddress' | 'headersTimeoutMs' | 'keepAliveTimeoutMs'>;

/** Pending connections the kernel may queue for accept() (capped by net.core.somaxconn). */
export const LISTEN_BACKLOG = 4096;

/**
 * Upstream sockets a starting process opens to each router before it reports ready: the first
 * requests after a handover arrive together on the connections the draining process closed.
 */
export const PRECONNECT_SOCKETS = 16;
/** How long a readout may be silent before the start gives it up: a router that does not answer delays a start by about that. */
export const PRECONNECT_TIMEOUT_MS = 5_000;

/** The least time the shutdown gives the last trace export, even when the drain used up the grace. */
export const TRACE_FLUSH_MIN_MS = 1_000;

export async function createGateway(opts: GatewayOptions) {
  const { config, store, counters, log } = opts;
  const now = opts.now ?? Date.now;
  const { settings } = opts;
  const drainIdleMs = opts.drainIdleMs ?? DRAIN_IDLE_MS;
  const drainSpreadMs = opts.drainSpreadMs ?? DRAIN_SPREAD_MS;
  const upstreamKeys = upstreamKeysFrom(config, settings, log);
  // Traces (lib/trace/): the SDK is loaded only when they are on; off, no hook runs.
  const tracing = opts.trace ? await createTracing(opts.trace, { log, now, version: VERSION }) : null;
  const trustedProxies = settings.trustedProxies;
  const catalog = new Catalog({ routers: config.routers.values(), log });
  if (opts.loadCatalog !== false) await catalog.start();
  const recorder = new Recorder({ store, log, dataDir: opts.dataDir });
  recorder.start();
  const budget = new Budget({ counters, store, now });
  // Ring 1: usage refresh and cost reconciliation, off the request path (lib/upstream/index.ts).
  const upstream = createUpstreamLoops({ config, store, budget, log, settings, now, upstreamKeys });
  await upstream.start();
  // The Prometheus metrics, fed by record(), authFailure() and the error renderer below.
  const metrics = createMetrics({ config, budget, store, recorder, counters, inFlight: () => handler.inFlight, version: VERSION });

  /** Every row goes through here: queued for the store, and its cost added to the spend it counts toward (profile, capped key, capped session). */
  function record(row: RequestRow): void {
    recorder.add(row);
    metrics.row(row);
    // At once, except for the first cost of a window this process has not seeded yet.
    budget.addRow(row)?.catch((err) => log.error({ err }, 'budget spend could not be counted'));
  }

  const admission = new Admission({ counters, budget });
  const deps: Deps = {
    config, counters, admission, log, now, upstreamKeys, catalog, recorder, budget,
    keyCache: new KeyCache({ store, now, ttlMs: settings.keyCacheTtlMs, onTouchError: (err) => log.warn({ err }, 'last_used_at update failed') }),
    auto: new AutoRouter({ auto: config.auto, counters, catalog, log, record, now }),
    async authFailure(ctx, outcome, prefix) {
      metrics.authFailure(outcome);
      log.info({ req: ctx.id, ip: ctx.ip, prefix, outcome }, 'auth failure');
      store.insertAudit([{ ts: new Date(now()).toISOString(), ip: ctx.ip, prefix, outcome }])
        .catch((err) => log.error({ err }, 'auth audit row could not be written'));
      await admission.countAuthFailure(ctx.ip);
    },
  };

  const routes = routeTable(createPlugins(deps, { bodyTimeoutMs: opts.bodyTimeoutMs ?? 30_000 }));

  const proxy = createProxy({ log, config, catalog, now, record, upstreamTimeoutMs: settings.upstreamTimeoutMs, trace: tracing?.requests ?? null });
  const modelsBody = Buffer.from(JSON.stringify(modelList(config)));
  const started = now();
  // rows merely queued are normal
  const status = () => (counters.degraded || recorder.storeDown ? 'degraded' : 'ok');
  const limits: ConnectionLimits = settings;
  const refused = { per_address: 0, global: 0 };
  /** The board's `GET /api/health` (and its summary): what an operator checks when something degrades. */
  function health(): Health {
    return {
      status: status(),
      version: VERSION,
      uptime_s: Math.round((now() - started) / 1000),
      store: { kind: store.kind, reachable: !recorder.storeDown, rows_written: recorder.written, rows_pending: recorder.pending },
      counters: { kind: counters.kind, degraded: counters.degraded },
      catalog: Object.fromEntries([...config.routers.keys()].map((r) => [r, { refreshed_at: catalog.refreshedAt.get(r) ?? null }])),
      in_flight: handler.inFlight,
      connections: { max: limits.maxConnections, max_per_address: limits.maxPerAddress, refused: { ...refused } },
      ...upstream.health(), // reconcile counts, last usage snapshot per profile
    };
  }
  /** Resolved by hurry(): a second signal ends the shutdown's grace period at once. */
  let hurry!: () => void;
  const hurried = new Promise<void>((resolve) => (hurry = resolve));
  // The store's upkeep: rollup backfill (a 0.3.0 store) and raw-row retention, in the background.
  const maintenance = startMaintenance({ store, log, now, retentionDays: settings.requestRetentionDays });
  const board = createBoard({ deps, store, health, startedAt: started, metrics, maintenance, version: VERSION, driftUsd: settings.driftUsd });

  const handler = createHandler({
    routes, operatorRoutes: board.routes, status, forward: proxy.forward, metrics, trustedProxies, modelsBody, log, budget,
    trace: tracing?.requests ?? null,
  });
  let loggedAt = -Infinity;
  const server = createHttpServer(handler.listener, limits, trustedProxies, (reason) => {
    refused[reason]++;
    metrics.connectionRefused(reason);
    // At most one line a minute, however hard a client pushes; the metric has every count.
    if (Date.now() - loggedAt < 60_000) return;
    loggedAt = Date.now();
    log.warn({ reason, refused: { ...refused }, max: limits.maxConnections, max_per_address: limits.maxPerAddress }, 'connection refused: over a connection cap');
  });

  // The budget's counters checked against the ledger every 5 minutes, in the loop shape every
  // periodic job shares (lib/upstream/loop.ts: no overlap, backoff and one log line while failing).
  const reconcile = new Loop({ name: 'budget reconciliation', log, everyMs: 5 * 60_000, run: () => budget.reconcile(config.profiles.keys()) });
  reconcile.start();

  let closing: Promise<void> | undefined;
  /**
   * The soft drain, then the close (lib/lifecycle/drain.ts has the parts). Stops accepting (a
   * process sharing the listening socket takes the new connections); tells the connections open
   * then `connection: close` one after another over `drainSpreadMs`, oldest first (each on the
   * next response it begins; the oldest also on one whose head is still to be written); then
   * `toldAll()` runs and every response says it, those already begun included; a connection left
   * idle is closed after `drainIdleMs` (until then a request on it is still answered, with
   * `connection: close`); open streams run to their end up to `graceMs` (or until hurry()).
   * Streams still open then end as an upstream failure does (one error event of their dialect and
   * a row, see proxy.interrupt); every row is flushed (or spooled) and all closes.
   */
  async function drainAndClose(graceMs: number, toldAll: () => void): Promise<void> {
    const began = performance.now();
    // net.Server's close, not http.Server's: Node's also closes every idle keep-alive connection
    // at once, racing the request a client or front proxy may be sending on it (a reset, which
    // nginx turns into a 502 for a POST). The connections stay; the listening handle goes.
    const closed = new Promise<void>((resolve) => net.Server.prototype.close.call(server, () => resolve()));
    const reconcileStopped = reconcile.stop();
    // Responses from now on are told by the handler, those already begun here.
    const tell = (closes: Closes) => {
      handler.drain(closes);
      closeAfterResponse(server.sockets, closes);
    };
    const spread = spreadSteps(server.sockets.size, now(), drainSpreadMs, now);
    tell(spread.closes);
    // The spread and the idle time after it fit in the grace, the spread giving way: a grace
    // shorter than the idle time tells every connection at once, as before the spread. The idle
    // time does not give way: closing idle connections sooner races the requests on their way.
    const left = () => Math.max(0, graceMs - (performance.now() - began));
    await pause(Math.min(spread.lastStepMs, Math.max(0, left() - drainIdleMs)), hurried);
    tell(closesAll);
    toldAll();
    await reconcileStopped;
    // A connection a response ends from now on closes after this idle time, not the keep-alive timeout.
    server.keepAliveTimeout = Math.max(1, drainIdleMs);
    if (server.sockets.size > 0) await pause(drainIdleMs, hurried);
    server.closeIdleConnections();
    await untilIdle(handler, left(), hurried);
    if (proxy.open > 0) {
      log.warn({ open: proxy.open }, 'grace period over: ending the streams still open with an error event');
      proxy.interrupt();
      // The error events were written: let them reach the clients before the sockets go.
      await untilIdle(handler, 1000);
    }
    server.closeAllConnections();
    await closed;
    proxy.close();
    // Every span ended with its row: the last ones go to the collector within what is left of the grace.
    await tracing?.shutdown(Math.max(TRACE_FLUSH_MIN_MS, graceMs - (performance.now() - began)));
    await maintenance.stop();
    metrics.close();
    catalog.stop();
    await upstream.stop();
    await recorder.close();
    await budget.flush(); // spend increments still held in memory (lib/counters/spend-cache.ts)
  }

  return {
    server,
    deps,
    /** Ring 1's loops (usage refresh, cost reconciliation): tests drive them with runOnce(). */
    upstream,
    /** Ends a close()'s grace period now (a second SIGTERM or SIGINT); rows are still flushed. */
    hurry: () => hurry(),
    /**
     * Warm upstream sockets before traffic (lib/proxy/preconnect.ts): PRECONNECT_SOCKETS to each
     * router, a readout silent for PRECONNECT_TIMEOUT_MS given up. Never throws.
     */
    preconnect: () => proxy.preconnect(upstreamKeys, PRECONNECT_SOCKETS, PRECONNECT_TIMEOUT_MS),
    /** Upstream sockets in use and idle (leak checks). */
    upstreamSockets: () => proxy.sockets(),
    /** The tracer (lib/trace/tracing.ts: forceFlush, drop counts); null while tracing is off. */
    tracing,
    async listen(host: string, port: number): Promise<AddressInfo> {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        // A burst of clients (an agent fleet opening hundreds of streams at once) must find room in
        // the accept queue: Node's default of 511 drops the rest's SYNs, and they retry a second later.
        server.listen({ port, host, backlog: LISTEN_BACKLOG }, () => {
          server.off('error', reject);
          resolve();
        });
      });
      return server.address() as AddressInfo;
    },
    /**
     * Listens on a socket inherited from systemd (lib/lifecycle/systemd.ts), already bound and listening and
     * shared with any other sluice process it was passed to: each takes connections from its queue.
     */
    async listenFd(fd: number): Promise<AddressInfo> {
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        // Node calls listen() on the socket again, which sets its queue length: keep the unit's
        // size. The argument, not the options' `backlog`: Node ignores that one for an fd.
        server.listen({ fd }, LISTEN_BACKLOG, () => {
          server.off('error', reject);
          resolve();
        });
      });
      return server.address() as AddressInfo;
    },
    /**
     * The soft drain, then the close (drainAndClose); a second call waits for the first.
     * `toldAll` runs once every connection has been told to close (the spread is over).
     */
    close(graceMs = 10_000, toldAll: () => void = () => {}): Promise<void> {
      return (closing ??= drainAndClose(graceMs, toldAll));
    },
  };

}

export type Gateway = Awaited<ReturnType<typeof createGateway>>;

/** Each profile's upstream key from the settings; a profile without one answers 503 (said once, at start). */
function upstreamKeysFrom(config: Config, settings: Settings, log: Logger): Map<string, string> {
  const { keys, missing } = upstreamKeysOf(config, settings);
  for (const m of missing) log.warn(m, 'no upstream key for this profile: its requests will answer 503');
  return keys;
}

/**
 * The node:http server with its connection bounds and its answer to malformed HTTP. A connection
 * over a cap is closed at once, before a byte is read (the global cap is node's maxConnections,
 * which does the same), and reported through `refused`. Node applies headersTimeout from the
 * moment a connection opens, so one that sends nothing and one that trickles its headers are both
 * answered 408 and closed; its check runs every connectionsCheckingInterval, which is kept short.
 */
function createHttpServer(listener: http.RequestListener, limits: ConnectionLimits, trusted: BlockList, refused: (reason: 'per_address' | 'global') => void): http.Server & { sockets: ReadonlySet<HttpSocket> } {
  const server = http.createServer({
    requestTimeout: Math.max(120_000, limits.headersTimeoutMs),
    headersTimeout: limits.headersTimeoutMs,
    connectionsCheckingInterval: Math.min(1000, Math.max(50, Math.round(limits.headersTimeoutMs / 4))),
    keepAliveTimeout: limits.keepAliveTimeoutMs,
  }, listener);
  // Every open connection, for the drain (closeAfterResponse): an add and a delete per connection.
  const sockets = new Set<HttpSocket>();
  server.on('connection', (socket: HttpSocket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  if (limits.maxConnections > 0) server.maxConnections = limits.maxConnections;
  server.on('drop', () => refused('global'));
  if (limits.maxPerAddress > 0) {
    const open = new Map<string, number>();
    server.on('connection', (socket) => {
      const peer = canonicalIp(socket.remoteAddress ?? '') ?? '';
      if (inList(trusted, peer)) return; // every client behind a trusted proxy arrives from its address
      const bucket = ipBlockBucket(peer);
      const n = open.get(bucket) ?? 0;
      if (n >= limits.maxPerAddress) {
        refused('per_address');
        socket.destroy();
        return;
      }
      open.set(bucket, n + 1);
      socket.once('close', () => {
        const left = open.get(bucket)! - 1;
        if (left === 0) open.delete(bucket);
        else open.set(bucket, left);
      });
    });
  }
  server.on('clientError', (err: NodeJS.ErrnoException, socket) => {
    // Malformed HTTP (bad request line, huge headers, a slow header block): answer plainly and
    // close; never crash. As Node's own handler does, write nothing when a response on this socket
    // has already begun (a pipelined bad request behind a streaming one): those bytes would land
    // inside that response. Just close.
    const current = (socket as HttpSocket)._httpMessage;
    if (!socket.writable || current?.headersSent) return void socket.destroy();
    socket.end(err.code === 'HPE_HEADER_OVERFLOW' ? 'HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\n\r\n'
      : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'HTTP/1.1 408 Request Timeout\r\nconnection: close\r\n\r\n'
      : 'HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n');
  });
  return Object.assign(server, { sockets });
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
