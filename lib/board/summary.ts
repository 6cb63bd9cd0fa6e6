// The board's summary (`GET /api/summary`, and the object `GET /` renders): one function reading
// the rollups for every window, the newest RECENT_LIMIT raw rows (the costliest requests), the
// budget counters, the usage snapshots and the health figures. Its cost does not grow with the
// traffic of the current hour: "the last hour" is this clock hour's rollups plus the previous
// hour's, weighted by the share of it inside the last 60 minutes (docs/board.md). Read-only, UTC
// throughout; it never puts a key, a key prefix of a request, an upstream key or any prompt text
// into what it returns.

import { authFailureState } from '../../plugins/ip-block.ts';
import type { Budget, BudgetState } from '../budget.ts';
import type { Catalog } from '../catalog.ts';
import type { Config } from '../config.ts';
import type { Counters } from '../counters/counters.ts';
import type { BoardHistSum, BoardSum, Store, UsageSnapshot } from '../store/store.ts';
import { anomalies, RULES, type AnomalyInput } from './anomalies.ts';
import { AUTO_MODEL, percentiles, SEP, statusClass, ZERO_SUMS, type Sums } from '../store/rollups.ts';
import type * as T from './types.ts';

export interface SummaryDeps {
  store: Store;
  config: Config;
  budget: Pick<Budget, 'state'>;
  catalog: Pick<Catalog, 'prices'>;
  counters: Counters;
  keyCacheSize: () => number;
  /** The server's health record (what `GET /api/health` shows). */
  health: () => Record<string, unknown>;
  /** Backfill and retention progress (lib/board/retention.ts). */
  maintenance: () => T.Health['rollups'];
  now: () => number;
  startedAt: number;
  version: string;
  /** SLUICE_DRIFT_USD: shown as the drift anomaly's threshold. */
  driftUsd: number;
}

const AUDIT_OUTCOMES = ['missing_key', 'malformed_key', 'unknown_key', 'revoked_key', 'expired_key', 'ip_not_allowed', 'revoked_by_admin'];
const HOUR = 3_600_000;
const DAY = 86_400_000;
/** The newest raw rows read (the costliest requests of the last hour are looked for among them). */
const RECENT_LIMIT = 1_000;

const dayOf = (ms: number) => new Date(ms).toISOString().slice(0, 10);
const hourOf = (ms: number) => new Date(ms).toISOString().slice(0, 13);
/** Rounds away float noise (sums of many small costs), keeping nano-dollar precision. */
const r6 = (v: number) => Math.round(v * 1e9) / 1e9;

function addSums(into: Sums, s: Sums): void {
  for (const k of Object.keys(ZERO_SUMS) as Array<keyof Sums>) into[k] += s[k];
}

