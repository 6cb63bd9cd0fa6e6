// The board's summary (`GET /api/summary`, and the object `GET /` renders): one function per
// section, composed by computeSummary. They read the rollups for every window, the newest
// RECENT_LIMIT raw rows (the costliest requests), the budget counters, the usage snapshots and the
// health figures (./summary-reads.ts names every read; ./summary-traffic.ts has the traffic
// sections; ./summary-caps.ts the keys against their own caps and the sessions stopped at theirs).
// Its cost does not grow with the traffic of the current hour: "the last hour" is this clock hour's
// rollups plus the previous hour's, weighted by the share of it inside the last 60 minutes
// (docs/board.md). Read-only, UTC throughout, on the injected clock; it never puts a key,
// a key prefix of a request, an upstream key or any prompt text into what it returns.

import type { Admission } from '../admission.ts';
import { blockingResetAt, degradationFor, stageEffects, type Budget, type BudgetState } from '../budget.ts';
import type { Catalog } from '../catalog.ts';
import type { Config } from '../config.ts';
import { SEP } from '../store/rollups.ts';
import { AUDIT_OUTCOMES, type BoardSum, type Store, type UsageSnapshot } from '../store/store.ts';
import { anomalies } from './anomalies.ts';
import { cappedKeys, stoppedSessions } from './summary-caps.ts';
import { group, hist, lastHour, r6, startReads, summaryWindows, HOUR, type LastHour, type SummaryReads, type SummaryWindows } from './summary-reads.ts';
import { benchmarkRunsSection, cacheSection, modelsSection, providersSection, requestsSection, routingSection, toolLogsSection } from './summary-traffic.ts';
import type * as T from './types.ts';

export interface SummaryDeps {
  store: Store;
  config: Config;
  /** Each profile's state; a capped key's standing (view). */
  budget: Pick<Budget, 'state' | 'view'>;
  catalog: Pick<Catalog, 'prices'>;
  /** The IP block's state of an address. */
  admission: Pick<Admission, 'failures'>;
  keyCacheSize: () => number;
  /** The server's health record (what `GET /api/health` shows). */
  health: () => T.Health;
  /** Backfill and retention progress (lib/store/upkeep.ts). */
  maintenance: () => T.HealthSection['rollups'];
  now: () => number;
  /** When the process started, on the `now` clock (ms since the epoch). */
  startedAt: number;
  version: string;
  /** SLUICE_DRIFT_USD: shown as the drift anomaly's threshold. */
  driftUsd: number;
}

