// The board's part of the Postgres Store: rollup upserts (inside insertRequests' and insertAudit's
// transactions, for rows actually inserted), cost corrections, the backfill of a 0.3.0 store in
// (ts, id) order under a row lock (several gateways share the work, none counts a row twice),
// retention, and the board's reads. Upserts go in one sorted order, so writers never deadlock.

import type postgres from 'postgres';
import { auditDeltas, costDeltas, RequestAggregator, requestDeltas, SUM_COLUMNS, type Deltas } from './rollups.ts';
import { iso, numOrNull, type Raw } from './postgres-values.ts';
import { BOARD_RECENT_COLUMNS, ROLLUP_READ_COLUMNS, type AuditRow, type BoardMetric, type BoardStore, type BoardSum, type RequestRow } from './store.ts';

type Sql = postgres.Sql | postgres.TransactionSql;

const ROLLUP_COLUMNS = ['grain', 'dim', 'bucket', 'key', ...SUM_COLUMNS, 'first_ts', 'last_ts', 'note'] as const;
const HIST_COLUMNS = ['grain', 'dim', 'bucket', 'key', 'metric', 'idx', 'n'] as const;
/** The columns the rollups read of a request row (never its key or anything of the prompt). */
const ROW_COLUMNS = ROLLUP_READ_COLUMNS.join(', ');

/** A raw Postgres requests row (ROW_COLUMNS) in the Store's shape, enough for the rollups. */
export function postgresRollupRow(raw: Raw): RequestRow {
  return {
    id: raw.id as string, ts: iso(raw.ts), endpoint: raw.endpoint as RequestRow['endpoint'], profile: raw.profile as string,
    key_prefix: '', end_user: raw.end_user as string | null, session: raw.session as string | null, run: raw.run as string | null,
    tier: raw.tier as string | null, requested_model: raw.requested_model as string | null, model: raw.model as string | null,
    stream: false, status: Number(raw.status), outcome: raw.outcome as RequestRow['outcome'],
    input_tokens: Number(raw.input_tokens), output_tokens: Number(raw.output_tokens), cache_read_tokens: Number(raw.cache_read_tokens),
    cache_write_tokens: Number(raw.cache_write_tokens), reasoning_tokens: Number(raw.reasoning_tokens), cost_usd: Number(raw.cost_usd),
    cost_source: 'estimate', provider: raw.provider as string | null, degradation: raw.degradation as RequestRow['degradation'],
    generation_id: null, ttfb_ms: numOrNull(raw.ttfb_ms), duration_ms: Number(raw.duration_ms), overhead_ms: numOrNull(raw.overhead_ms),
    tools: raw.tools === '[]' ? [] : (JSON.parse(raw.tools as string) as string[]), key_id: numOrNull(raw.key_id),
  };
}

/** One array per column, in the deltas' order (unnest reads them back row by row, in that order). */
function columns<T extends Record<K, string | number>, K extends keyof T>(rows: T[], names: readonly K[]): Array<Array<string | number>> {
  const out = names.map(() => new Array<string | number>(rows.length));
  for (let i = 0; i < rows.length; i++) for (let c = 0; c < names.length; c++) out[c][i] = rows[i][names[c]];
  return out;
}

async function apply(tx: Sql, d: Deltas): Promise<void> {
  // Each upsert is one statement text with one array per column, whatever the number of rows:
  // no statement of thousands of parameters for the server to parse and plan, and the rows keep
  // the deltas' sorted order, so concurrent writers lock them in one order.
  if (d.rollups.length > 0) {
    const [grain, dim, bucket, key, requests, errors, input, output, cacheRead, cacheWrite, reasoning, cost, first, last, note] = columns(d.rollups, ROLLUP_COLUMNS);
    await tx`INSERT INTO board_rollup (${tx(ROLLUP_COLUMNS as unknown as string[])})
      SELECT * FROM unnest(${grain}::text[], ${dim}::text[], ${bucket}::text[], ${key}::text[], ${requests}::bigint[], ${errors}::bigint[],
        ${input}::bigint[], ${output}::bigint[], ${cacheRead}::bigint[], ${cacheWrite}::bigint[], ${reasoning}::bigint[], ${cost}::float8[],
        ${first}::text[], ${last}::text[], ${note}::text[])
      ON CONFLICT (grain, dim, bucket, key) DO UPDATE SET
        requests = board_rollup.requests + excluded.requests, errors = board_rollup.errors + excluded.errors,
        input_tokens = board_rollup.input_tokens + excluded.input_tokens, output_tokens = board_rollup.output_tokens + excluded.output_tokens,
        cache_read_tokens = board_rollup.cache_read_tokens + excluded.cache_read_tokens,
        cache_write_tokens = board_rollup.cache_write_tokens + excluded.cache_write_tokens,
        reasoning_tokens = board_rollup.reasoning_tokens + excluded.reasoning_tokens, cost_usd = board_rollup.cost_usd + excluded.cost_usd,
        first_ts = LEAST(board_rollup.first_ts, excluded.first_ts),
        note = CASE WHEN excluded.last_ts >= board_rollup.last_ts THEN excluded.note ELSE board_rollup.note END,
        last_ts = GREATEST(board_rollup.last_ts, excluded.last_ts)`;
  }
  if (d.hist.length > 0) {
    const [grain, dim, bucket, key, metric, idx, n] = columns(d.hist, HIST_COLUMNS);
    await tx`INSERT INTO board_hist (${tx(HIST_COLUMNS as unknown as string[])})
      SELECT * FROM unnest(${grain}::text[], ${dim}::text[], ${bucket}::text[], ${key}::text[], ${metric}::text[], ${idx}::int[], ${n}::bigint[])
      ON CONFLICT (grain, dim, bucket, key, metric, idx) DO UPDATE SET n = board_hist.n + excluded.n`;
  }
}

