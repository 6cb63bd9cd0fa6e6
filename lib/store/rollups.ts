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

/** The (grains, dim, key) a request row shares with rows alike in the group signature's fields. */
function sharedTargets(row: RequestRow): Target[] {
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
  // The board's last-hour 429 count per profile (its rate_limited_burst anomaly).
  if (row.status === 429) out.push([['h'], 'limited', row.profile]);
  if (row.degradation !== 'none') out.push([D, 'degradation', row.degradation]);
  return out;
}

/** The row's own, many-valued targets: its session, end user and run. */
function ownTargets(row: RequestRow): Target[] {
  const out: Target[] = [];
  if (row.session !== null || row.end_user !== null) {
    out.push([HD, 'session', [row.profile, row.session ?? '', row.end_user ?? ''].join(SEP), row.tier ?? 'none']);
  }
  if (row.end_user !== null) out.push([D, 'end_user', `${row.profile}${SEP}${row.end_user}`]);
  if (row.run !== null) out.push([['a'], 'run', row.run]);
  return out;
}

/** Every (grains, dim, key) a request row is counted under. */
function targets(row: RequestRow): Target[] {
  return [...sharedTargets(row), ...ownTargets(row)];
}

/**
 * Collects deltas keyed by their identity, merging repeats (one upsert per key per batch). It runs
 * in the store's thread for every batch written and for the upgrade backfill, so it keeps to cheap
 * steps: the identity string is built once per (group, target), not per row.
 */
class Collector {
  readonly rollups = new Map<string, RollupDelta>();
  readonly hist = new Map<string, HistDelta>();

  /** Adds sums seen between `first` and `last` (timestamps of one UTC hour). */
  add(grain: Grain, first: string, last: string, dim: string, key: string, sums: Sums, note = ''): void {
    const bucket = grain === 'h' ? first.slice(0, 13) : grain === 'd' ? first.slice(0, 10) : '';
    const id = `${grain}${bucket}${SEP}${dim}${SEP}${key}`;
    const r = this.rollups.get(id);
    if (!r) {
      this.rollups.set(id, { grain, bucket, dim, key, ...sums, first_ts: first, last_ts: last, note });
      return;
    }
    r.requests += sums.requests;
    r.errors += sums.errors;
    r.input_tokens += sums.input_tokens;
    r.output_tokens += sums.output_tokens;
    r.cache_read_tokens += sums.cache_read_tokens;
    r.cache_write_tokens += sums.cache_write_tokens;
    r.reasoning_tokens += sums.reasoning_tokens;
    r.cost_usd += sums.cost_usd;
    if (first < r.first_ts) r.first_ts = first;
    if (last >= r.last_ts) {
      r.last_ts = last;
      r.note = note;
    }
  }

  addHist(grain: Grain, ts: string, dim: string, key: string, metric: Metric, idx: number, n: number): void {
    const bucket = bucketOf(grain, ts);
    const id = `${grain}${bucket}${SEP}${dim}${SEP}${key}${SEP}${metric}${idx}`;
    const h = this.hist.get(id);
    if (h) h.n += n;
    else this.hist.set(id, { grain, bucket, dim, key, metric, idx, n });
  }

  /** Sorted by identity: concurrent writers lock rows in one order (no deadlock on Postgres). */
  deltas(): Deltas {
    const byId = <T>(m: Map<string, T>) => [...m.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([, v]) => v);
    return { rollups: byId(this.rollups), hist: byId(this.hist) };
  }
}

function bucketOf(grain: Grain, ts: string): string {
  return grain === 'h' ? ts.slice(0, 13) : grain === 'd' ? ts.slice(0, 10) : '';
}

/** Histogram counts of one group: per metric, bucket index → count. */
type GroupHist = Record<'o' | 't' | 'd', Map<number, number>>;

/** Rows alike in every dimension the rollups read, within one UTC hour: summed once, counted once. */
interface Group {
  row: RequestRow;
  sums: Sums;
  first: string;
  last: string;
  hist: GroupHist;
  tools: Map<string, number> | undefined;
}

/**
 * What makes two rows count under the same shared rollup rows (and histogram keys). Session, end
 * user and run are left out: they take almost any value, and are added row by row instead.
 */
function signature(r: RequestRow): string {
  return r.ts.slice(0, 13) + SEP + r.endpoint + SEP + r.outcome + SEP + r.status + SEP + r.profile + SEP + r.provider + SEP
    + r.model + SEP + r.tier + SEP + r.requested_model + SEP + r.degradation;
}

function rowSums(row: RequestRow): Sums {
  return {
    requests: 1, errors: isError(row) ? 1 : 0, input_tokens: row.input_tokens, output_tokens: row.output_tokens, cache_read_tokens: row.cache_read_tokens,
    cache_write_tokens: row.cache_write_tokens, reasoning_tokens: row.reasoning_tokens, cost_usd: row.cost_usd,
  };
}