/** The configured profiles, and any other profile that spent this month, by name. */
function profileNames(config: Config, month: BoardSum[]): string[] {
  return [...new Set([...config.profiles.keys(), ...month.filter((r) => r.dim === 'profile').map((r) => r.key)])].sort();
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

function spendProfile(d: SummaryDeps, name: string, st: BudgetState | undefined, rollup: { day: number; month: number }, burn: number, snap: UsageSnapshot | undefined, w: SummaryWindows): T.SpendProfile {
  const budget = d.config.profiles.get(name)?.budget ?? { daily_usd: 0, monthly_usd: 0 };
  const day = st?.day_usd ?? rollup.day;
  const month = st?.month_usd ?? rollup.month;
  const pct = (v: number, b: number) => (b > 0 ? r6((100 * v) / b) : 0);
  const dayPct = pct(day, budget.daily_usd);
  const monthPct = pct(month, budget.monthly_usd);
  const percent = st?.percent ?? Math.max(dayPct, monthPct);
  // Without the counters' state, the stage the rollups' spend puts the profile in.
  const stage = stageEffects(degradationFor(percent));
  const blocked = st?.blocked ?? stage.blocked;
  const degradation = st?.degradation ?? stage.degradation;
  const left = budget.daily_usd - day;
  const out = burn > 0 && left > 0 ? w.now + (left / burn) * HOUR : undefined;
  return {
    profile: name, day_usd: r6(day), month_usd: r6(month), daily_budget_usd: budget.daily_usd, monthly_budget_usd: budget.monthly_usd,
    percent: r6(percent), day_percent: dayPct, month_percent: monthPct, degradation, blocked,
    next_reset: new Date(blockingResetAt(w, monthPct)).toISOString(),
    day_reset: new Date(w.dayEnd).toISOString(), month_reset: new Date(w.monthEnd).toISOString(),
    burn_rate_usd_per_hour: r6(burn),
    projected_exhaustion: out !== undefined && out < w.dayEnd && !blocked ? new Date(out).toISOString() : null,
    router_day_usd: snap?.usage_daily ?? null, ledger_day_usd: snap?.ledger_day_usd ?? null,
    drift_usd: snap?.drift_usd ?? null, drifted: snap?.drifted ?? null, snapshot_at: snap?.ts ?? null,
    session_cap_usd: d.config.profiles.get(name)?.session_daily_usd ?? null,
  };
}

async function spendSection(d: SummaryDeps, r: SummaryReads, w: SummaryWindows, profiles: string[], hour: LastHour): Promise<T.Spend> {
  const states = Promise.all(profiles.map((p) => budgetState(d, p)));
  const today = await r.today;
  const month = await r.month;
  const snapOf = new Map((await r.snapshots).map((s) => [s.profile, s]));
  const spendOf = (rows: BoardSum[], p: string) => rows.find((row) => row.dim === 'profile' && row.key === p)?.cost_usd ?? 0;
  const state = await states;
  const list = profiles.map((p, i) =>
    spendProfile(d, p, state[i], { day: spendOf(today, p), month: spendOf(month, p) }, hour.sum('profile', p, 'cost_usd'), snapOf.get(p), w));
  return {
    profiles: list, total_day_usd: r6(list.reduce((a, p) => a + p.day_usd, 0)), total_month_usd: r6(list.reduce((a, p) => a + p.month_usd, 0)),
    keys: await cappedKeys(d, await r.keys, await r.keysToday, await r.keysMonth, w),
    sessions_stopped: stoppedSessions(d.config, await r.sessionsToday),
  };
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

async function sessionsSection(r: SummaryReads, w: SummaryWindows): Promise<T.Sessions> {
  return {
    active: activeSessions(await r.lastHoursSessions, w.hourAgo),
    top_today: (await r.topSessionsToday).map((row) => sessionRow(row.key, row, row.note)),
  };
}

async function anomaliesSection(d: SummaryDeps, r: SummaryReads, w: SummaryWindows, hour: LastHour, spend: T.SpendProfile[]): Promise<T.Anomaly[]> {
  const tierStats = group(await r.last7d, (row) => (row.dim === 'tier' ? row.key : undefined));
  const prior = new Map((await r.endUsersPrior7d).map((row) => [row.key, row]));
  const hourHist = await r.lastHoursHist;
  const weekHist = await r.last7dHist;
  return anomalies({
    endUsers: (await r.endUsersToday).map((row) => {
      const [profile, end_user] = row.key.split(SEP);
      return { profile, end_user, today_usd: row.cost_usd, prior_usd: prior.get(row.key)?.cost_usd ?? 0, prior_days: prior.get(row.key)?.buckets ?? 0 };
    }),
    sessions: (await r.spendingSessions).map(({ key, ...spent }) => {
      const [profile, session, endUser] = key.split(SEP);
      return { profile, subject: session || endUser, ...spent, cap_usd: d.config.profiles.get(profile)?.session_daily_usd ?? null };
    }),
    profilesLastHour: hour.keys('profile').map((profile) => ({
      profile, requests: Math.round(hour.sum('profile', profile, 'requests')), errors: Math.round(hour.sum('profile', profile, 'errors')),
      rate_limited: Math.round(hour.sum('limited', profile, 'requests')),
    })),
    providers: hour.keys('provider').map((provider) => ({
      provider, requests_last_hour: Math.round(hour.sum('provider', provider, 'requests')),
      p95_last_hour: hist(hourHist, 'provider', provider, 't').p95, p95_7d: hist(weekHist, 'provider', provider, 't').p95,
    })),
    costly: (await r.recentRows).map((row) => {
      const tier = row.tier ?? 'none';
      const s = tierStats.get(tier);
      return { id: row.id, profile: row.profile, tier, cost_usd: row.cost_usd, tier_mean_usd: s && s.requests > 0 ? s.cost_usd / s.requests : 0, tier_requests: s?.requests ?? 0 };
    }).sort((a, b) => b.cost_usd - a.cost_usd).slice(0, 5),
    authBursts: await r.authBurstsLastHour,
    drift: (await r.snapshots).map((s) => ({ profile: s.profile, drift_usd: s.drift_usd, drifted: s.drifted, day: s.day, today: w.today, threshold_usd: d.driftUsd })),
    onCourse: spend,
  });
}

async function authFailuresSection(d: SummaryDeps, r: SummaryReads): Promise<T.AuthFailures> {
  const top = await r.authAddressesToday;
  const blocked = Promise.all(top.map((row) => d.admission.failures(row.key).then((v) => !v.allowed, () => false)));
  const outcomes = await r.authOutcomesToday;
  // Every outcome listed, zeros included; an outcome not (or no longer) listed still counts.
  const today: Record<string, number> = Object.fromEntries(AUDIT_OUTCOMES.map((o) => [o, 0]));
  for (const row of outcomes) today[row.key] = row.requests;
  const isBlocked = await blocked;
  return {
    today, total_today: outcomes.reduce((a, row) => a + row.requests, 0),
    top_addresses: top.map((row, i) => ({ ip: row.key, failures: row.requests, blocked: isBlocked[i] })),
    latest: (await r.latestAudit).map((a) => ({ ts: a.ts, ip: a.ip, prefix: a.prefix, outcome: a.outcome })),
  };
}

function healthSection(d: SummaryDeps, now: number, snapshots: UsageSnapshot[]): T.HealthSection {
  const h = d.health();
  return {
    version: d.version, status: h.status, uptime_s: Math.round((now - d.startedAt) / 1000),
    started_at: new Date(d.startedAt).toISOString(),
    store: { ...h.store }, counters: { ...h.counters },
    rows_pending: h.store.rows_pending, in_flight: h.in_flight,
    catalog: h.catalog,
    usage_snapshots: snapshots.map((s) => ({ profile: s.profile, ts: s.ts, usage_daily: s.usage_daily, usage_monthly: s.usage_monthly, limit_usd: s.limit_usd, limit_remaining: s.limit_remaining, ledger_day_usd: s.ledger_day_usd, drift_usd: s.drift_usd, drifted: s.drifted })),
    key_cache_size: d.keyCacheSize(),
    // ring 1 keeps these counts in memory (its health()); counting them here would scan rows
    reconcile: h.reconcile ? { ...h.reconcile } : null,
    rollups: d.maintenance(),
  };
}

export async function computeSummary(d: SummaryDeps): Promise<T.Summary> {
  const w = summaryWindows(d.now());
  const r = startReads(d.store, w);
  const hour = lastHour(await r.lastHours, w);
  const profiles = profileNames(d.config, await r.month);
  const spend = await spendSection(d, r, w, profiles, hour);
  return {
    version: d.version,
    generated_at: new Date(w.now).toISOString(),
    spend,
    requests: await requestsSection(r, w),
    models: await modelsSection(r),
    routing: await routingSection(d.config, r),
    providers: await providersSection(r),
    cache: await cacheSection(d.config, d.catalog, r, profiles),
    health: healthSection(d, w.now, await r.snapshots),
    sessions: await sessionsSection(r, w),
    anomalies: await anomaliesSection(d, r, w, hour, spend.profiles),
    auth_failures: await authFailuresSection(d, r),
    tool_logs: await toolLogsSection(r),
    benchmark_runs: await benchmarkRunsSection(r),
  };
}
