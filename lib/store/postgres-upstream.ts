// Ring 1's part of the Postgres Store: upstream_keys, usage_snapshots and the reconciliation
// columns of requests (migration 2 of schema.sql). Spread into openPostgresStore's object.
// Never holds an upstream key's secret (only the router's hash of it); applyReconciledCost is the
// one statement that decides, across every gateway on this database, who corrects the budget.

import type postgres from 'postgres';
import { adjustRollupCostPostgres } from './postgres-board.ts';
import { iso, numOrNull, type Raw } from './postgres-values.ts';
import type { UpstreamKeyRow, UpstreamStore, UsageSnapshot } from './store.ts';

function toUpstreamKey(raw: Raw): UpstreamKeyRow {
  return {
    profile: raw.profile as string,
    hash: raw.hash as string,
    name: raw.name as string,
    label: (raw.label as string | null) ?? null,
    limit_usd: numOrNull(raw.limit_usd),
    limit_reset: (raw.limit_reset as string | null) ?? null,
    created_at: iso(raw.created_at),
    updated_at: iso(raw.updated_at),
  };
}

function toSnapshot(raw: Raw): UsageSnapshot {
  return {
    profile: raw.profile as string,
    ts: iso(raw.ts),
    day: raw.day as string,
    label: (raw.label as string | null) ?? null,
    limit_usd: numOrNull(raw.limit_usd),
    limit_remaining: numOrNull(raw.limit_remaining),
    limit_reset: (raw.limit_reset as string | null) ?? null,
    usage: Number(raw.usage),
    usage_daily: Number(raw.usage_daily),
    usage_weekly: Number(raw.usage_weekly),
    usage_monthly: Number(raw.usage_monthly),
    ledger_day_usd: Number(raw.ledger_day_usd),
    drift_usd: Number(raw.drift_usd),
    drifted: raw.drifted as boolean,
  };
}

export function postgresUpstream(sql: postgres.Sql): UpstreamStore {
  const pending = sql`cost_source = 'estimate' AND generation_id IS NOT NULL AND NOT reconcile_abandoned`;

  return {
    async upstreamKeys() {
      return (await sql`SELECT * FROM upstream_keys ORDER BY profile`).map(toUpstreamKey);
    },

    async putUpstreamKey(row: UpstreamKeyRow) {
      await sql`
        INSERT INTO upstream_keys (profile, hash, name, label, limit_usd, limit_reset, created_at, updated_at)
        VALUES (${row.profile}, ${row.hash}, ${row.name}, ${row.label}, ${row.limit_usd}, ${row.limit_reset},
                ${row.created_at}, ${row.updated_at})
        ON CONFLICT (profile) DO UPDATE SET hash = excluded.hash, name = excluded.name, label = excluded.label,
          limit_usd = excluded.limit_usd, limit_reset = excluded.limit_reset, updated_at = excluded.updated_at`;
    },

    async insertUsageSnapshot(s: UsageSnapshot) {
      await sql`INSERT INTO usage_snapshots ${sql({ ...s })}`;
    },

    async latestUsageSnapshots() {
      const rows = await sql`SELECT DISTINCT ON (profile) * FROM usage_snapshots ORDER BY profile, ts DESC, id DESC`;
      return rows.map(toSnapshot);
    },

    async reconcileCounts() {
      const [raw] = await sql`
        SELECT (SELECT count(*) FROM requests WHERE ${pending}) AS pending,
               (SELECT count(*) FROM requests WHERE reconciled_at IS NOT NULL) AS reconciled,
               (SELECT count(*) FROM requests WHERE reconcile_abandoned) AS abandoned`;
      return { pending: Number(raw.pending), reconciled: Number(raw.reconciled), abandoned: Number(raw.abandoned) };
    },

    async duePendingReconciles(now, limit) {
      const rows = await sql`
        SELECT id, profile, generation_id, ts, duration_ms, cost_usd, reconcile_attempts FROM requests
        WHERE ${pending} AND (reconcile_next_at IS NULL OR reconcile_next_at <= ${now})
        ORDER BY ts LIMIT ${limit}`;
      return rows.map((raw) => ({
        id: raw.id as string,
        profile: raw.profile as string,
        generation_id: raw.generation_id as string,
        ts: iso(raw.ts),
        duration_ms: Number(raw.duration_ms),
        cost_usd: Number(raw.cost_usd),
        reconcile_attempts: Number(raw.reconcile_attempts),
      }));
    },

    async hasPendingReconciles() {
      return (await sql`SELECT 1 FROM requests WHERE ${pending} LIMIT 1`).length > 0;
    },

    async deferReconcile(id, attempts, nextAt) {
      await sql`
        UPDATE requests SET reconcile_attempts = ${attempts}, reconcile_next_at = ${nextAt},
          reconcile_abandoned = ${nextAt === null}
        WHERE id = ${id} AND ${pending}`;
    },

    async abandonReconcilesBefore(before) {
      const r = await sql`UPDATE requests SET reconcile_abandoned = true, reconcile_next_at = NULL WHERE ${pending} AND ts < ${before}`;
      return r.count;
    },

    /**
     * The one place a reconciled cost lands. The row lock makes a second process wait, then find
     * the row no longer an estimate: only the first gets the old cost back and corrects the budget.
     * The board's rollups follow in the same transaction (the budget seeds from them).
     */
    async applyReconciledCost(id, costUsd, at) {
      return sql.begin(async (tx) => {
        const [raw] = await tx`
          UPDATE requests r SET cost_usd = ${costUsd}, cost_source = 'upstream', reconciled_at = ${at}, reconcile_next_at = NULL
          FROM (SELECT id, cost_usd AS old FROM requests WHERE id = ${id} AND cost_source = 'estimate' FOR UPDATE) o
          WHERE r.id = o.id AND r.cost_source = 'estimate'
          RETURNING o.old`;
        if (!raw) return undefined;
        await adjustRollupCostPostgres(tx, id, costUsd - Number(raw.old));
        return Number(raw.old);
      });
    },
  };
}
