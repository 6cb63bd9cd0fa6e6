// The rollups the store keeps beside the request rows: which (grain, bucket, dimension, key) rows one request or audit row adds to,
// and the fixed log-scale histogram buckets percentiles are read from. One aggregation function,
// used by the write path (inside insertRequests' transaction), the start-up backfill and cost
// corrections alike, so they can never disagree. Pure: it never touches a database or a clock.

import type { AuditRow, RequestRow, TokenCounts } from './store.ts';

/** 'h': bucket 'YYYY-MM-DDTHH' (UTC hour); 'd': 'YYYY-MM-DD' (UTC day); 'a': '' (all time). */
export type Grain = 'h' | 'd' | 'a';
/** Histogram metrics: overhead, time to first byte, duration (all milliseconds). */
export type Metric = 'o' | 't' | 'd';

/** Separates the parts of a composite key (profile, session, end user, …). */
export const SEP = '\u001f';

export interface Sums extends TokenCounts {
  requests: number;
  errors: number;
  cost_usd: number;
}

export interface RollupDelta extends Sums {
  grain: Grain;
  bucket: string;
  dim: string;
  key: string;
  first_ts: string;
  last_ts: string;
  /** Latest-wins text (a session's tier); '' when the dimension keeps none. */
  note: string;
}

export interface HistDelta {
  grain: Grain;
  bucket: string;
  dim: string;
  key: string;
  metric: Metric;
  idx: number;
  n: number;
}

export interface Deltas {
  rollups: RollupDelta[];
  hist: HistDelta[];
}

export const ZERO_SUMS: Sums = Object.freeze({
  requests: 0, errors: 0, input_tokens: 0, output_tokens: 0, cache_read_tokens: 0,
  cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0,
});

/** Histogram buckets: 4 per doubling from 0.01 ms (≤ 9 % relative error), 0 … HIST_MAX. */
export const HIST_MAX = 127;

export function histIndex(ms: number): number {
  if (!(ms > 0.01)) return 0;
  return Math.min(HIST_MAX, Math.ceil(4 * Math.log2(ms * 100)));
}

/** The value a bucket stands for: the geometric middle of its bounds (bucket 0: 0). */
export function histValue(idx: number): number {
  if (idx <= 0) return 0;
  const v = 2 ** ((idx - 0.5) / 4) / 100;
  return v >= 100 ? Math.round(v) : Math.round(v * 100) / 100;
}

/** p50/p95/p99 of merged buckets (idx → count): the bucket holding the ceil(p·n)-th value. */
export function percentiles(buckets: Map<number, number>): { p50: number | null; p95: number | null; p99: number | null } {
  let total = 0;
  for (const n of buckets.values()) total += n;
  if (total === 0) return { p50: null, p95: null, p99: null };
  const sorted = [...buckets.entries()].filter(([, n]) => n > 0).sort((a, b) => a[0] - b[0]);
  const at = (p: number) => {
    const rank = Math.max(1, Math.ceil(p * total));
    let seen = 0;
    for (const [idx, n] of sorted) {
      seen += n;
      if (seen >= rank) return histValue(idx);
    }
    /* c8 ignore next */
    return histValue(sorted[sorted.length - 1][0]);
  };
  return { p50: at(0.5), p95: at(0.95), p99: at(0.99) };
}

/** The status class a status code is counted under. */
export function statusClass(status: number): string {
  return status >= 200 && status < 600 ? `${Math.floor(status / 100)}xx` : 'other';
}

/** Errors: the upstream or sluice failed (a client hanging up is not an error). */
export function isError(row: Pick<RequestRow, 'outcome'>): boolean {
  return row.outcome === 'upstream_error' || row.outcome === 'gateway_error';
}

export const AUTO_MODEL = 'sluice/auto';

type Target = [grains: Grain[], dim: string, key: string, note?: string];

const HD: Grain[] = ['h', 'd'];
const D: Grain[] = ['d'];

/** Every (grains, dim, key) a request row is counted under. */
function targets(row: RequestRow): Target[] {
  const tier = row.tier ?? 'none';
  const out: Target[] = [
    [HD, 'all', ''],
    [HD, 'endpoint', row.endpoint],
    [HD, 'outcome', row.outcome],
    [HD, 'status', String(row.status)],
    [HD, 'profile', row.profile],
    [HD, 'provider', row.provider ?? 'unknown'],
    [D, 'pmodel', `${row.profile}${SEP}${row.model ?? 'unknown'}`],
    [D, 'tier', tier],
    [D, 'route', [tier, row.degradation, row.requested_model ?? '', row.model ?? ''].join(SEP)],
  ];
  if (row.requested_model === AUTO_MODEL) out.push([D, 'auto', tier]);
  if (row.degradation !== 'none') out.push([D, 'degradation', row.degradation]);
  if (row.session !== null || row.end_user !== null) {
    out.push([HD, 'session', [row.profile, row.session ?? '', row.end_user ?? ''].join(SEP), tier]);
  }
  if (row.end_user !== null) out.push([D, 'end_user', `${row.profile}${SEP}${row.end_user}`]);
  if (row.run !== null) out.push([['a'], 'run', row.run]);
  return out;
}