/** Cursor and mark of the requests backfill: JSON [ts, id] text, '' = start / nothing to do. */
async function marks(tx: Sql, lock: 'FOR UPDATE' | 'FOR SHARE') {
  const rows = await tx.unsafe(`SELECT name, value FROM board_state ORDER BY name ${lock}`);
  const get = (n: string) => String(rows.find((r) => r.name === n)?.value ?? '');
  return { reqCursor: get('requests_cursor'), reqUpto: get('requests_upto'), auditCursor: Number(get('audit_cursor') || 0), auditUpto: Number(get('audit_upto') || 0) };
}

const requestsDone = (m: { reqCursor: string; reqUpto: string }) => m.reqUpto === '' || m.reqCursor === m.reqUpto;

/** Whether the backfill is yet to reach this row (it will read the row itself then). */
function awaitsBackfill(m: { reqCursor: string; reqUpto: string }, ts: number, id: string): boolean {
  if (requestsDone(m)) return false;
  const cmp = (mark: string) => {
    const [mts, mid] = JSON.parse(mark) as [string, string];
    const t = Date.parse(mts);
    return ts !== t ? Math.sign(ts - t) : id < mid ? -1 : id > mid ? 1 : 0;
  };
  return cmp(m.reqUpto) <= 0 && (m.reqCursor === '' || cmp(m.reqCursor) > 0);
}

/** Stays true once the backfill is done (it never comes back), so the write path skips the check. */
const doneFor = new WeakMap<object, boolean>();

/**
 * Rolls up request rows just inserted; call inside insertRequests' transaction. While a backfill
 * is pending, rows inside its range (a spilled row replayed late) are left to it.
 */
export async function rollUpRequestsPostgres(tx: Sql, inserted: RequestRow[], owner: object): Promise<void> {
  if (inserted.length === 0) return;
  let rows = inserted;
  if (!doneFor.get(owner)) {
    const m = await marks(tx, 'FOR SHARE');
    if (requestsDone(m)) doneFor.set(owner, true);
    else rows = rows.filter((r) => !awaitsBackfill(m, Date.parse(r.ts), r.id));
  }
  await apply(tx, requestDeltas(rows));
}

/** Rolls up audit rows just inserted (with their ids); call inside insertAudit's transaction. */
export async function rollUpAuditPostgres(tx: Sql, rows: AuditRow[]): Promise<void> {
  if (rows.length > 0) await apply(tx, auditDeltas(rows));
}

/**
 * A request's cost changed by `deltaUsd` (a reconciled cost replacing an estimate): the rollups
 * follow. Call inside the transaction that changed the row (`sql.begin`).
 */
export async function adjustRollupCostPostgres(tx: Sql, id: string, deltaUsd: number): Promise<void> {
  if (deltaUsd === 0) return;
  const [raw] = await tx.unsafe(`SELECT ${ROW_COLUMNS} FROM requests WHERE id = $1`, [id]);
  if (!raw) return;
  const row = postgresRollupRow(raw);
  if (awaitsBackfill(await marks(tx, 'FOR SHARE'), Date.parse(row.ts), row.id)) return;
  for (const r of costDeltas(row, deltaUsd)) {
    await tx`UPDATE board_rollup SET cost_usd = cost_usd + ${deltaUsd}
      WHERE grain = ${r.grain} AND dim = ${r.dim} AND bucket = ${r.bucket} AND key = ${r.key}`;
  }
}

