// The board's part of the embedded Store: rollup upserts (called inside insertRequests' and
// insertAudit's transactions, for rows actually inserted), cost corrections, the backfill of a
// 0.3.0 store, retention, and the board's reads. node:sqlite is synchronous: this runs in the
// store's thread (thread.ts), where a backfill slice holds other calls for about half a
// second at most. Never returns a key or a prompt.

import { writeTransaction } from './sqlite-tx.ts';
import type { DatabaseSync, SQLInputValue, StatementSync } from 'node:sqlite';
import { auditDeltas, costDeltas, RequestAggregator, requestDeltas, SUM_COLUMNS, type Deltas } from './rollups.ts';
import { BOARD_RECENT_COLUMNS, ROLLUP_READ_COLUMNS, type AuditRow, type BoardMetric, type BoardStore, type BoardSum, type RequestRow, type RollupColumn } from './store.ts';

type Raw = Record<string, unknown>;

/** The columns the backfill reads: the rowid, then what the rollups read (never the key prefix). */
const BACKFILL_COLUMNS = ['rowid', ...ROLLUP_READ_COLUMNS];
/** Where each column sits in a backfill row (after the rowid). */
const AT = Object.fromEntries(ROLLUP_READ_COLUMNS.map((c, i) => [c, i + 1])) as Record<RollupColumn, number>;

/**
 * A backfill row, read as an array (node:sqlite builds no object of thirty named columns per row):
 * what the rollups read of it, in the Store's shape.
 */
function backfillRow(a: unknown[]): RequestRow {
  const tools = a[AT.tools] as string;
  return {
    id: a[AT.id] as string, ts: a[AT.ts] as string, endpoint: a[AT.endpoint] as RequestRow['endpoint'], profile: a[AT.profile] as string, key_prefix: '',
    end_user: a[AT.end_user] as string | null, session: a[AT.session] as string | null, run: a[AT.run] as string | null, tier: a[AT.tier] as string | null,
    requested_model: a[AT.requested_model] as string | null, model: a[AT.model] as string | null, stream: false, status: a[AT.status] as number,
    outcome: a[AT.outcome] as RequestRow['outcome'], input_tokens: a[AT.input_tokens] as number, output_tokens: a[AT.output_tokens] as number,
    cache_read_tokens: a[AT.cache_read_tokens] as number, cache_write_tokens: a[AT.cache_write_tokens] as number, reasoning_tokens: a[AT.reasoning_tokens] as number,
    cost_usd: a[AT.cost_usd] as number, cost_source: 'estimate', provider: a[AT.provider] as string | null, degradation: a[AT.degradation] as RequestRow['degradation'],
    generation_id: null, ttfb_ms: a[AT.ttfb_ms] as number | null, duration_ms: a[AT.duration_ms] as number, overhead_ms: a[AT.overhead_ms] as number | null,
    tools: tools === '[]' ? [] : (JSON.parse(tools) as string[]), key_id: a[AT.key_id] as number | null,
  };
}

/** Bytes of the database file mapped while a backfill slice reads it. */
const BACKFILL_MMAP = 4 * 1024 ** 3;

function arrays(st: StatementSync): StatementSync {
  st.setReturnArrays(true);
  return st;
}

