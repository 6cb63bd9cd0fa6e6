// The rollups the store keeps beside the request rows: which (grain, bucket, dimension, key) rows one request or audit row adds to,
// and the fixed log-scale histogram buckets percentiles are read from. One aggregation function,
// used by the write path (inside insertRequests' transaction), the start-up backfill and cost
// corrections alike, so they can never disagree. Pure: it never touches a database or a clock.

import type { AuditRow, BoardGrain as Grain, BoardMetric as Metric, RequestRow, TokenCounts } from './store.ts';

/** Separates the parts of a composite key (profile, session, end user, …). */
export const SEP = '\u001f';

/** The figures a rollup row sums, in the order the rollup tables hold them. */
export const SUM_COLUMNS = [
  'requests', 'errors', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'reasoning_tokens', 'cost_usd',
] as const satisfies ReadonlyArray<keyof TokenCounts | 'requests' | 'errors' | 'cost_usd'>;

export type Sums = Record<(typeof SUM_COLUMNS)[number], number>;

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

export const ZERO_SUMS: Sums = Object.freeze(Object.fromEntries(SUM_COLUMNS.map((c) => [c, 0])) as Sums);

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

/**
 * The status class a status code is counted under, on the board and on /metrics alike: '2xx' to
 * '5xx', and 'other' for anything else (0 when no response was had, an interim 1xx, a bad code).
 */
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
  // A key's spend by day: what its caps count against (Store.keyLedgerSpendSince) and `sluice keys list` shows.
  if (row.key_id != null) out.push([D, 'key', String(row.key_id)]);
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
    const bucket = bucketOf(grain, first);
    const id = `${grain}${bucket}${SEP}${dim}${SEP}${key}`;
    let r = this.rollups.get(id);
    if (!r) this.rollups.set(id, (r = { grain, bucket, dim, key, ...ZERO_SUMS, first_ts: first, last_ts: last, note }));
    merge(r, first, last, sums, note);
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

/** Histogram counts by bucket index (0 … HIST_MAX). */
type Counts = Float64Array;

/** Sums seen between two times, with the latest-wins note: a rollup row's running figures. */
type Span = Sums & { first_ts: string; last_ts: string; note: string };

/** One (dim, key) of one hour: what the groups and rows counted under it add up to. */
type Entry = Span & { grains: Grain[]; dim: string; key: string };

/**
 * One UTC hour of a batch: its entries and its histograms (per dim, key and metric). Days and all
 * time are folded from the hours, never counted per row.
 */
interface Hour {
  ts: string;
  entries: Map<string, Entry>;
  hist: Map<string, { grains: Grain[]; dim: string; key: string; metric: Metric; counts: Counts }>;
  /** Every row's overhead, TTFB and duration counts of the hour. */
  o: Counts; t: Counts; d: Counts;
}

function hourCounts(h: Pick<Hour, 'hist'>, grains: Grain[], dim: string, key: string, metric: Metric): Counts {
  const id = dim + SEP + key + SEP + metric;
  let e = h.hist.get(id);
  if (!e) h.hist.set(id, (e = { grains, dim, key, metric, counts: new Float64Array(HIST_MAX + 1) }));
  return e.counts;
}

function newHour(ts: string): Hour {
  const h = { ts, entries: new Map(), hist: new Map() };
  return { ...h, o: hourCounts(h, HD, 'all', '', 'o'), t: hourCounts(h, HD, 'all', '', 't'), d: hourCounts(h, HD, 'all', '', 'd') };
}

function entry(h: Hour, grains: Grain[], dim: string, key: string): Entry {
  const id = dim + SEP + key;
  let e = h.entries.get(id);
  if (!e) h.entries.set(id, (e = { grains, dim, key, ...ZERO_SUMS, first_ts: '\uffff', last_ts: '', note: '' }));
  return e;
}

/** Adds every sum of `s` into `into` (spelled out: a for-in over the keys costs more per call). */
export function addSums(into: Sums, s: Sums): void {
  into.requests += s.requests;
  into.errors += s.errors;
  into.input_tokens += s.input_tokens;
  into.output_tokens += s.output_tokens;
  into.cache_read_tokens += s.cache_read_tokens;
  into.cache_write_tokens += s.cache_write_tokens;
  into.reasoning_tokens += s.reasoning_tokens;
  into.cost_usd += s.cost_usd;
}

/** Adds sums seen between `first` and `last` (a later addition's note wins a tie, as row by row). */
function merge(into: Span, first: string, last: string, s: Sums, note: string): void {
  addSums(into, s);
  if (first < into.first_ts) into.first_ts = first;
  if (last >= into.last_ts) {
    into.last_ts = last;
    into.note = note;
  }
}

/**
 * Rows alike in every few-valued dimension the rollups read, within one UTC hour: summed once,
 * added to the hour's shared entries once. It keeps no row (a backfill slice's rows die young).
 */
interface Group {
  hour: Hour; entries: Entry[]; profile: string; sums: Sums; first: string; last: string;
  /** The hour's TTFB histogram of the group's provider. */
  pt: Counts;
  tools: Map<string, number> | undefined;
}

/**
 * What makes two rows count under the same shared rollup rows (and histogram keys). Session, end
 * user and run are left out: they take almost any value, and are added row by row instead.
 */