/**
 * Collects deltas keyed by their identity, merging repeats (one upsert per key per batch). It runs
 * for every row written (in the store's thread), so it keeps to cheap steps: a row's hour and day
 * are cut from its timestamp once, not per target.
 */
class Collector {
  readonly rollups = new Map<string, RollupDelta>();
  readonly hist = new Map<string, HistDelta>();
  private ts = '';
  private hour = '';
  private day = '';

  private bucketOf(grain: Grain, ts: string): string {
    if (ts !== this.ts) {
      this.ts = ts;
      this.hour = ts.slice(0, 13);
      this.day = ts.slice(0, 10);
    }
    return grain === 'h' ? this.hour : grain === 'd' ? this.day : '';
  }

  add(grain: Grain, ts: string, dim: string, key: string, sums: Partial<Sums>, note = ''): void {
    const bucket = this.bucketOf(grain, ts);
    const id = grain + SEP + bucket + SEP + dim + SEP + key;
    let r = this.rollups.get(id);
    if (!r) this.rollups.set(id, (r = { grain, bucket, dim, key, ...ZERO_SUMS, first_ts: ts, last_ts: ts, note }));
    for (const k in sums) r[k as keyof Sums] += sums[k as keyof Sums]!;
    if (ts < r.first_ts) r.first_ts = ts;
    if (ts >= r.last_ts) {
      r.last_ts = ts;
      r.note = note;
    }
  }

  addHist(grain: Grain, ts: string, dim: string, key: string, metric: Metric, ms: number | null): void {
    if (ms === null || !Number.isFinite(ms)) return;
    const idx = histIndex(ms);
    const bucket = this.bucketOf(grain, ts);
    const id = grain + SEP + bucket + SEP + dim + SEP + key + SEP + metric + SEP + idx;
    const h = this.hist.get(id);
    if (h) h.n += 1;
    else this.hist.set(id, { grain, bucket, dim, key, metric, idx, n: 1 });
  }

  /** Sorted by identity: concurrent writers lock rows in one order (no deadlock on Postgres). */
  deltas(): Deltas {
    const byId = <T>(m: Map<string, T>) => [...m.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([, v]) => v);
    return { rollups: byId(this.rollups), hist: byId(this.hist) };
  }
}

/** The rollup deltas of request rows (rows actually inserted: a replayed row must not come here). */
export function requestDeltas(rows: Iterable<RequestRow>): Deltas {
  const c = new Collector();
  for (const row of rows) {
    const sums: Sums = {
      requests: 1,
      errors: isError(row) ? 1 : 0,
      input_tokens: row.input_tokens,
      output_tokens: row.output_tokens,
      cache_read_tokens: row.cache_read_tokens,
      cache_write_tokens: row.cache_write_tokens,
      reasoning_tokens: row.reasoning_tokens,
      cost_usd: row.cost_usd,
    };
    for (const [grains, dim, key, note] of targets(row)) for (const g of grains) c.add(g, row.ts, dim, key, sums, note ?? '');
    for (const g of HD) {
      c.addHist(g, row.ts, 'all', '', 'o', row.overhead_ms);
      c.addHist(g, row.ts, 'all', '', 't', row.ttfb_ms);
      c.addHist(g, row.ts, 'all', '', 'd', row.duration_ms);
      c.addHist(g, row.ts, 'provider', row.provider ?? 'unknown', 't', row.ttfb_ms);
    }
    if (row.run !== null) {
      c.addHist('a', row.ts, 'run', row.run, 't', row.ttfb_ms);
      c.addHist('a', row.ts, 'run', row.run, 'd', row.duration_ms);
    }
    const calls = new Map<string, number>();
    for (const name of row.tools) calls.set(name, (calls.get(name) ?? 0) + 1);
    for (const [name, n] of calls) c.add('d', row.ts, 'tool', `${row.profile}${SEP}${name}`, { requests: n });
  }
  return c.deltas();
}

/**
 * The deltas of a cost correction (a reconciled cost replacing an estimate): `deltaUsd` on every
 * rollup row the request counts under, nothing else (counts, times and notes unchanged).
 */
export function costDeltas(row: RequestRow, deltaUsd: number): RollupDelta[] {
  const c = new Collector();
  for (const [grains, dim, key] of targets(row)) for (const g of grains) c.add(g, row.ts, dim, key, { cost_usd: deltaUsd });
  return c.deltas().rollups;
}

/** The rollup deltas of auth audit rows: per UTC day, by outcome and by address. */
export function auditDeltas(rows: Iterable<AuditRow>): Deltas {
  const c = new Collector();
  for (const r of rows) {
    c.add('d', r.ts, 'auth_outcome', r.outcome, { requests: 1 });
    c.add('d', r.ts, 'auth_ip', r.ip, { requests: 1 });
  }
  return c.deltas();
}
