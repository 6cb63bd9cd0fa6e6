// The operator's surfaces: the board page (`GET /`), its JSON summary (`GET /api/summary`), the
// gateway's health details (`GET /api/health`) and the Prometheus metrics (`GET /metrics`). None
// needs a client key: the front reverse proxy puts basic auth on these paths (docs/operation.md, "Behind the front proxy"). Built once at start-up by the server;
// it never writes to the request path and never shows a secret or a prompt.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../deps.ts';
import type { Store } from '../store/store.ts';
import { metricsRoute, type Metrics } from './metrics.ts';
import { pageRoute } from './page.ts';
import type { Maintenance } from '../store/upkeep.ts';
import { computeSummary } from './summary.ts';
import type { Health, Summary } from './types.ts';

export interface BoardOptions {
  deps: Deps;
  store: Store;
  /** What `GET /api/health` shows (store, counters, catalog, in-flight, connections, ring 1). */
  health: () => Health;
  /** When the process started, on the `deps.now` clock (ms since the epoch). */
  startedAt: number;
  /** The gateway's Prometheus metrics, fed by the server's hooks (lib/board/metrics.ts). */
  metrics: Metrics;
  /** The store's upkeep (rollup backfill, raw-row retention: lib/store/upkeep.ts), for the health section. */
  maintenance?: Maintenance;
  /** summary: package version (health.version). */
  version?: string;
  /** summary: the drift anomaly's threshold in USD (SLUICE_DRIFT_USD, read by lib/settings.ts). */
  driftUsd: number;
}

export type BoardHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export interface Board {
  /** Path → handler for GET and HEAD. */
  routes: Map<string, BoardHandler>;
}

export function createBoard(opts: BoardOptions): Board {
  const routes = new Map<string, BoardHandler>();
  routes.set('/metrics', metricsRoute(opts.metrics));
  routes.set('/api/health', healthRoute(opts.health));
  // One function computes the object both '/api/summary' and '/' show (lib/board/summary.ts);
  // the page is a view of it (lib/board/page.ts). The board holds no timer, socket or loop.
  const summary = summaryFunction(opts);
  routes.set('/api/summary', summaryRoute(summary, opts.deps.log));
  routes.set('/', pageRoute(summary, opts.deps.log));
  return { routes };
}

// The summary function and its JSON route
function summaryFunction(opts: BoardOptions): () => Promise<Summary> {
  const { deps } = opts;
  return () => computeSummary({
    store: opts.store, config: deps.config, budget: deps.budget, catalog: deps.catalog, admission: deps.admission,
    keyCacheSize: () => deps.keyCache.size, health: opts.health, now: deps.now, startedAt: opts.startedAt,
    version: opts.version ?? opts.health().version,
    maintenance: () => opts.maintenance?.state() ?? { backfill_done: true, backfill_rows: 0, retention_days: null, retention_deleted: 0 },
    driftUsd: opts.driftUsd,
  });
}

/** `GET /api/health`: the server's health details as JSON, never cached (`/health` says only ok or degraded). */
function healthRoute(health: () => Health): BoardHandler {
  return (req, res) => {
    const body = req.method === 'HEAD' ? undefined : JSON.stringify(health());
    res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' }).end(body);
  };
}

/** `GET /api/summary`: the summary as JSON, never cached; a store failure answers 503, logged. */
export function summaryRoute(summary: () => Promise<Summary>, log: Deps['log']): BoardHandler {
  return async (req, res) => {
    const headers = { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' };
    if (req.method === 'HEAD') {
      res.writeHead(200, headers).end();
      return;
    }
    let body: string;
    try {
      body = JSON.stringify(await summary());
    } catch (err) {
      log.error({ err }, 'board summary could not be computed');
      res.writeHead(503, headers).end(JSON.stringify({ error: 'the summary could not be computed (see the log)' }));
      return;
    }
    res.writeHead(200, headers).end(body);
  };
}