function count(m: Map<number, number>, ms: number | null): void {
  if (ms === null || !Number.isFinite(ms)) return;
  const idx = histIndex(ms);
  m.set(idx, (m.get(idx) ?? 0) + 1);
}

/**
 * The rollup deltas of request rows (rows actually inserted: a replayed row must not come here).
 * One pass groups the rows (a batch or a backfill slice is mostly a few kinds of request); each
 * group then adds to its targets once, so the cost per row is one signature and a few additions.
 */
export function requestDeltas(rows: Iterable<RequestRow>): Deltas {
  const c = new Collector();
  const groups = new Map<string, Group>();
  for (const row of rows) {
    const sig = signature(row);
    let g = groups.get(sig);
    if (!g) {
      g = { row, sums: { ...ZERO_SUMS }, first: row.ts, last: row.ts, hist: { o: new Map(), t: new Map(), d: new Map() }, tools: undefined };
      groups.set(sig, g);
    }
    const s = g.sums;
    s.requests += 1;
    if (isError(row)) s.errors += 1;
    s.input_tokens += row.input_tokens;
    s.output_tokens += row.output_tokens;
    s.cache_read_tokens += row.cache_read_tokens;
    s.cache_write_tokens += row.cache_write_tokens;
    s.reasoning_tokens += row.reasoning_tokens;
    s.cost_usd += row.cost_usd;
    if (row.ts < g.first) g.first = row.ts;
    if (row.ts >= g.last) g.last = row.ts;
    count(g.hist.o, row.overhead_ms);
    count(g.hist.t, row.ttfb_ms);
    count(g.hist.d, row.duration_ms);
    if (row.tools.length > 0) {
      g.tools ??= new Map();
      // Tools count per profile, which the signature holds.
      for (const name of row.tools) g.tools.set(name, (g.tools.get(name) ?? 0) + 1);
    }
    const own = ownTargets(row);
    if (own.length === 0) continue;
    const sums = rowSums(row);
    for (const [grains, dim, key, note] of own) for (const gr of grains) c.add(gr, row.ts, row.ts, dim, key, sums, note ?? '');
    if (row.run !== null) {
      if (row.ttfb_ms !== null && Number.isFinite(row.ttfb_ms)) c.addHist('a', row.ts, 'run', row.run, 't', histIndex(row.ttfb_ms), 1);
      if (Number.isFinite(row.duration_ms)) c.addHist('a', row.ts, 'run', row.run, 'd', histIndex(row.duration_ms), 1);
    }
  }
  for (const g of groups.values()) {
    const { row, sums, first, last, hist } = g;
    for (const [grains, dim, key, note] of sharedTargets(row)) for (const gr of grains) c.add(gr, first, last, dim, key, sums, note ?? '');
    const provider = row.provider ?? 'unknown';
    for (const gr of HD) {
      for (const [idx, n] of hist.o) c.addHist(gr, first, 'all', '', 'o', idx, n);
      for (const [idx, n] of hist.t) {
        c.addHist(gr, first, 'all', '', 't', idx, n);
        c.addHist(gr, first, 'provider', provider, 't', idx, n);
      }
      for (const [idx, n] of hist.d) c.addHist(gr, first, 'all', '', 'd', idx, n);
    }
    if (g.tools) for (const [name, n] of g.tools) c.add('d', first, last, 'tool', `${row.profile}${SEP}${name}`, { ...ZERO_SUMS, requests: n });
  }
  return c.deltas();
}

/**
 * The deltas of a cost correction (a reconciled cost replacing an estimate): `deltaUsd` on every
 * rollup row the request counts under, nothing else (counts, times and notes unchanged).
 */
export function costDeltas(row: RequestRow, deltaUsd: number): RollupDelta[] {
  const c = new Collector();
  const sums = { ...ZERO_SUMS, cost_usd: deltaUsd };
  for (const [grains, dim, key] of targets(row)) for (const g of grains) c.add(g, row.ts, row.ts, dim, key, sums);
  return c.deltas().rollups;
}

const ONE: Sums = Object.freeze({ ...ZERO_SUMS, requests: 1 });

/** The rollup deltas of auth audit rows: per UTC day, by outcome and by address. */
export function auditDeltas(rows: Iterable<AuditRow>): Deltas {
  const c = new Collector();
  for (const r of rows) {
    c.add('d', r.ts, r.ts, 'auth_outcome', r.outcome, ONE);
    c.add('d', r.ts, r.ts, 'auth_ip', r.ip, ONE);
  }
  return c.deltas();
}
