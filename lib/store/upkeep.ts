// The store's background upkeep: the start-up backfill of rollups for rows written before they
// existed (a 0.3.0 store), then raw-row retention (SLUICE_REQUEST_RETENTION_DAYS). Retention
// deletes raw request rows only: the daily rollups are the spend ledger (Store.ledgerSpendSince),
// which the budget seeds from and the board reads, and they are kept. Both work in
// small slices with a turn of the event loop between them, so requests never wait behind them;
// retention starts only once the backfill is done, so no row is deleted before it is counted.

import type { Logger } from 'pino';
import type { Store } from './store.ts';

/** How far the upkeep has come: the backfill, and what retention keeps and has deleted. */
export interface UpkeepState { backfill_done: boolean; backfill_rows: number; retention_days: number | null; retention_deleted: number }

export interface MaintenanceOptions {
  store: Pick<Store, 'backfillRollups' | 'pruneRequests'>;
  log: Pick<Logger, 'info' | 'warn'>;
  now: () => number;
  /** Days of raw request rows kept (null: all): SLUICE_REQUEST_RETENTION_DAYS, read by lib/settings.ts. */
  retentionDays: number | null;
  /** Rows per backfill slice (default BACKFILL_SLICE) and per retention delete (default 1000). */
  backfillSlice?: number;
  pruneSlice?: number;
  /** How often retention runs once the backfill is done (default 10 minutes). */
  retentionEveryMs?: number;
  /** Wait after a failed slice (store away) before trying again (default 5 s). */
  retryMs?: number;
}

const turn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Rows per backfill slice: one transaction, the rows streamed through one aggregation
 * (lib/store/rollups.ts). Large enough that a 10 M-row store is rolled up in a few minutes; on
 * SQLite a slice runs in the store's thread (about half a second, which other store calls wait at
 * most), on Postgres the rows are summed as they arrive, the event loop turning between chunks.
 */
export const BACKFILL_SLICE = 50_000;

export function startMaintenance(o: MaintenanceOptions) {
  const slice = o.backfillSlice ?? BACKFILL_SLICE;
  const pruneSlice = o.pruneSlice ?? 1000;
  const state: UpkeepState = { backfill_done: false, backfill_rows: 0, retention_days: o.retentionDays, retention_deleted: 0 };
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let wake: (() => void) | undefined;
  /** Waits `ms` (or until stop()); unref'd, so it never holds the process open. */
  const pause = (ms: number) => new Promise<void>((resolve) => {
    if (stopped) return resolve();
    wake = resolve;
    timer = setTimeout(resolve, ms);
    timer.unref();
  });

  async function backfill(): Promise<void> {
    while (!stopped) {
      try {
        const r = await o.store.backfillRollups(slice);
        state.backfill_rows += r.rows;
        if (r.done) {
          state.backfill_done = true;
          if (state.backfill_rows > 0) o.log.info({ rows: state.backfill_rows }, 'board rollups backfilled');
          return;
        }
        await turn();
      } catch (err) {
        o.log.warn({ err }, 'board rollup backfill failed; retrying');
        await pause(o.retryMs ?? 5000);
      }
    }
  }

  /** Deletes raw rows older than the retention, slice by slice; returns how many went. */
  async function prune(): Promise<number> {
    if (o.retentionDays === null) return 0;
    const before = new Date(o.now() - o.retentionDays * 86_400_000).toISOString();
    let total = 0;
    while (!stopped) {
      const n = await o.store.pruneRequests(before, pruneSlice);
      total += n;
      state.retention_deleted += n;
      if (n < pruneSlice) break;
      await turn();
    }
    if (total > 0) o.log.info({ rows: total, before }, 'old request rows deleted (retention)');
    return total;
  }

  const done = (async () => {
    await backfill();
    while (!stopped && o.retentionDays !== null) {
      try {
        await prune();
      } catch (err) {
        o.log.warn({ err }, 'request retention failed; retrying later');
      }
      await pause(o.retentionEveryMs ?? 600_000);
    }
  })();

  return {
    state: (): UpkeepState => ({ ...state }),
    /** Resolves when the loops have ended (after stop()). */
    done,
    prune,
    async stop(): Promise<void> {
      stopped = true;
      clearTimeout(timer);
      wake?.();
      await done;
    },
  };
}

export type Maintenance = ReturnType<typeof startMaintenance>;