function statements(db: DatabaseSync) {
  return {
    upsert: db.prepare(
      `INSERT INTO board_rollup (grain, dim, bucket, key, ${SUM_COLUMNS.join(', ')}, first_ts, last_ts, note)
       VALUES (?, ?, ?, ?, ${SUM_COLUMNS.map(() => '?').join(', ')}, ?, ?, ?)
       ON CONFLICT (grain, dim, bucket, key) DO UPDATE SET
         ${SUM_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')},
         first_ts = min(first_ts, excluded.first_ts),
         note = CASE WHEN excluded.last_ts >= last_ts THEN excluded.note ELSE note END,
         last_ts = max(last_ts, excluded.last_ts)`,
    ),
    upsertHist: db.prepare(
      `INSERT INTO board_hist (grain, dim, bucket, key, metric, idx, n) VALUES (?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (grain, dim, bucket, key, metric, idx) DO UPDATE SET n = n + excluded.n`,
    ),
    addCost: db.prepare('UPDATE board_rollup SET cost_usd = cost_usd + ? WHERE grain = ? AND dim = ? AND bucket = ? AND key = ?'),
    rowById: db.prepare('SELECT rowid AS rid, * FROM requests WHERE id = ?'),
    state: db.prepare('SELECT value FROM board_state WHERE name = ?'),
    setState: db.prepare('UPDATE board_state SET value = ? WHERE name = ?'),
    // The backfill walks the rows to roll up in time order (the ts index): a slice covers a stretch
    // of hours, so its rows share rollup rows and it upserts hundreds, not a row's worth each.
    requestsByTs: arrays(db.prepare(`SELECT ${BACKFILL_COLUMNS.join(', ')} FROM requests INDEXED BY requests_ts
      WHERE rowid > ? AND rowid <= ? AND (ts, rowid) > (?, ?) ORDER BY ts, rowid LIMIT ?`)),
    seedTsCursor: db.prepare(`INSERT OR IGNORE INTO board_state (name, value) VALUES ('requests_ts_cursor', '["",0]')`),
    auditAfter: db.prepare('SELECT id, ts, ip, prefix, outcome FROM auth_audit WHERE id > ? AND id <= ? ORDER BY id LIMIT ?'),
    prune: db.prepare('DELETE FROM requests WHERE rowid IN (SELECT rowid FROM requests WHERE ts < ? ORDER BY ts LIMIT ?)'),
    // One row per session that spent at least ?2 in the hour ?1, summed from that day's session
    // hours (one range of the primary key): the day's hours of each are summed here, not sent.
    activeSessions: db.prepare(
      `SELECT key, TOTAL(CASE WHEN bucket = ?1 THEN cost_usd END) AS hour_usd,
         TOTAL(CASE WHEN bucket < ?1 AND cost_usd > 0 THEN cost_usd END) AS earlier_usd,
         COUNT(CASE WHEN bucket < ?1 AND cost_usd > 0 THEN 1 END) AS earlier_hours
       FROM board_rollup WHERE grain = 'h' AND dim = 'session' AND bucket >= ?3 AND bucket <= ?1
       GROUP BY key HAVING MAX(CASE WHEN bucket = ?1 THEN cost_usd END) >= ?2`,
    ),
    recent: db.prepare(
      `SELECT ${BOARD_RECENT_COLUMNS.join(', ')} FROM requests WHERE ts >= ? ORDER BY ts DESC LIMIT ?`,
    ),
    auditSince: db.prepare('SELECT ip, COUNT(*) AS failures FROM auth_audit WHERE ts >= ? GROUP BY ip ORDER BY failures DESC, ip LIMIT ?'),
    spendDays: db.prepare("SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM board_rollup WHERE grain = 'd' AND dim = 'profile' AND bucket >= ? AND key = ?"),
    spendRaw: db.prepare('SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests WHERE profile = ? AND ts >= ?'),
    keySpendDays: db.prepare("SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM board_rollup WHERE grain = 'd' AND dim = 'key' AND bucket >= ? AND key = ?"),
    keySpendRaw: db.prepare('SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests WHERE key_id = ? AND ts >= ?'),
  } satisfies Record<string, StatementSync>;
}

type Stmts = ReturnType<typeof statements>;
const cache = new WeakMap<DatabaseSync, Stmts>();
function stmts(db: DatabaseSync): Stmts {
  let s = cache.get(db);
  if (!s) cache.set(db, (s = statements(db)));
  return s;
}

/** Converts a raw SQLite requests row to the Store's shape. */
export function sqliteRequestRow(raw: Raw): RequestRow {
  return { ...(raw as unknown as RequestRow), stream: raw.stream === 1, tools: JSON.parse(raw.tools as string) as string[] };
}

function apply(s: Stmts, d: Deltas): void {
  for (const r of d.rollups) {
    s.upsert.run(r.grain, r.dim, r.bucket, r.key, ...SUM_COLUMNS.map((c) => r[c]), r.first_ts, r.last_ts, r.note);
  }
  for (const h of d.hist) s.upsertHist.run(h.grain, h.dim, h.bucket, h.key, h.metric, h.idx, h.n);
}

/** Rolls up request rows just inserted; call inside insertRequests' transaction. */
export function rollUpRequestsSqlite(db: DatabaseSync, inserted: RequestRow[]): void {
  if (inserted.length > 0) apply(stmts(db), requestDeltas(inserted));
}

/** Rolls up audit rows just inserted; call inside insertAudit's transaction. */
export function rollUpAuditSqlite(db: DatabaseSync, rows: AuditRow[]): void {
  if (rows.length > 0) apply(stmts(db), auditDeltas(rows));
}

function mark(s: Stmts, name: string): number {
  return Number((s.state.get(name) as Raw | undefined)?.value ?? 0);
}