/** Sums of rows grouped by a function of the row (undefined: skip the row). */
function group(rows: BoardSum[], by: (r: BoardSum) => string | undefined): Map<string, Sums & { last_ts: string; first_ts: string }> {
  const out = new Map<string, Sums & { last_ts: string; first_ts: string }>();
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

function hist(rows: BoardHistSum[], dim: string, key: string, metric: 'o' | 't' | 'd'): T.Percentiles {
  const m = new Map<number, number>();
  for (const h of rows) if (h.dim === dim && h.key === key && h.metric === metric) m.set(h.idx, (m.get(h.idx) ?? 0) + h.n);
  return percentiles(m);
}

/** One window's figures from its rollup rows (already summed over the window by the store). */
function requestWindow(inside: BoardSum[], h: BoardHistSum[], since: string): T.RequestWindow {
  const count = (dim: string, key: (k: string) => string = (k) => k) =>
    Object.fromEntries([...group(inside, (r) => (r.dim === dim ? key(r.key) : undefined))].map(([k, s]) => [k, s.requests]));
  const all = group(inside, (r) => (r.dim === 'all' ? '' : undefined)).get('') ?? { ...ZERO_SUMS };
  return {
    since, total: all.requests, errors: all.errors, cost_usd: r6(all.cost_usd),
    by_endpoint: count('endpoint'), by_outcome: count('outcome'), by_status_class: count('status', (k) => statusClass(Number(k))),
    latency: { overhead_ms: hist(h, 'all', '', 'o'), ttfb_ms: hist(h, 'all', '', 't'), duration_ms: hist(h, 'all', '', 'd') },
  };
}

function modelRows(rows: BoardSum[]): T.ModelRow[] {
  const g = group(rows, (r) => (r.dim === 'pmodel' ? r.key.split(SEP)[1] : undefined));
  const total = [...g.values()].reduce((a, s) => a + s.cost_usd, 0);
  return [...g].map(([model, s]) => ({
    model, requests: s.requests, input_tokens: s.input_tokens, output_tokens: s.output_tokens, cache_read_tokens: s.cache_read_tokens,
    cache_write_tokens: s.cache_write_tokens, reasoning_tokens: s.reasoning_tokens, cost_usd: r6(s.cost_usd), share: total > 0 ? r6(s.cost_usd / total) : 0,
  })).sort((a, b) => b.cost_usd - a.cost_usd || b.requests - a.requests);
}

/** The model sluice asked the router for, given how the row was routed (fallbacks: docs/rewrites.md). */
function isFallback(config: Config, tier: string, degradation: string, requested: string, served: string): boolean {
  if (served === '') return false;
  const t = config.tiers.get(degradation === 'fast-only' ? 'fast' : tier);
  if (t) return served !== t.model && t.fallbacks.includes(served);
  const asked = tier === 'auto-decision' ? config.auto.decision_model : requested;
  const norm = (m: string) => m.toLowerCase().replace(/:[a-z-]+$/, '').replace(/-\d{8}$/, '');
  return asked !== '' && asked !== AUTO_MODEL && norm(asked) !== norm(served);
}

function routing(config: Config, inside: BoardSum[]): T.RoutingWindow {
  const list = (dim: string) =>
    [...group(inside, (r) => (r.dim === dim ? r.key : undefined))].map(([tier, s]) => ({ tier, requests: s.requests, cost_usd: r6(s.cost_usd) }))
      .sort((a, b) => b.requests - a.requests);
  const by_tier = list('tier');
  const deg = group(inside, (r) => (r.dim === 'degradation' ? r.key : undefined));
  let fallbacks = 0;
  let routed = 0;
  for (const r of inside) {
    if (r.dim !== 'route') continue;
    const [tier, degradation, requested, served] = r.key.split(SEP);
    routed += r.requests;
    if (isFallback(config, tier, degradation, requested, served)) fallbacks += r.requests;
  }
  const decision = by_tier.find((t) => t.tier === 'auto-decision');
  return {
    by_tier, auto: list('auto'),
    auto_decision_calls: { requests: decision?.requests ?? 0, cost_usd: decision?.cost_usd ?? 0 },
    degraded: {
      requests: (deg.get('fast-only')?.requests ?? 0) + (deg.get('max-tokens')?.requests ?? 0),
      fast_only: deg.get('fast-only')?.requests ?? 0, max_tokens: deg.get('max-tokens')?.requests ?? 0,
    },
    fallbacks: { requests: fallbacks, ratio: routed > 0 ? r6(fallbacks / routed) : 0 },
  };
}

function providerRows(rows: BoardSum[], h: BoardHistSum[]): T.ProviderRow[] {
  return [...group(rows, (r) => (r.dim === 'provider' ? r.key : undefined))].map(([provider, s]) => ({
    provider, requests: s.requests, errors: s.errors, error_rate: s.requests > 0 ? r6(s.errors / s.requests) : 0, ttfb_ms: hist(h, 'provider', provider, 't'),
  })).sort((a, b) => b.requests - a.requests);
}

function cacheStats(d: SummaryDeps, profile: string, rows: BoardSum[]): T.CacheStats {
  const router = d.config.profiles.get(profile)?.router;
  const s = { ...ZERO_SUMS };
  let saved = 0;
  for (const r of rows) {
    if (r.dim !== 'pmodel') continue;
    const [p, model] = r.key.split(SEP);
    if (p !== profile) continue;
    addSums(s, r);
    const prices = router ? d.catalog.prices(router, model) : undefined;
    const tier = [...d.config.tiers.values()].find((t) => t.model === model);
    // The catalog's cache-read price when it lists a discount; otherwise cache reads are assumed
    // at 10 % of the input price (catalog, else the tier's).
    const input = prices?.prompt ?? (tier ? tier.price.input_per_mtok / 1e6 : 0);
    const read = prices && prices.cacheRead < prices.prompt ? prices.cacheRead : 0.1 * input;
    saved += r.cache_read_tokens * Math.max(0, input - read);
  }
  const prompt = s.input_tokens + s.cache_read_tokens + s.cache_write_tokens;
  return { input_tokens: s.input_tokens, cache_read_tokens: s.cache_read_tokens, cache_write_tokens: s.cache_write_tokens, hit_ratio: prompt > 0 ? r6(s.cache_read_tokens / prompt) : 0, saved_usd: r6(saved) };
}

function sessionRow(key: string, s: { requests: number; cost_usd: number; last_ts: string }, tier: string): T.SessionRow {
  const [profile, session, end_user] = key.split(SEP);
  return { profile, session: session || null, end_user: end_user || null, tier: tier || 'none', requests: s.requests, cost_usd: r6(s.cost_usd), last_seen: s.last_ts };
}

/**
 * The 50 sessions seen most recently, within the last 60 minutes, each with its requests and cost
 * in the clock hour it was last seen (its newest hourly rollup row).
 */
function activeSessions(newest: BoardSum[], hourAgo: string): T.SessionRow[] {
  const seen = new Set<string>();
  const out: T.SessionRow[] = [];
  for (const r of newest) { // newest first
    if (r.last_ts < hourAgo || seen.has(r.key)) continue;
    seen.add(r.key);
    out.push(sessionRow(r.key, r, r.note || 'none'));
  }
  return out.slice(0, 50);
}

/**
 * The last 60 minutes from hourly rollups: this clock hour whole, plus the previous hour weighted
 * by the share of it still inside the window (at 12:15, three quarters of 11:00–12:00).
 */
function lastHour(rows: BoardSum[], hourNow: string, now: number) {
  const prevWeight = 1 - (now % HOUR) / HOUR;
  const weight = (r: BoardSum) => (r.bucket === hourNow ? 1 : prevWeight);
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

async function budgetState(d: SummaryDeps, name: string): Promise<BudgetState | undefined> {
  const profile = d.config.profiles.get(name);
  if (!profile) return undefined;
  try {
    return await d.budget.state(profile);
  } catch {
    return undefined; // counters away: the spend row falls back to the rollups
  }
}

function spendProfile(d: SummaryDeps, name: string, st: BudgetState | undefined, rollup: { day: number; month: number }, burn: number, snap: UsageSnapshot | undefined, now: number): T.SpendProfile {
  const budget = d.config.profiles.get(name)?.budget ?? { daily_usd: 0, monthly_usd: 0 };
  const day = st?.day_usd ?? rollup.day;
  const month = st?.month_usd ?? rollup.month;
  const pct = (v: number, b: number) => (b > 0 ? r6((100 * v) / b) : 0);
  const dayPct = pct(day, budget.daily_usd);
  const monthPct = pct(month, budget.monthly_usd);
  const percent = st?.percent ?? Math.max(dayPct, monthPct);
  const dayReset = Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth(), new Date(now).getUTCDate()) + DAY;
  const monthReset = Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth() + 1, 1);
  const blocked = st?.blocked ?? percent >= 100;
  const degradation = st?.degradation ?? (percent >= 85 ? 'max-tokens' : percent >= 70 ? 'fast-only' : 'none');
  const left = budget.daily_usd - day;
  const out = burn > 0 && left > 0 ? now + (left / burn) * HOUR : undefined;
  return {
    profile: name, day_usd: r6(day), month_usd: r6(month), daily_budget_usd: budget.daily_usd, monthly_budget_usd: budget.monthly_usd,
    percent: r6(percent), day_percent: dayPct, month_percent: monthPct, degradation, blocked,
    next_reset: new Date(monthPct >= 100 ? monthReset : dayReset).toISOString(),
    day_reset: new Date(dayReset).toISOString(), month_reset: new Date(monthReset).toISOString(),
    burn_rate_usd_per_hour: r6(burn),
    projected_exhaustion: out !== undefined && out < dayReset && !blocked ? new Date(out).toISOString() : null,
    router_day_usd: snap?.usage_daily ?? null, ledger_day_usd: snap?.ledger_day_usd ?? null,
    drift_usd: snap?.drift_usd ?? null, drifted: snap?.drifted ?? null, snapshot_at: snap?.ts ?? null,
  };
}

