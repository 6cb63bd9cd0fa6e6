// What the board's summary reads, and the windows it reads them for: every store read named and
// started at once (a few hundred rollup rows back, whatever the traffic), each awaited by name in
// the section that uses it. Also the helpers the sections share to fold rollup rows: grouping,
// percentiles of histogram rows, and "the last hour" from hourly rollups. Times are UTC.

import { windows } from '../budget.ts';
import { addSums, percentiles, ZERO_SUMS, type Sums } from '../store/rollups.ts';
import type { BoardHistSum, BoardMetric, BoardSum, Store } from '../store/store.ts';
import { RULES } from './anomalies.ts';
import type * as T from './types.ts';

export const HOUR = 3_600_000;
export const DAY = 86_400_000;
/** The newest raw rows read (the costliest requests of the last hour are looked for among them). */
export const RECENT_LIMIT = 1_000;
/** Today's costliest sessions read: the ones at their profile's session cap are looked for among them. */
export const STOPPED_LIMIT = 200;

export const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);
export const hourOf = (ms: number) => new Date(ms).toISOString().slice(0, 13);
/** Rounds away float noise (sums of many small costs), keeping nano-dollar precision. */
export const r6 = (v: number) => Math.round(v * 1e9) / 1e9;

/** The windows of the summary at `now`, as the store's buckets name them ('YYYY-MM-DD', 'YYYY-MM-DDTHH'). */
export function summaryWindows(now: number) {
  const w = windows(now);
  return {
    now,
    today: w.day,
    monthFrom: `${w.month}-01`,
    hourNow: hourOf(now),
    hourPrev: hourOf(now - HOUR),
    /** The first of the last 24 clock hours. */
    h24: hourOf(now - 23 * HOUR),
    /** The first day of the last 7 (today included), of the 7 before today, and of the last 30. */
    d7: dayOf(now - 6 * DAY),
    d8: dayOf(now - 7 * DAY),
    d30: dayOf(now - 29 * DAY),
    yesterday: dayOf(now - DAY),
    hourAgo: new Date(now - HOUR).toISOString(),
    /** When today and this month end (the budget windows reset). */
    dayEnd: w.dayEnd,
    monthEnd: w.monthEnd,
  };
}
export type SummaryWindows = ReturnType<typeof summaryWindows>;

const PERIOD_DIMS = ['all', 'endpoint', 'outcome', 'status', 'profile', 'pmodel', 'tier', 'auto', 'degradation', 'route', 'provider'];
const HOUR_DIMS = ['all', 'endpoint', 'outcome', 'status', 'provider'];

/**
 * Every read of the summary, started now. A read that fails rejects where it is awaited (and the
 * summary with it); one never awaited, because an earlier one failed, is no unhandled rejection.
 */