function toSum(raw: Raw): BoardSum {
  const out = { dim: raw.dim, key: raw.key, bucket: raw.bucket ?? '', first_ts: raw.first_ts, last_ts: raw.last_ts, note: raw.note, buckets: Number(raw.buckets) } as BoardSum;
  for (const c of SUM_COLUMNS) out[c] = Number(raw[c]);
  return out;
}

export function postgresBoard(sql: postgres.Sql): BoardStore {
  let backfilled = false;
  async function isBackfilled(tx: Sql = sql): Promise<boolean> {
    if (backfilled) return true;
    const [r] = await tx`SELECT
      (SELECT value FROM board_state WHERE name = 'requests_cursor') AS rc, (SELECT value FROM board_state WHERE name = 'requests_upto') AS ru,
      (SELECT value FROM board_state WHERE name = 'audit_cursor') AS ac, (SELECT value FROM board_state WHERE name = 'audit_upto') AS au`;
    backfilled = (r.ru === '' || r.rc === r.ru) && Number(r.ac) >= Number(r.au);
    return backfilled;
  }

  return {
    async boardSums(q) {
      const group = q.byBucket ? 'dim, key, bucket' : 'dim, key';
      const order = q.order ? ` ORDER BY ${q.order === 'last_ts' ? 'last_ts' : q.order} DESC, key` : '';
      const params: postgres.ParameterOrJSON<never>[] = [q.grain, q.dims, q.from, q.to];
      const where = 'FROM board_rollup WHERE grain = $1 AND dim = ANY($2::text[]) AND bucket >= $3 AND bucket <= $4';
      if (q.limit !== undefined) params.push(q.limit);
      const limit = q.limit !== undefined ? ` LIMIT $${params.length}` : '';
      // By bucket, each row is its own group (the primary key): no aggregation at all.
      const rows = await sql.unsafe(
        q.byBucket
          ? `SELECT dim, key, bucket, ${SUM_COLUMNS.map((c) => `${c}::float8 AS ${c}`).join(', ')}, first_ts, last_ts, note, 1 AS buckets ${where}${order}${limit}`
          : `SELECT ${group}, ${SUM_COLUMNS.map((c) => `SUM(${c})::float8 AS ${c}`).join(', ')},
               MIN(first_ts) AS first_ts, MAX(last_ts) AS last_ts, (array_agg(note ORDER BY last_ts DESC))[1] AS note, COUNT(*)::int AS buckets
             ${where} GROUP BY ${group}${order}${limit}`,
        params,
      );
      return rows.map(toSum);
    },

    async boardHist(q) {
      const rows = await sql`SELECT dim, key, metric, idx, SUM(n)::float8 AS n FROM board_hist
        WHERE grain = ${q.grain} AND dim = ANY(${q.dims}::text[]) AND bucket >= ${q.from} AND bucket <= ${q.to}
        GROUP BY dim, key, metric, idx`;
      return rows.map((r) => ({ dim: r.dim as string, key: r.key as string, metric: r.metric as BoardMetric, idx: Number(r.idx), n: Number(r.n) }));
    },

    async boardActiveSessions(hour, minUsd) {
      // One row per session that spent at least minUsd in the hour, summed from that day's session
      // hours (one range of the primary key, aggregated by hash whatever the statistics): the
      // day's hours of each are summed here, not sent.
      const rows = await sql`SELECT key, SUM(cost_usd) FILTER (WHERE bucket = ${hour})::float8 AS hour_usd,
          COALESCE(SUM(cost_usd) FILTER (WHERE bucket < ${hour} AND cost_usd > 0), 0)::float8 AS earlier_usd,
          (COUNT(*) FILTER (WHERE bucket < ${hour} AND cost_usd > 0))::int AS earlier_hours
        FROM board_rollup WHERE grain = 'h' AND dim = 'session' AND bucket >= ${`${hour.slice(0, 10)}T00`} AND bucket <= ${hour}
        GROUP BY key HAVING MAX(cost_usd) FILTER (WHERE bucket = ${hour}) >= ${minUsd}::float8`;
      return rows.map((r) => ({ key: r.key as string, hour_usd: Number(r.hour_usd), earlier_usd: Number(r.earlier_usd), earlier_hours: Number(r.earlier_hours) }));
    },

    async boardRecent(since, limit) {
      const rows = await sql`SELECT ${sql(BOARD_RECENT_COLUMNS as unknown as string[])} FROM requests WHERE ts >= ${since} ORDER BY ts DESC LIMIT ${limit}`;
      return rows.map((r) => ({
        id: r.id as string, ts: iso(r.ts), profile: r.profile as string, session: r.session as string | null,
        end_user: r.end_user as string | null, tier: r.tier as string | null, model: r.model as string | null,
        provider: r.provider as string | null, status: Number(r.status), outcome: r.outcome as RequestRow['outcome'],
        cost_usd: Number(r.cost_usd), ttfb_ms: numOrNull(r.ttfb_ms),
      }));
    },

    async boardAuditSince(since, limit) {
      const rows = await sql`SELECT ip, COUNT(*)::int AS failures FROM auth_audit WHERE ts >= ${since}
        GROUP BY ip ORDER BY failures DESC, ip LIMIT ${limit}`;
      return rows.map((r) => ({ ip: r.ip as string, failures: Number(r.failures) }));
    },

    async ledgerSpendSince(profile, since) {
      const [raw] = since.endsWith('T00:00:00.000Z') && (await isBackfilled())
        ? await sql`SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM board_rollup
            WHERE grain = 'd' AND dim = 'profile' AND bucket >= ${since.slice(0, 10)} AND key = ${profile}`
        : await sql`SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests WHERE profile = ${profile} AND ts >= ${since}`;
      return Number(raw.spend);
    },

    async keyLedgerSpendSince(keyId, since) {
      const [raw] = since.endsWith('T00:00:00.000Z') && (await isBackfilled())
        ? await sql`SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM board_rollup
            WHERE grain = 'd' AND dim = 'key' AND bucket >= ${since.slice(0, 10)} AND key = ${String(keyId)}`
        : await sql`SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests WHERE key_id = ${keyId} AND ts >= ${since}`;
      return Number(raw.spend);
    },

    async backfillRollups(limit) {
      const out = await backfillSlice(limit);
      // The slice that finished the backfill gives the planner the rollups' statistics at once:
      // autovacuum would take its time, and the board's reads are planned without them till then.
      if (out.done && out.rows > 0) await sql`ANALYZE board_rollup, board_hist`;
      return out;
    },

    async pruneRequests(before, limit) {
      const r = await sql`DELETE FROM requests WHERE id IN (SELECT id FROM requests WHERE ts < ${before} ORDER BY ts LIMIT ${limit})`;
      return r.count;
    },
  };

  function backfillSlice(limit: number): Promise<{ done: boolean; rows: number }> {
    return sql.begin(async (tx) => {
      const m = await marks(tx, 'FOR UPDATE');
      let rows = 0;
      if (!requestsDone(m)) {
        const [uts, uid] = JSON.parse(m.reqUpto) as [string, string];
        const [cts, cid] = m.reqCursor === '' ? ['-infinity', ''] : (JSON.parse(m.reqCursor) as [string, string]);
        // Each row goes through the aggregation as it arrives (Postgres sends the rest
        // meanwhile): no row of the slice outlives its turn, and the event loop turns between
        // the network's chunks.
        const agg = new RequestAggregator();
        let n = 0;
        let lastId: string | undefined;
        await tx.unsafe(
          `SELECT ${ROW_COLUMNS} FROM requests
           WHERE ts >= $1::text::timestamptz AND ts <= $3::text::timestamptz
             AND (ts, id) > ($1::text::timestamptz, $2) AND (ts, id) <= ($3::text::timestamptz, $4)
           ORDER BY ts, id LIMIT $5`,
          [cts, cid, uts, uid, limit],
        ).forEach((raw) => {
          agg.add(postgresRollupRow(raw));
          n++;
          lastId = raw.id as string;
        });
        await apply(tx, agg.deltas());
        // The cursor in the mark's own form (Postgres's JSON of the full-precision time).
        const [last] = n < limit || lastId === undefined ? [] : await tx`SELECT json_build_array(ts, id)::text AS mark FROM requests WHERE id = ${lastId}`;
        const next = last ? (last.mark as string) : m.reqUpto;
        await tx`UPDATE board_state SET value = ${n < limit ? m.reqUpto : next} WHERE name = 'requests_cursor'`;
        rows += n;
      }
      if (rows < limit && m.auditCursor < m.auditUpto) {
        const raws = await tx`SELECT id, ts, ip, prefix, outcome FROM auth_audit WHERE id > ${m.auditCursor} AND id <= ${m.auditUpto} ORDER BY id LIMIT ${limit - rows}`;
        await apply(tx, auditDeltas(raws.map((r) => ({ ts: iso(r.ts), ip: r.ip, prefix: r.prefix, outcome: r.outcome }) as AuditRow)));
        const next = raws.length > 0 ? Number(raws[raws.length - 1].id) : m.auditUpto;
        await tx`UPDATE board_state SET value = ${String(raws.length < limit - rows ? m.auditUpto : next)} WHERE name = 'audit_cursor'`;
        rows += raws.length;
      }
      return { done: await isBackfilled(tx), rows };
    });
  }
}