/**
 * Where the backfill stands: rows with rowid in (from, upto] are rolled up in (ts, rowid) order,
 * and `at` is the last one done. `from` is the rowid cursor of an earlier version's backfill
 * (rows up to it were counted in rowid order); it no longer moves.
 */
function backfillPosition(s: Stmts): { from: number; upto: number; at: [string, number] } {
  const at = JSON.parse(((s.state.get('requests_ts_cursor') as Raw | undefined)?.value as string | undefined) ?? '["",0]') as [string, number];
  return { from: mark(s, 'requests_cursor'), upto: mark(s, 'requests_upto'), at };
}

/** Whether the backfill has yet to reach a row (it will count the row's cost as it then is). */
function notReached(s: Stmts, rid: number, ts: string): boolean {
  const p = backfillPosition(s);
  return rid > p.from && rid <= p.upto && (ts > p.at[0] || (ts === p.at[0] && rid > p.at[1]));
}

/**
 * A request's cost changed by `deltaUsd` (a reconciled cost replacing an estimate): the rollups
 * follow. Call inside the transaction that changed the row. A row the backfill has yet to reach is
 * left alone (the backfill will read its new cost).
 */
export function adjustRollupCostSqlite(db: DatabaseSync, id: string, deltaUsd: number): void {
  const s = stmts(db);
  const raw = s.rowById.get(id) as Raw | undefined;
  if (!raw || deltaUsd === 0) return;
  if (notReached(s, Number(raw.rid), raw.ts as string)) return;
  for (const r of costDeltas(sqliteRequestRow(raw), deltaUsd)) s.addCost.run(deltaUsd, r.grain, r.dim, r.bucket, r.key);
}

function toSum(raw: Raw): BoardSum {
  return {
    dim: raw.dim as string,
    key: raw.key as string,
    bucket: (raw.bucket as string | undefined) ?? '',
    requests: Number(raw.requests),
    errors: Number(raw.errors),
    input_tokens: Number(raw.input_tokens),
    output_tokens: Number(raw.output_tokens),
    cache_read_tokens: Number(raw.cache_read_tokens),
    cache_write_tokens: Number(raw.cache_write_tokens),
    reasoning_tokens: Number(raw.reasoning_tokens),
    cost_usd: Number(raw.cost_usd),
    first_ts: raw.first_ts as string,
    last_ts: raw.last_ts as string,
    note: raw.note as string,
    buckets: Number(raw.buckets),
  };
}