export function startReads(store: Store, w: SummaryWindows) {
  const reads = {
    /** The last 24 clock hours, summed per dimension; by hour; and their histograms. */
    last24h: store.boardSums({ grain: 'h', dims: HOUR_DIMS, from: w.h24, to: w.hourNow }),
    last24hByHour: store.boardSums({ grain: 'h', dims: ['all'], from: w.h24, to: w.hourNow, byBucket: true }),
    last24hHist: store.boardHist({ grain: 'h', dims: ['all', 'provider'], from: w.h24, to: w.hourNow }),
    today: store.boardSums({ grain: 'd', dims: PERIOD_DIMS, from: w.today, to: w.today }),
    todayHist: store.boardHist({ grain: 'd', dims: ['all'], from: w.today, to: w.today }),
    last7d: store.boardSums({ grain: 'd', dims: PERIOD_DIMS, from: w.d7, to: w.today }),
    last7dByDay: store.boardSums({ grain: 'd', dims: ['all'], from: w.d7, to: w.today, byBucket: true }),
    last7dHist: store.boardHist({ grain: 'd', dims: ['all', 'provider'], from: w.d7, to: w.today }),
    month: store.boardSums({ grain: 'd', dims: PERIOD_DIMS, from: w.monthFrom, to: w.today }),
    monthHist: store.boardHist({ grain: 'd', dims: ['all'], from: w.monthFrom, to: w.today }),
    /** This clock hour and the previous one, per bucket: the last hour is weighted from them (lastHour). */
    lastHours: store.boardSums({ grain: 'h', dims: ['profile', 'limited', 'provider'], from: w.hourPrev, to: w.hourNow, byBucket: true }),
    lastHoursHist: store.boardHist({ grain: 'h', dims: ['provider'], from: w.hourPrev, to: w.hourNow }),
    // The newest rows only, no grouping: the cost stays flat however many sessions the hour holds.
    lastHoursSessions: store.boardSums({ grain: 'h', dims: ['session'], from: w.hourPrev, to: w.hourNow, byBucket: true, order: 'last_ts', limit: 100 }),
    // One bucket: its rows are the totals already (no grouping, whatever the number of sessions).
    topSessionsToday: store.boardSums({ grain: 'd', dims: ['session'], from: w.today, to: w.today, byBucket: true, order: 'cost_usd', limit: 10 }),
    // The costliest sessions of today: those at their profile's session cap are among them (./summary-caps.ts).
    sessionsToday: store.boardSums({ grain: 'd', dims: ['session'], from: w.today, to: w.today, byBucket: true, order: 'cost_usd', limit: STOPPED_LIMIT }),
    /** Every key (the capped ones are shown), and the keys' spend today and this month (dim key: the key's id). */
    keys: store.listKeys(),
    keysToday: store.boardSums({ grain: 'd', dims: ['key'], from: w.today, to: w.today }),
    keysMonth: store.boardSums({ grain: 'd', dims: ['key'], from: w.monthFrom, to: w.today }),
    // Only the sessions that spent enough this hour to be an anomaly are judged against their own earlier hours.
    spendingSessions: store.boardActiveSessions(w.hourNow, RULES.sessionMinUsd),
    endUsersToday: store.boardSums({ grain: 'd', dims: ['end_user'], from: w.today, to: w.today }),
    endUsersPrior7d: store.boardSums({ grain: 'd', dims: ['end_user'], from: w.d8, to: w.yesterday }),
    tools30d: store.boardSums({ grain: 'd', dims: ['tool'], from: w.d30, to: w.today }),
    runs: store.boardSums({ grain: 'a', dims: ['run'], from: '', to: '', order: 'last_ts', limit: 50 }),
    runsHist: store.boardHist({ grain: 'a', dims: ['run'], from: '', to: '' }),
    authOutcomesToday: store.boardSums({ grain: 'd', dims: ['auth_outcome'], from: w.today, to: w.today }),
    authAddressesToday: store.boardSums({ grain: 'd', dims: ['auth_ip'], from: w.today, to: w.today, order: 'requests', limit: 10 }),
    latestAudit: store.listAudit(20),
    authBurstsLastHour: store.boardAuditSince(w.hourAgo, 10),
    recentRows: store.boardRecent(w.hourAgo, RECENT_LIMIT),
    snapshots: store.latestUsageSnapshots(),
  };
  for (const read of Object.values(reads)) read.catch(() => {});
  return reads;
}
export type SummaryReads = ReturnType<typeof startReads>;

export type Group = Sums & { first_ts: string; last_ts: string };

/** Sums of rows grouped by a function of the row (undefined: skip the row). */
export function group(rows: BoardSum[], by: (r: BoardSum) => string | undefined): Map<string, Group> {
  const out = new Map<string, Group>();
  for (const r of rows) {
    const k = by(r);
    if (k === undefined) continue;
    let g = out.get(k);
    if (!g) out.set(k, (g = { ...ZERO_SUMS, first_ts: r.first_ts, last_ts: r.last_ts }));
    addSums(g, r);
    if (r.first_ts < g.first_ts) g.first_ts = r.first_ts;
    if (r.last_ts > g.last_ts) g.last_ts = r.last_ts;
  }
  return out;
}

/** Percentiles of one (dim, key, metric) of histogram rows. */
export function hist(rows: BoardHistSum[], dim: string, key: string, metric: BoardMetric): T.Percentiles {
  const m = new Map<number, number>();
  for (const h of rows) if (h.dim === dim && h.key === key && h.metric === metric) m.set(h.idx, (m.get(h.idx) ?? 0) + h.n);
  return percentiles(m);
}

/**
 * The last 60 minutes from hourly rollups: this clock hour whole, plus the previous hour weighted
 * by the share of it still inside the window (at 12:15, three quarters of 11:00–12:00).
 */
export function lastHour(rows: BoardSum[], w: SummaryWindows) {
  const prevWeight = 1 - (w.now % HOUR) / HOUR;
  const weight = (r: BoardSum) => (r.bucket === w.hourNow ? 1 : prevWeight);
  return {
    sum(dim: string, key: string, field: 'requests' | 'errors' | 'cost_usd'): number {
      let v = 0;
      for (const r of rows) if (r.dim === dim && r.key === key) v += r[field] * weight(r);
      return v;
    },
    /** Keys of `dim` with a row in the window. */
    keys(dim: string): string[] {
      return [...new Set(rows.filter((r) => r.dim === dim).map((r) => r.key))];
    },
  };
}
export type LastHour = ReturnType<typeof lastHour>;
