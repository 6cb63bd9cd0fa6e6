// Ring 1's part of the embedded Store: upstream_keys, usage_snapshots and the reconciliation
// columns of requests (migration 2 of sqlite-schema.sql). Spread into openSqliteStore's object.
// Never holds an upstream key's secret (only the router's hash of it), and keeps every statement
// small: these calls are synchronous on the server's event loop.

import { writeTransaction } from './sqlite-tx.ts';
import type { DatabaseSync, StatementSync } from 'node:sqlite';
import { adjustRollupCostSqlite } from './sqlite-board.ts';
import type { PendingReconcile, UpstreamKeyRow, UpstreamStore, UsageSnapshot } from './store.ts';

type Raw = Record<string, unknown>;

const PENDING = "cost_source = 'estimate' AND generation_id IS NOT NULL AND reconcile_abandoned = 0";
const SNAPSHOT_COLUMNS = [
  'profile', 'ts', 'day', 'label', 'limit_usd', 'limit_remaining', 'limit_reset', 'usage', 'usage_daily',
  'usage_weekly', 'usage_monthly', 'ledger_day_usd', 'drift_usd', 'drifted',
] as const satisfies ReadonlyArray<keyof UsageSnapshot>;

function toSnapshot(raw: Raw): UsageSnapshot {
  const s = Object.fromEntries(SNAPSHOT_COLUMNS.map((c) => [c, raw[c]])) as unknown as UsageSnapshot;
  return { ...s, drifted: raw.drifted === 1 };
}

export function sqliteUpstream(db: DatabaseSync): UpstreamStore {
  const stmt = {
    upstreamKeys: db.prepare('SELECT * FROM upstream_keys ORDER BY profile'),
    putUpstreamKey: db.prepare(
      `INSERT INTO upstream_keys (profile, hash, name, label, limit_usd, limit_reset, created_at, updated_at)
       VALUES (:profile, :hash, :name, :label, :limit_usd, :limit_reset, :created_at, :updated_at)
       ON CONFLICT (profile) DO UPDATE SET hash = excluded.hash, name = excluded.name, label = excluded.label,
         limit_usd = excluded.limit_usd, limit_reset = excluded.limit_reset, updated_at = excluded.updated_at`,
    ),
    insertSnapshot: db.prepare(
      `INSERT INTO usage_snapshots (${SNAPSHOT_COLUMNS.join(', ')}) VALUES (${SNAPSHOT_COLUMNS.map(() => '?').join(', ')})`,
    ),
    // Per profile, the newest by (ts, id) through the (profile, ts) index: equal timestamps go to the later row.
    latestSnapshots: db.prepare(
      `SELECT ${SNAPSHOT_COLUMNS.join(', ')} FROM usage_snapshots WHERE id IN (
         SELECT (SELECT id FROM usage_snapshots x WHERE x.profile = p.profile ORDER BY ts DESC, id DESC LIMIT 1)
         FROM (SELECT DISTINCT profile FROM usage_snapshots) p)
       ORDER BY profile`,
    ),
    pending: db.prepare(`SELECT COUNT(*) AS n FROM requests INDEXED BY requests_reconcile_pending WHERE ${PENDING}`),
    reconciled: db.prepare('SELECT COUNT(*) AS n FROM requests WHERE reconciled_at IS NOT NULL'),
    abandoned: db.prepare('SELECT COUNT(*) AS n FROM requests WHERE reconcile_abandoned = 1'),
    due: db.prepare(
      `SELECT id, profile, generation_id, ts, duration_ms, cost_usd, reconcile_attempts FROM requests INDEXED BY requests_reconcile_pending
       WHERE ${PENDING} AND (reconcile_next_at IS NULL OR reconcile_next_at <= ?) ORDER BY ts LIMIT ?`,
    ),
    hasPending: db.prepare(`SELECT 1 AS one FROM requests INDEXED BY requests_reconcile_pending WHERE ${PENDING} LIMIT 1`),
    defer: db.prepare(`UPDATE requests SET reconcile_attempts = ?, reconcile_next_at = ?, reconcile_abandoned = ? WHERE id = ? AND ${PENDING}`),
    abandonBefore: db.prepare(`UPDATE requests INDEXED BY requests_reconcile_pending SET reconcile_abandoned = 1, reconcile_next_at = NULL WHERE ${PENDING} AND ts < ?`),
    oldCost: db.prepare("SELECT cost_usd FROM requests WHERE id = ? AND cost_source = 'estimate'"),
    setCost: db.prepare(
      "UPDATE requests SET cost_usd = ?, cost_source = 'upstream', reconciled_at = ?, reconcile_next_at = NULL WHERE id = ? AND cost_source = 'estimate'",
    ),
  } satisfies Record<string, StatementSync>;

  const count = (s: StatementSync) => Number(s.get()?.n ?? 0);

  return {
    async upstreamKeys() {
      return stmt.upstreamKeys.all().map((raw) => ({ ...(raw as unknown as UpstreamKeyRow) }));
    },

    async putUpstreamKey(row: UpstreamKeyRow) {
      stmt.putUpstreamKey.run({ ...row });
    },

    async insertUsageSnapshot(s: UsageSnapshot) {
      stmt.insertSnapshot.run(...SNAPSHOT_COLUMNS.map((c) => (c === 'drifted' ? (s.drifted ? 1 : 0) : s[c])));
    },

    async latestUsageSnapshots() {
      return stmt.latestSnapshots.all().map(toSnapshot);
    },

    async reconcileCounts() {
      return { pending: count(stmt.pending), reconciled: count(stmt.reconciled), abandoned: count(stmt.abandoned) };
    },

    async duePendingReconciles(now, limit) {
      return stmt.due.all(now, limit).map((raw) => ({ ...(raw as unknown as PendingReconcile) }));
    },

    async hasPendingReconciles() {
      return stmt.hasPending.get() !== undefined;
    },

    async deferReconcile(id, attempts, nextAt) {
      stmt.defer.run(attempts, nextAt, nextAt === null ? 1 : 0, id);
    },

    async abandonReconcilesBefore(before) {
      return Number(stmt.abandonBefore.run(before).changes);
    },

    /**
     * The one place a reconciled cost lands: inside one write transaction, so of several processes
     * only the first sees the estimate and gets the old cost back (the budget is corrected once).
     * The board's rollups follow in the same transaction (the budget seeds from them).
     */
    async applyReconciledCost(id, costUsd, at) {
      return writeTransaction(db, () => {
        const old = stmt.oldCost.get(id);
        if (!old) return undefined;
        stmt.setCost.run(costUsd, at, id);
        adjustRollupCostSqlite(db, id, costUsd - Number(old.cost_usd));
        return Number(old.cost_usd);
      });
    },
  };
}
