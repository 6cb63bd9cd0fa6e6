// The shapes of the board's JSON: `GET /api/health` (Health, what the server's health() returns)
// and `GET /api/summary` (Summary: exactly these top-level keys, each always present, even on an
// empty store). The board page renders the summary. Times are ISO-8601 UTC strings, money is USD,
// latencies are milliseconds. Only fields are added here, never renamed or removed. Nothing in
// either is ever a key, a key secret, an upstream key or prompt text.

import type { BudgetStage } from '../budget.ts';
import type { UpkeepState } from '../store/upkeep.ts';
import type { Counters } from '../counters/counters.ts';
import type { Degradation, ReconcileCounts, Store, TokenCounts } from '../store/store.ts';
import type { UpstreamLoops } from '../upstream/index.ts';

/** Percentiles from merged log-scale histogram buckets; null when no request had the value. */
export interface Percentiles {
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

/** A profile's spend against its budgets (today UTC and this UTC month). */
export interface SpendProfile {
  profile: string;
  day_usd: number;
  month_usd: number;
  daily_budget_usd: number;
  monthly_budget_usd: number;
  /** max(day %, month %) — the figure degradation follows. */
  percent: number;
  day_percent: number;
  month_percent: number;
  /** At 100 % the profile is `blocked` and its degradation stays max-tokens. */
  degradation: Degradation;
  blocked: boolean;
  /** When the blocking window resets: next 00:00 UTC, or the 1st of next month when the month is spent. */
  next_reset: string;
  day_reset: string;
  month_reset: string;
  /** Spend of the last 60 minutes (USD per hour). */
  burn_rate_usd_per_hour: number;
  /** When the daily budget runs out at that pace (null: no burn, already out, or after the day's reset). */
  projected_exhaustion: string | null;
  /** From the newest usage snapshot of the profile (null when there is none). */
  router_day_usd: number | null;
  ledger_day_usd: number | null;
  drift_usd: number | null;
  drifted: boolean | null;
  snapshot_at: string | null;
  /** The profile's cap per session and UTC day (`session_daily_usd`); null: sessions are not capped. */
  session_cap_usd: number | null;
}

/** A key with caps of its own (keys without caps draw on their profile's budget only and have no entry). */
export interface SpendKey {
  profile: string;
  /** The key's name (`sluice keys create --name`): never the key or its prefix. */
  name: string;
  /** Its caps (null: none for that window). */
  daily_usd: number | null;
  monthly_usd: number | null;
  day_usd: number;
  month_usd: number;
  /** Of each cap (null: no cap for that window). */
  day_percent: number | null;
  month_percent: number | null;
  /** The higher of the two: the figure its stage follows. */
  percent: number;
  /** Its own stage; its requests are handled at the higher of this and its profile's. */
  stage: BudgetStage;
  /** When the window its percentage is of resets (blocked: when the block ends). */
  next_reset: string;
}

/** A session whose spend today reached its profile's cap per session: its requests are refused until 00:00 UTC. */
export interface StoppedSession {
  profile: string;
  session: string;
  end_user: string | null;
  cost_usd: number;
  cap_usd: number;
  requests: number;
  last_seen: string;
}

export interface Spend {
  profiles: SpendProfile[];
  total_day_usd: number;
  total_month_usd: number;
  /** Active keys with caps of their own, most spent (of its cap) first. */
  keys: SpendKey[];
  /** Today's sessions at their profile's session cap, costliest first. */
  sessions_stopped: StoppedSession[];
}

/** Requests in one window. Status classes: '2xx' | '3xx' | '4xx' | '5xx' | 'other'. */
export interface RequestWindow {
  /** The window's first instant (inclusive) and end (exclusive: now). */
  since: string;
  total: number;
  errors: number;
  cost_usd: number;
  by_endpoint: Record<string, number>;
  by_outcome: Record<string, number>;
  by_status_class: Record<string, number>;
  latency: Latency;
}

export interface Latency {
  overhead_ms: Percentiles;
  ttfb_ms: Percentiles;
  duration_ms: Percentiles;
}

export interface HourPoint {
  hour: string;
  requests: number;
  errors: number;
  cost_usd: number;
}

export interface DayPoint {
  day: string;
  requests: number;
  errors: number;
  cost_usd: number;
}

export interface Requests {
  today: RequestWindow;
  last_24h: RequestWindow;
  last_7d: RequestWindow;
  month: RequestWindow;
  /** The last 24 hours, hour by hour, oldest first (24 points, zeros included). */
  by_hour: HourPoint[];
  /** The last 7 UTC days, oldest first (7 points, today last, zeros included). */
  by_day: DayPoint[];
}

export interface ModelRow extends TokenCounts {
  model: string;
  requests: number;
  cost_usd: number;
  /** This model's cost / the window's total cost (0 when nothing was spent). */
  share: number;
}

/** Per served model, most expensive first. */
export interface Models {
  today: ModelRow[];
  month: ModelRow[];
}

export interface RoutingWindow {
  /** Requests per tier ('none' for a model asked by id; 'auto-decision' for sluice/auto's decision calls). */
  by_tier: Array<{ tier: string; requests: number; cost_usd: number }>;
  /** Requests that asked for `sluice/auto`, per tier decided, with their cost. */
  auto: Array<{ tier: string; requests: number; cost_usd: number }>;
  /** The decision calls themselves (tier 'auto-decision'). */
  auto_decision_calls: { requests: number; cost_usd: number };
  /** Requests rewritten by budget degradation, per stage. */
  degraded: { requests: number; fast_only: number; max_tokens: number };
  /** Requests whose served model differs from the model sluice asked for (router fallbacks). */
  fallbacks: { requests: number; ratio: number };
}

export interface Routing {
  today: RoutingWindow;
  month: RoutingWindow;
}

export interface ProviderRow {
  provider: string;
  requests: number;
  errors: number;
  /** errors / requests (outcome other than ok). */
  error_rate: number;
  ttfb_ms: Percentiles;
}

/** Per serving provider ('unknown' when the upstream did not say), busiest first. */
export interface Providers {
  last_24h: ProviderRow[];
  last_7d: ProviderRow[];
}

export interface CacheStats {
  input_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  /** cache_read / (input + cache_read + cache_write). */
  hit_ratio: number;
  /** Cache read tokens priced at the input price minus the cache-read price (catalog, else tier, else 10 %). */
  saved_usd: number;
}

export interface CacheProfile {
  profile: string;
  /** The profile's `l2_cache` setting: read from profiles.yaml and shown; nothing caches. */
  l2_cache: boolean;
  l2_cache_used: false;
  today: CacheStats;
  month: CacheStats;
}

export interface Cache {
  profiles: CacheProfile[];
}

export interface HealthSnapshot {
  profile: string;
  ts: string;
  usage_daily: number;
  usage_monthly: number;
  limit_usd: number | null;
  limit_remaining: number | null;
  ledger_day_usd: number;
  drift_usd: number;
  drifted: boolean;
}

/**
 * What `GET /api/health` shows: the gateway's own figures, as the server's health() gathers them
 * (the load balancer's `/health?details` shows only `status`).
 */
export interface Health {
  /** 'degraded' while the store or the shared counters are away (rows merely queued are normal). */
  status: 'ok' | 'degraded';
  /** package.json's version. */
  version: string;
  uptime_s: number;
  store: { kind: Store['kind']; reachable: boolean; rows_written: number; rows_pending: number };
  counters: { kind: Counters['kind']; degraded: boolean };
  /** Per router: when its model catalog was last refreshed (null: never). */
  catalog: Record<string, { refreshed_at: string | null }>;
  /** HTTP requests being answered now. */
  in_flight: number;
  /** The connection caps, and the connections closed on arrival at each. */
  connections: { max: number; max_per_address: number; refused: { per_address: number; global: number } };
  /** Ring 1's cost reconciliation counts; absent from a health record made without its loops. */
  reconcile?: ReconcileCounts;
  /** Ring 1's usage refresh; absent likewise. */
  usage?: ReturnType<UpstreamLoops['health']>['usage'];
}

/** The summary's health section: the gateway's figures (Health) with the board's own. */
export interface HealthSection extends Pick<Health, 'version' | 'status' | 'uptime_s' | 'store' | 'counters' | 'in_flight' | 'catalog'> {
  started_at: string;
  /** Rows queued or spooled, not yet in the store (Health's store.rows_pending). */
  rows_pending: number;
  /** The newest usage snapshot per profile. */
  usage_snapshots: HealthSnapshot[];
  /** Client keys (and unknown hashes) held by the key cache. */
  key_cache_size: number;
  /** Cost reconciliation counts (rows waiting for, given, or abandoned by the router's cost); null without ring 1. */
  reconcile: ReconcileCounts | null;
  /** Rollup backfill progress and raw-row retention. */
  rollups: UpkeepState;
}

export interface SessionRow {
  profile: string;
  /** `x-sluice-session` / Claude Code session id (null: none). */
  session: string | null;
  /** End user (`cc:<session>` for Claude Code). */
  end_user: string | null;
  /** Tier of its latest request ('none' when a model id was asked). */
  tier: string;
  requests: number;
  cost_usd: number;
  last_seen: string;
}

export interface Sessions {
  /** Seen in the last hour, latest first. */
  active: SessionRow[];
  /** Today's most expensive sessions / end users (top 10). */
  top_today: SessionRow[];
}

export type AnomalyKind =
  | 'end_user_spend'
  | 'session_spend'
  | 'error_burst'
  | 'rate_limited_burst'
  | 'provider_ttfb'
  | 'costly_request'
  | 'auth_failure_burst'
  | 'drift'
  | 'budget_on_course';

export interface Anomaly {
  kind: AnomalyKind;
  /** What it is about: a profile, end user, session, provider, address or request id. */
  subject: string;
  profile: string | null;
  /** A sentence an operator reads. */
  reason: string;
  /** The measured figure and the threshold it crossed (same unit). */
  value: number;
  threshold: number;
}

export interface AuthFailures {
  /** Today's failures per outcome (every outcome listed, zeros included). */
  today: Record<string, number>;
  total_today: number;
  /** Today's addresses with most failures (top 10), and whether each is blocked now. */
  top_addresses: Array<{ ip: string; failures: number; blocked: boolean }>;
  /** The latest 20 failures, newest first. */
  latest: Array<{ ts: string; ip: string; prefix: string; outcome: string }>;
}

/** Tools models called in the last 30 days: name, profile, calls, last seen — never arguments. */
export interface ToolLog {
  name: string;
  profile: string;
  count: number;
  last_seen: string;
}

/** Per `x-sluice-run` label (all time, latest 50 by last seen). */
export interface BenchmarkRun extends TokenCounts {
  run: string;
  requests: number;
  errors: number;
  cost_usd: number;
  duration_ms: Percentiles;
  ttfb_ms: Percentiles;
  first_seen: string;
  last_seen: string;
}

export interface Summary {
  version: string;
  generated_at: string;
  spend: Spend;
  requests: Requests;
  models: Models;
  routing: Routing;
  providers: Providers;
  cache: Cache;
  health: HealthSection;
  sessions: Sessions;
  anomalies: Anomaly[];
  auth_failures: AuthFailures;
  tool_logs: ToolLog[];
  benchmark_runs: BenchmarkRun[];
}

/** The summary's top-level keys, in order. */
export const SUMMARY_KEYS = [
  'version', 'generated_at', 'spend', 'requests', 'models', 'routing', 'providers', 'cache',
  'health', 'sessions', 'anomalies', 'auth_failures', 'tool_logs', 'benchmark_runs',
] as const satisfies ReadonlyArray<keyof Summary>;