function signature(r: RequestRow): string {
  return r.ts.slice(0, 13) + SEP + r.endpoint + SEP + r.outcome + SEP + r.status + SEP + r.profile + SEP + r.provider + SEP
    + r.model + SEP + r.tier + SEP + r.requested_model + SEP + r.degradation + SEP + r.key_id;
}

/** Counts one request row into `into` (no object per row: a group's sums take it directly). */
function addRow(into: Sums, row: RequestRow): void {
  into.requests += 1;
  if (isError(row)) into.errors += 1;
  into.input_tokens += row.input_tokens;
  into.output_tokens += row.output_tokens;
  into.cache_read_tokens += row.cache_read_tokens;
  into.cache_write_tokens += row.cache_write_tokens;
  into.reasoning_tokens += row.reasoning_tokens;
  into.cost_usd += row.cost_usd;
}

const A: Grain[] = ['a'];
/** Groups held at once; past it they go to their entries (a batch of all-different rows). */
const MAX_GROUPS = 4096;

function newGroup(hours: Map<string, Hour>, row: RequestRow): Group {
  const hk = row.ts.slice(0, 13);
  let h = hours.get(hk);
  if (!h) hours.set(hk, (h = newHour(row.ts)));
  return {
    hour: h, entries: sharedTargets(row).map(([grains, dim, key]) => entry(h, grains, dim, key)), profile: row.profile,
    sums: { ...ZERO_SUMS }, first: row.ts, last: row.ts, pt: hourCounts(h, HD, 'provider', row.provider ?? 'unknown', 't'), tools: undefined,
  };
}

/** Adds each group to its hour's entries, in the order the groups began; then forgets them. */
function flush(groups: Map<string, Group>): void {
  for (const g of groups.values()) {
    for (const e of g.entries) merge(e, g.first, g.last, g.sums, '');
    if (g.tools) for (const [name, n] of g.tools) merge(entry(g.hour, D, 'tool', `${g.profile}${SEP}${name}`), g.first, g.last, { ...ZERO_SUMS, requests: n }, '');
  }
  groups.clear();
}

/**
 * The rollup deltas of request rows, added one at a time (a backfill slice as it is read) or all
 * at once (requestDeltas). One pass groups the rows on their few-valued fields (a batch is mostly
 * a few kinds of request) and counts their latencies into their hour's histograms; a row's own
 * session, end user and run go to its hour's entries as it comes. Each group then adds to its
 * hour's entries once, and the hours fold into days and all time: the cost per row is one
 * signature and a few additions, per hour a few hundred, and no row outlives the pass.
 */
export class RequestAggregator {
  private readonly hours = new Map<string, Hour>();
  private readonly groups = new Map<string, Group>();

  add(row: RequestRow): void {
    const sig = signature(row);
    let g = this.groups.get(sig);
    if (!g) {
      if (this.groups.size >= MAX_GROUPS) flush(this.groups);
      this.groups.set(sig, (g = newGroup(this.hours, row)));
    }
    const h = g.hour;
    addRow(g.sums, row);
    if (row.ts < g.first) g.first = row.ts;
    if (row.ts >= g.last) g.last = row.ts;
    const ttfb = row.ttfb_ms !== null && Number.isFinite(row.ttfb_ms) ? histIndex(row.ttfb_ms) : -1;
    const duration = Number.isFinite(row.duration_ms) ? histIndex(row.duration_ms) : -1;
    if (row.overhead_ms !== null && Number.isFinite(row.overhead_ms)) h.o[histIndex(row.overhead_ms)]++;
    if (ttfb >= 0) {
      h.t[ttfb]++;
      g.pt[ttfb]++;
    }
    if (duration >= 0) h.d[duration]++;
    if (row.tools.length > 0) {
      g.tools ??= new Map();
      // Tools count per profile, which the signature holds.
      for (const name of row.tools) g.tools.set(name, (g.tools.get(name) ?? 0) + 1);
    }
    const own = ownTargets(row);
    if (own.length === 0) return;
    const sums = { ...ZERO_SUMS };
    addRow(sums, row);
    for (const [grains, dim, key, note] of own) merge(entry(h, grains, dim, key), row.ts, row.ts, sums, note ?? '');
    if (row.run !== null) {
      if (ttfb >= 0) hourCounts(h, A, 'run', row.run, 't')[ttfb]++;
      if (duration >= 0) hourCounts(h, A, 'run', row.run, 'd')[duration]++;
    }
  }

  /** Every row added so far: the hours, then the days and all time they add up to. */
  deltas(): Deltas {
    flush(this.groups);
    const c = new Collector();
    for (const h of this.hours.values()) {
      for (const e of h.entries.values()) for (const gr of e.grains) c.add(gr, e.first_ts, e.last_ts, e.dim, e.key, e, e.note);
      for (const e of h.hist.values()) {
        for (let idx = 0; idx <= HIST_MAX; idx++) {
          const n = e.counts[idx];
          if (n > 0) for (const gr of e.grains) c.addHist(gr, h.ts, e.dim, e.key, e.metric, idx, n);
        }
      }
    }
    return c.deltas();
  }
}

/** The rollup deltas of request rows (rows actually inserted: a replayed row must not come here). */
export function requestDeltas(rows: Iterable<RequestRow>): Deltas {
  const agg = new RequestAggregator();
  for (const row of rows) agg.add(row);
  return agg.deltas();
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
