// The operator's surfaces: the board page (`GET /`), its JSON summary (`GET /api/summary`) and the
// Prometheus metrics (`GET /metrics`). None needs a client key: the front reverse proxy puts basic
// auth on these paths (README, "Behind the front proxy"). Built once at start-up by the server;
// it never writes to the request path and never shows a secret or a prompt.

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Deps } from '../deps.ts';
import type { Store } from '../store/store.ts';

export interface BoardOptions {
  deps: Deps;
  store: Store;
  /** What `GET /health?details` shows (store, counters, catalog, in-flight). */
  health: () => Record<string, unknown>;
  /** performance-independent wall clock of the process start (ms since the epoch). */
  startedAt: number;
}

export type BoardHandler = (req: IncomingMessage, res: ServerResponse) => void | Promise<void>;

export interface Board {
  /** Path → handler for GET and HEAD. */
  routes: Map<string, BoardHandler>;
  close(): void;
}

export function createBoard(opts: BoardOptions): Board {
  const routes = new Map<string, BoardHandler>();
  const closers: Array<() => void> = [];
  void opts;
  return {
    routes,
    close() {
      for (const c of closers) c();
    },
  };
}