export async function computeSummary(d: SummaryDeps): Promise<T.Summary> {
  const now = d.now();
  const { store } = d;
  const today = dayOf(now);
  const hourNow = hourOf(now);
  const hourPrev = hourOf(now - HOUR);
  const h24 = hourOf(now - 23 * HOUR);
  const monthFrom = `${today.slice(0, 8)}01`;
  const d7 = dayOf(now - 6 * DAY);
  const d8 = dayOf(now - 7 * DAY);
  const d30 = dayOf(now - 29 * DAY);
  const hourAgo = new Date(now - HOUR).toISOString();

  const D_DIMS = ['all', 'endpoint', 'outcome', 'status', 'profile', 'pmodel', 'tier', 'auto', 'degradation', 'route', 'provider'];
  const H_DIMS = ['all', 'endpoint', 'outcome', 'status', 'provider'];
  // Each window summed by the store: a few hundred rows back, whatever the request count.
  const [hRows, hSeries, dToday, d7Rows, dMonth, dSeries, hHist, todayHist, d7Hist, monthHist, topSessions, spendingSessions, endUsersToday, endUsersPrior, tools, runs, runHist, authToday, authTop, audit, bursts, recent, snaps, hourRows, hourSessions, hourHist] = await Promise.all([
    store.boardSums({ grain: 'h', dims: H_DIMS, from: h24, to: hourNow }),
    store.boardSums({ grain: 'h', dims: ['all'], from: h24, to: hourNow, byBucket: true }),
    store.boardSums({ grain: 'd', dims: D_DIMS, from: today, to: today }),
    store.boardSums({ grain: 'd', dims: D_DIMS, from: d7, to: today }),
    store.boardSums({ grain: 'd', dims: D_DIMS, from: monthFrom, to: today }),
    store.boardSums({ grain: 'd', dims: ['all'], from: d7, to: today, byBucket: true }),
    store.boardHist({ grain: 'h', dims: ['all', 'provider'], from: h24, to: hourNow }),
    store.boardHist({ grain: 'd', dims: ['all'], from: today, to: today }),
    store.boardHist({ grain: 'd', dims: ['all', 'provider'], from: d7, to: today }),
    store.boardHist({ grain: 'd', dims: ['all'], from: monthFrom, to: today }),
    // One bucket: its rows are the totals already (no grouping, whatever the number of sessions).
    store.boardSums({ grain: 'd', dims: ['session'], from: today, to: today, byBucket: true, order: 'cost_usd', limit: 10 }),
    // Only the sessions that spent enough this hour to be an anomaly are judged against their own earlier hours.
    store.boardActiveSessions(hourNow, RULES.sessionMinUsd),
    store.boardSums({ grain: 'd', dims: ['end_user'], from: today, to: today }),
    store.boardSums({ grain: 'd', dims: ['end_user'], from: d8, to: dayOf(now - DAY) }),
    store.boardSums({ grain: 'd', dims: ['tool'], from: d30, to: today }),
    store.boardSums({ grain: 'a', dims: ['run'], from: '', to: '', order: 'last_ts', limit: 50 }),
    store.boardHist({ grain: 'a', dims: ['run'], from: '', to: '' }),
    store.boardSums({ grain: 'd', dims: ['auth_outcome'], from: today, to: today }),
    store.boardSums({ grain: 'd', dims: ['auth_ip'], from: today, to: today, order: 'requests', limit: 10 }),
    store.listAudit(20),
    store.boardAuditSince(hourAgo, 10),
    store.boardRecent(hourAgo, RECENT_LIMIT),
    store.latestUsageSnapshots(),
    store.boardSums({ grain: 'h', dims: ['profile', 'limited', 'provider'], from: hourPrev, to: hourNow, byBucket: true }),
    // The newest rows only, no grouping: the cost stays flat however many sessions the hour holds.
    store.boardSums({ grain: 'h', dims: ['session'], from: hourPrev, to: hourNow, byBucket: true, order: 'last_ts', limit: 100 }),
    store.boardHist({ grain: 'h', dims: ['provider'], from: hourPrev, to: hourNow }),
  ]);
  const hour = lastHour(hourRows, hourNow, now);

  // spend
  const profileNames = [...new Set([...d.config.profiles.keys(), ...dMonth.filter((r) => r.dim === 'profile').map((r) => r.key)])].sort();
  const spendOf = (rows: BoardSum[], p: string) => rows.find((r) => r.dim === 'profile' && r.key === p)?.cost_usd ?? 0;
  const states = await Promise.all(profileNames.map((p) => budgetState(d, p)));
  const snapOf = new Map(snaps.map((s) => [s.profile, s]));
  const spendProfiles = profileNames.map((p, i) => {
    const rollup = { day: spendOf(dToday, p), month: spendOf(dMonth, p) };
    const burn = hour.sum('profile', p, 'cost_usd');
    return spendProfile(d, p, states[i], rollup, burn, snapOf.get(p), now);
  });

  // requests
  const byHour = group(hSeries, (r) => r.bucket);
  const byDay = group(dSeries, (r) => r.bucket);
  const point = (s: Sums | undefined) => ({ requests: s?.requests ?? 0, errors: s?.errors ?? 0, cost_usd: r6(s?.cost_usd ?? 0) });
  const requests: T.Requests = {
    today: requestWindow(dToday, todayHist, `${today}T00:00:00.000Z`),
    last_24h: requestWindow(hRows, hHist, `${h24}:00:00.000Z`),
    last_7d: requestWindow(d7Rows, d7Hist, `${d7}T00:00:00.000Z`),
    month: requestWindow(dMonth, monthHist, `${monthFrom}T00:00:00.000Z`),
    by_hour: Array.from({ length: 24 }, (_, i) => hourOf(now - (23 - i) * HOUR)).map((h) => ({ hour: `${h}:00:00.000Z`, ...point(byHour.get(h)) })),
    by_day: Array.from({ length: 7 }, (_, i) => dayOf(now - (6 - i) * DAY)).map((day) => ({ day, ...point(byDay.get(day)) })),
  };

  // sessions and anomalies' inputs
  const tierStats = group(d7Rows, (r) => (r.dim === 'tier' ? r.key : undefined));
  const prior = new Map(endUsersPrior.map((r) => [r.key, r]));
  const input: AnomalyInput = {
    endUsers: endUsersToday.map((r) => {
      const [profile, end_user] = r.key.split(SEP);
      return { profile, end_user, today_usd: r.cost_usd, prior_usd: prior.get(r.key)?.cost_usd ?? 0, prior_days: prior.get(r.key)?.buckets ?? 0 };
    }),
    sessions: spendingSessions.map(({ key, ...spend }) => {
      const [profile, session, endUser] = key.split(SEP);
      return { profile, subject: session || endUser, ...spend };
    }),
    profilesLastHour: hour.keys('profile').map((profile) => ({
      profile, requests: Math.round(hour.sum('profile', profile, 'requests')), errors: Math.round(hour.sum('profile', profile, 'errors')),
      rate_limited: Math.round(hour.sum('limited', profile, 'requests')),
    })),
    providers: hour.keys('provider').map((provider) => ({
      provider, requests_last_hour: Math.round(hour.sum('provider', provider, 'requests')),
      p95_last_hour: hist(hourHist, 'provider', provider, 't').p95, p95_7d: hist(d7Hist, 'provider', provider, 't').p95,
    })),
    costly: recent.map((r) => {
      const tier = r.tier ?? 'none';
      const s = tierStats.get(tier);
      return { id: r.id, profile: r.profile, tier, cost_usd: r.cost_usd, tier_mean_usd: s && s.requests > 0 ? s.cost_usd / s.requests : 0, tier_requests: s?.requests ?? 0 };
    }).sort((a, b) => b.cost_usd - a.cost_usd).slice(0, 5),
    authBursts: bursts,
    drift: snaps.map((s) => ({ profile: s.profile, drift_usd: s.drift_usd, drifted: s.drifted, day: s.day, today, threshold_usd: d.driftUsd })),
    onCourse: spendProfiles,
  };

  // auth failures
  const blocked = await Promise.all(authTop.map((r) => authFailureState(d.counters, r.key).then((v) => !v.allowed, () => false)));
  const outcomes = Object.fromEntries(AUDIT_OUTCOMES.map((o) => [o, 0]));
  for (const r of authToday) outcomes[r.key] = r.requests;

  const h = d.health() as Record<string, any>;
  return {
    version: d.version,
    generated_at: new Date(now).toISOString(),
    spend: { profiles: spendProfiles, total_day_usd: r6(spendProfiles.reduce((a, p) => a + p.day_usd, 0)), total_month_usd: r6(spendProfiles.reduce((a, p) => a + p.month_usd, 0)) },
    requests,
    models: { today: modelRows(dToday), month: modelRows(dMonth) },
    routing: { today: routing(d.config, dToday), month: routing(d.config, dMonth) },
    providers: { last_24h: providerRows(hRows, hHist), last_7d: providerRows(d7Rows, d7Hist) },
    cache: {
      profiles: profileNames.map((p) => ({
        profile: p, l2_cache: d.config.profiles.get(p)?.l2_cache ?? false, l2_cache_used: false as const,
        today: cacheStats(d, p, dToday), month: cacheStats(d, p, dMonth),
      })),
    },
    health: {
      version: d.version, status: h.status === 'degraded' ? 'degraded' : 'ok', uptime_s: Math.round((Date.now() - d.startedAt) / 1000),
      started_at: new Date(d.startedAt).toISOString(),
      store: { kind: String(h.store?.kind ?? store.kind), reachable: h.store?.reachable !== false, rows_written: Number(h.store?.rows_written ?? 0), rows_pending: Number(h.store?.rows_pending ?? 0) },
      counters: { kind: String(h.counters?.kind ?? d.counters.kind), degraded: h.counters?.degraded === true },
      rows_pending: Number(h.store?.rows_pending ?? 0), in_flight: Number(h.in_flight ?? 0),
      catalog: (h.catalog ?? {}) as Record<string, { refreshed_at: string | null }>,
      usage_snapshots: snaps.map((s) => ({ profile: s.profile, ts: s.ts, usage_daily: s.usage_daily, usage_monthly: s.usage_monthly, limit_usd: s.limit_usd, limit_remaining: s.limit_remaining, ledger_day_usd: s.ledger_day_usd, drift_usd: s.drift_usd, drifted: s.drifted })),
      key_cache_size: d.keyCacheSize(),
      // ring 1 keeps these counts in memory (its health()); counting them here would scan rows
      reconcile: h.reconcile ? { pending: Number(h.reconcile.pending ?? 0), reconciled: Number(h.reconcile.reconciled ?? 0), abandoned: Number(h.reconcile.abandoned ?? 0) } : null,
      rollups: d.maintenance(),
    },
    sessions: {
      active: activeSessions(hourSessions, hourAgo),
      top_today: topSessions.map((r) => sessionRow(r.key, r, r.note)),
    },
    anomalies: anomalies(input),
    auth_failures: {
      today: outcomes, total_today: authToday.reduce((a, r) => a + r.requests, 0),
      top_addresses: authTop.map((r, i) => ({ ip: r.key, failures: r.requests, blocked: blocked[i] })),
      latest: audit.map((a) => ({ ts: a.ts, ip: a.ip, prefix: a.prefix, outcome: a.outcome })),
    },
    tool_logs: [...group(tools, (r) => r.key)].map(([k, s]) => {
      const [profile, name] = k.split(SEP);
      return { name, profile, count: s.requests, last_seen: s.last_ts };
    }).sort((a, b) => b.count - a.count || a.name.localeCompare(b.name)),
    benchmark_runs: runs.map((r) => ({
      run: r.key, requests: r.requests, errors: r.errors, input_tokens: r.input_tokens, output_tokens: r.output_tokens,
      cache_read_tokens: r.cache_read_tokens, cache_write_tokens: r.cache_write_tokens, reasoning_tokens: r.reasoning_tokens, cost_usd: r6(r.cost_usd),
      duration_ms: hist(runHist, 'run', r.key, 'd'), ttfb_ms: hist(runHist, 'run', r.key, 't'), first_seen: r.first_ts, last_seen: r.last_ts,
    })),
  };
}