export function sqliteBoard(db: DatabaseSync): BoardStore {
  const s = stmts(db);
  s.seedTsCursor.run();
  const prepared = new Map<string, StatementSync>();
  const prep = (sql: string) => {
    let st = prepared.get(sql);
    if (!st) prepared.set(sql, (st = db.prepare(sql)));
    return st;
  };
  let backfilled = false;
  let mapped = false;
  const isBackfilled = () =>
    backfilled ||= mark(s, 'requests_cursor') >= mark(s, 'requests_upto') && mark(s, 'audit_cursor') >= mark(s, 'audit_upto');

  const transaction = <T>(work: () => T): T => writeTransaction(db, work);

  return {
    async boardSums(q) {
      const group = q.byBucket ? 'dim, key, bucket' : 'dim, key';
      const order = q.order ? ` ORDER BY ${q.order === 'last_ts' ? 'last_ts' : q.order} DESC, key` : '';
      const limit = q.limit !== undefined ? ' LIMIT ?' : '';
      const where = `FROM board_rollup WHERE grain = ? AND dim IN (${q.dims.map(() => '?').join(', ')}) AND bucket >= ? AND bucket <= ?`;
      // By bucket, each row is its own group (the primary key): no aggregation at all. Otherwise
      // SQLite takes the bare column `note` from the row holding MAX(last_ts): the latest note.
      const sql = q.byBucket
        ? `SELECT dim, key, bucket, ${SUM_COLUMNS.join(', ')}, first_ts, last_ts, note, 1 AS buckets ${where}${order}${limit}`
        : `SELECT ${group}, ${SUM_COLUMNS.map((c) => `SUM(${c}) AS ${c}`).join(', ')}, MIN(first_ts) AS first_ts, MAX(last_ts) AS last_ts, note, COUNT(*) AS buckets
           ${where} GROUP BY ${group}${order}${limit}`;
      const params: SQLInputValue[] = [q.grain, ...q.dims, q.from, q.to];
      if (q.limit !== undefined) params.push(q.limit);
      return prep(sql).all(...params).map(toSum);
    },

    async boardHist(q) {
      const sql = `SELECT dim, key, metric, idx, SUM(n) AS n FROM board_hist
        WHERE grain = ? AND dim IN (${q.dims.map(() => '?').join(', ')}) AND bucket >= ? AND bucket <= ?
        GROUP BY dim, key, metric, idx`;
      return prep(sql).all(q.grain, ...q.dims, q.from, q.to).map((r) => ({
        dim: r.dim as string, key: r.key as string, metric: r.metric as BoardMetric, idx: Number(r.idx), n: Number(r.n),
      }));
    },

    async boardActiveSessions(hour, minUsd) {
      return s.activeSessions.all(hour, minUsd, `${hour.slice(0, 10)}T00`).map((r) => ({
        key: r.key as string, hour_usd: Number(r.hour_usd), earlier_usd: Number(r.earlier_usd), earlier_hours: Number(r.earlier_hours),
      }));
    },

    async boardRecent(since, limit) {
      return s.recent.all(since, limit).map((r) => ({
        id: r.id as string, ts: r.ts as string, profile: r.profile as string,
        session: r.session as string | null, end_user: r.end_user as string | null, tier: r.tier as string | null,
        model: r.model as string | null, provider: r.provider as string | null, status: Number(r.status),
        outcome: r.outcome as RequestRow['outcome'], cost_usd: Number(r.cost_usd), ttfb_ms: r.ttfb_ms === null ? null : Number(r.ttfb_ms),
      }));
    },

    async boardAuditSince(since, limit) {
      return s.auditSince.all(since, limit).map((r) => ({ ip: r.ip as string, failures: Number(r.failures) }));
    },

    async ledgerSpendSince(profile, since) {
      const midnight = since.endsWith('T00:00:00.000Z');
      const raw = midnight && isBackfilled() ? s.spendDays.get(since.slice(0, 10), profile) : s.spendRaw.get(profile, since);
      return Number((raw as Raw).spend);
    },

    async keyLedgerSpendSince(keyId, since) {
      const midnight = since.endsWith('T00:00:00.000Z');
      const raw = midnight && isBackfilled() ? s.keySpendDays.get(since.slice(0, 10), String(keyId)) : s.keySpendRaw.get(keyId, since);
      return Number((raw as Raw).spend);
    },

    async backfillRollups(limit) {
      // The slices walk the rows in time order: on a store whose rows were not written in that
      // order, each row lookup lands on a random page. The file is read mapped until the backfill
      // is done (no read() and copy per page, which was most of such a slice's time).
      if (!mapped) db.exec(`PRAGMA mmap_size = ${BACKFILL_MMAP}`);
      mapped = true;
      const out = backfillSlice(limit);
      if (out.done) {
        db.exec('PRAGMA mmap_size = 0');
        mapped = false;
      }
      return out;
    },

    async pruneRequests(before, limit) {
      return Number(s.prune.run(before, limit).changes);
    },
  };

  function backfillSlice(limit: number): { done: boolean; rows: number } {
    return transaction(() => {
      let rows = 0;
      const p = backfillPosition(s);
      if (p.from < p.upto) {
        // Row by row through the aggregation: no row of the slice outlives it.
        const agg = new RequestAggregator();
        let last: unknown[] | undefined;
        for (const a of s.requestsByTs.iterate(p.from, p.upto, p.at[0], p.at[1], limit) as Iterable<unknown[]>) {
          rows++;
          last = a;
          agg.add(backfillRow(a));
        }
        apply(s, agg.deltas());
        if (last) s.setState.run(JSON.stringify([last[AT.ts], Number(last[0])]), 'requests_ts_cursor');
        // The last slice: the legacy cursor jumps to the end, which is what "done" reads.
        if (rows < limit) s.setState.run(String(p.upto), 'requests_cursor');
      }
      const auditCursor = mark(s, 'audit_cursor');
      const auditUpto = mark(s, 'audit_upto');
      if (rows < limit && auditCursor < auditUpto) {
        const raws = s.auditAfter.all(auditCursor, auditUpto, limit - rows) as Raw[];
        apply(s, auditDeltas(raws as unknown as AuditRow[]));
        s.setState.run(String(raws.length > 0 ? Number(raws[raws.length - 1].id) : auditUpto), 'audit_cursor');
        rows += raws.length;
      }
      backfilled = false;
      return { done: isBackfilled(), rows };
    });
  }
}
