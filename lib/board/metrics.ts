// The Prometheus metrics of one gateway (`GET /metrics`): its own prom-client Registry, the hooks
// the server calls as rows are recorded, auth fails and errors are rendered, and the gauges read
// once per scrape, among them what the alerting rules (systemd/prometheus/sluice-alerts.yml) need to
// project a budget's end: each budget in USD and the seconds left in the UTC day and month. Labels
// are bounded by configuration (profiles, tiers, routes, catalogue codes): never a key, prefix, end
// user, session, IP or free-form model id. Recording a row is a map lookup plus a few additions to
// plain numbers (./tallies.ts); a scrape never waits more than `collectTimeoutMs` on the budget
// counters.

import { ALL_V1, GENERATIVE, isRoute } from '../routes.ts';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { collectDefaultMetrics, Counter, Gauge, Registry } from 'prom-client';
import { BUDGET_STAGES, windows, type Budget } from '../budget.ts';
import type { Config } from '../config.ts';
import type { ErrorCode } from '../errors.ts';
import { statusClass } from '../store/rollups.ts';
import { AUTH_FAILURE_OUTCOMES, OUTCOMES, type AuditOutcome, type RequestRow, type Store } from '../store/store.ts';
import { registerTraceMetrics } from '../trace/metrics.ts';
import { CounterFamily, HistogramFamily, type CounterCell, type HistogramCell } from './tallies.ts';

export interface MetricsSources {
  config: Config;
  /** Budget states per profile, and the clock the UTC windows follow. */
  budget: Pick<Budget, 'state' | 'now'>;
  store: Partial<Pick<Store, 'latestUsageSnapshots'>>;
  recorder: { readonly pending: number; readonly storeDown: boolean };
  counters: { readonly degraded: boolean };
  /** HTTP requests being answered right now (the server's count). */
  inFlight: () => number;
  version: string;
  /** Longest a scrape waits for budget states and usage snapshots; older values are shown after (default 1 s). */
  collectTimeoutMs?: number;
}

const OUTCOME_LABELS = new Set<string>(OUTCOMES);
/** The refusals of the budget step (plugins/budget.ts). */
const BUDGET_REFUSALS = ['budget_exhausted', 'key_budget_exhausted', 'session_budget_exhausted'] as const satisfies readonly ErrorCode[];
const TOKEN_KINDS = ['input', 'output', 'cache_read', 'cache_write', 'reasoning'] as const;
// sluice's own time before forwarding is sub-millisecond normally; upstream times run to minutes.
const OVERHEAD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1];
const UPSTREAM_BUCKETS = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300];
const DURATION_BUCKETS = [0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600];

/** The children one label combination of a row touches, created on first use and kept. */
interface RowChildren {
  requests: CounterCell;
  cost: CounterCell;
  tokens: CounterCell[];
  overhead: HistogramCell;
  ttfb: HistogramCell;
  duration: HistogramCell;
}

export function createMetrics(src: MetricsSources) {
  const registry = new Registry();
  registerTraceMetrics(registry); // spans dropped on their way to the collector (0 while tracing is off)
  const registers = [registry];
  const profiles = new Set(src.config.profiles.keys());
  const tiers = new Set([...src.config.tiers.keys(), 'auto-decision']);
  const profileLabel = (p: string | null | undefined) => (p && profiles.has(p) ? p : 'other');
  const tierLabel = (t: string | null | undefined) => (t && tiers.has(t) ? t : 'none');

  // The per-row families: plain numbers until a scrape (./tallies.ts).
  const requests = new CounterFamily({ name: 'sluice_requests_total', help: 'Proxied requests recorded, by route, profile, tier, outcome and status class.', labelNames: ['route', 'profile', 'tier', 'outcome', 'status_class'], registry });
  const tokens = new CounterFamily({ name: 'sluice_tokens_total', help: 'Tokens of recorded requests, by profile, tier and kind.', labelNames: ['profile', 'tier', 'kind'], registry });
  const cost = new CounterFamily({ name: 'sluice_cost_usd_total', help: 'Cost of recorded requests in USD, by profile and tier.', labelNames: ['profile', 'tier'], registry });
  const overhead = new HistogramFamily({ name: 'sluice_overhead_seconds', help: 'Time spent in sluice before the request went upstream.', labelNames: ['route'], buckets: OVERHEAD_BUCKETS, registry });
  const ttfb = new HistogramFamily({ name: 'sluice_ttfb_seconds', help: 'Time from the request to the first byte of the upstream response.', labelNames: ['route', 'tier'], buckets: UPSTREAM_BUCKETS, registry });
  const duration = new HistogramFamily({ name: 'sluice_request_duration_seconds', help: 'Time from the request to the end of its response.', labelNames: ['route', 'tier'], buckets: DURATION_BUCKETS, registry });
  const authFailures = new Counter({ name: 'sluice_auth_failures_total', help: 'Authentication failures (auth chain steps 2-5), by outcome.', labelNames: ['outcome'], registers });
  for (const o of AUTH_FAILURE_OUTCOMES) authFailures.labels(o).inc(0);
  const connectionsRefused = new Counter({ name: 'sluice_connections_refused_total', help: 'Connections closed on arrival because a connection cap was reached, by cap: per_address or global.', labelNames: ['cap'], registers });
  for (const c of ['per_address', 'global']) connectionsRefused.labels(c).inc(0);
  const refusals = new Counter({ name: 'sluice_refusals_total', help: "Requests sluice answered with its own error (ip_blocked, rate_limit_exceeded, budget_exhausted, ...), by route, profile and code.", labelNames: ['route', 'profile', 'code'], registers });
  // The IP block's refusals as its first step makes them (before any key is read: profile none)
  // start at zero on every route, so the first refusal is an increase a rule sees, not a series
  // that appears at 1.
  for (const r of ALL_V1) refusals.labels(r, 'none', 'ip_blocked').inc(0);
  // The budget's refusals (a profile's budget, a key's cap, a session's cap) likewise, per profile on
  // the routes the budget applies to: a first key or session stopped is an increase too.
  for (const r of GENERATIVE) for (const p of profiles) for (const code of BUDGET_REFUSALS) refusals.labels(r, p, code).inc(0);

  const spendRatio = new Gauge({ name: 'sluice_budget_spend_ratio', help: "Spend over budget (1 = the budget), per profile and window.", labelNames: ['profile', 'window'], registers });
  const stage = new Gauge({ name: 'sluice_budget_degradation_stage', help: `Degradation stage per profile: ${BUDGET_STAGES.map((name, i) => `${i} ${name}`).join(', ')}.`, labelNames: ['profile'], registers });
  const limitRemaining = new Gauge({ name: 'sluice_upstream_limit_remaining_usd', help: "The upstream key's remaining limit in USD at the latest usage snapshot, per profile.", labelNames: ['profile'], registers });
  const drift = new Gauge({ name: 'sluice_upstream_drift_usd', help: "Ledger minus the router's daily usage at the latest usage snapshot, per profile.", labelNames: ['profile'], registers });
  const budgetUsd = new Gauge({ name: 'sluice_budget_usd', help: 'The configured budget in USD, per profile and window (day or month).', labelNames: ['profile', 'window'], registers });
  for (const p of src.config.profiles.values()) {
    budgetUsd.labels(p.name, 'day').set(p.budget.daily_usd);
    budgetUsd.labels(p.name, 'month').set(p.budget.monthly_usd);
  }
  new Gauge({
    name: 'sluice_budget_window_seconds_left', help: 'Seconds until the current UTC budget window (day or month) ends.', labelNames: ['window'], registers,
    collect() {
      const now = src.budget.now();
      const w = windows(now);
      this.labels('day').set((w.dayEnd - now) / 1000);
      this.labels('month').set((w.monthEnd - now) / 1000);
    },
  });
  const collectFailures = new Counter({ name: 'sluice_metrics_collect_failures_total', help: 'Scrapes that showed older budget or usage values because reading them failed or took too long.', registers });
  let streams = 0;
  new Gauge({ name: 'sluice_in_flight_requests', help: 'HTTP requests being answered now.', registers, collect() { this.set(src.inFlight()); } });
  new Gauge({ name: 'sluice_in_flight_streams', help: 'Streamed proxied requests open now.', registers, collect() { this.set(streams); } });
  new Gauge({ name: 'sluice_rows_pending', help: 'Request rows queued or spooled, not yet in the store.', registers, collect() { this.set(src.recorder.pending); } });
  new Gauge({ name: 'sluice_store_up', help: '1 while the last write to the store succeeded.', registers, collect() { this.set(src.recorder.storeDown ? 0 : 1); } });
  new Gauge({ name: 'sluice_counters_up', help: '1 while the shared counters (Redis) are reachable, 0 while in-process limits stand in.', registers, collect() { this.set(src.counters.degraded ? 0 : 1); } });
  new Gauge({ name: 'sluice_build_info', help: 'The running version of sluice.', labelNames: ['version'], registers }).labels(src.version).set(1);
  // Delay since the previous scrape: reset after each one, so a stall shows in the scrape after it.
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  new Gauge({ name: 'sluice_event_loop_delay_p99_seconds', help: 'p99 event-loop delay since the previous scrape.', registers, collect() { this.set(loop.count ? loop.percentile(99) / 1e9 : 0); } });
  new Gauge({ name: 'sluice_event_loop_delay_max_seconds', help: 'Longest event-loop delay since the previous scrape.', registers, collect() { this.set(loop.count ? loop.max / 1e9 : 0); loop.reset(); } });
  collectDefaultMetrics({ register: registry });
  // Gauges that prom-client names like counters (promtool rejects a `_total` gauge); their
  // by-type siblings (nodejs_active_handles, ...) stay.
  for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total']) registry.removeSingleMetric(name);

  const children = new Map<string, RowChildren>();
  function rowChildren(route: string, profile: string, tier: string, outcome: string, cls: string): RowChildren {
    const k = `${route}\0${profile}\0${tier}\0${outcome}\0${cls}`;
    let c = children.get(k);
    if (!c) {
      children.set(k, (c = {
        requests: requests.cell(route, profile, tier, outcome, cls),
        cost: cost.cell(profile, tier),
        tokens: TOKEN_KINDS.map((kind) => tokens.cell(profile, tier, kind)),
        overhead: overhead.cell(route),
        ttfb: ttfb.cell(route, tier),
        duration: duration.cell(route, tier),
      }));
    }
    return c;
  }

  /** Budget states and usage snapshots, read once per scrape; a slow read leaves the last values. */
  let reading: Promise<void> | undefined;
  async function readState(): Promise<void> {
    const states = await Promise.all([...src.config.profiles.values()].map(async (p) => [p, await src.budget.state(p)] as const));
    for (const [p, s] of states) {
      spendRatio.labels(p.name, 'day').set(s.day_usd / p.budget.daily_usd);
      spendRatio.labels(p.name, 'month').set(s.month_usd / p.budget.monthly_usd);
      stage.labels(p.name).set(BUDGET_STAGES.indexOf(s.blocked ? 'blocked' : s.degradation));
    }
    const snapshots = src.store.latestUsageSnapshots ? await src.store.latestUsageSnapshots() : [];
    limitRemaining.reset();
    drift.reset();
    for (const s of snapshots) {
      if (!profiles.has(s.profile)) continue;
      if (s.limit_remaining !== null) limitRemaining.labels(s.profile).set(s.limit_remaining);
      drift.labels(s.profile).set(s.drift_usd);
    }
  }
  async function refresh(): Promise<void> {
    // One read at a time: scrapes against a stalled Redis must not pile reads up behind it.
    reading ??= readState().finally(() => (reading = undefined));
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      reading.then(() => true, () => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(resolve, src.collectTimeoutMs ?? 1000, false))),
    ]);
    clearTimeout(timer);
    if (!ok) collectFailures.inc();
  }

  return {
    registry,
    /** One recorded row (every row passes the server's record()). */
    row(row: RequestRow): void {
      const tier = tierLabel(row.tier);
      const c = rowChildren(isRoute(row.endpoint) ? row.endpoint : 'other', profileLabel(row.profile), tier, OUTCOME_LABELS.has(row.outcome) ? row.outcome : 'other', statusClass(row.status));
      c.requests.value += 1;
      if (row.cost_usd > 0) c.cost.value += row.cost_usd;
      if (row.input_tokens > 0) c.tokens[0].value += row.input_tokens;
      if (row.output_tokens > 0) c.tokens[1].value += row.output_tokens;
      if (row.cache_read_tokens > 0) c.tokens[2].value += row.cache_read_tokens;
      if (row.cache_write_tokens > 0) c.tokens[3].value += row.cache_write_tokens;
      if (row.reasoning_tokens > 0) c.tokens[4].value += row.reasoning_tokens;
      if (row.overhead_ms !== null) overhead.observe(c.overhead, row.overhead_ms / 1000);
      if (row.ttfb_ms !== null) ttfb.observe(c.ttfb, row.ttfb_ms / 1000);
      duration.observe(c.duration, row.duration_ms / 1000);
    },
    authFailure(outcome: AuditOutcome): void {
      authFailures.labels(outcome).inc();
    },
    /** sluice answered with its own error (the server renders it). */
    refusal(route: string | undefined, profile: string | undefined, code: ErrorCode): void {
      refusals.labels(route && isRoute(route) ? route : 'other', profile ? profileLabel(profile) : 'none', code).inc();
    },
    /** A connection closed on arrival: its address (or the whole server) was at a connection cap. */
    connectionRefused(cap: 'per_address' | 'global'): void {
      connectionsRefused.labels(cap).inc();
    },
    /** Counts a streamed response as open until its connection closes. */
    trackStream(res: ServerResponse): void {
      streams++;
      res.once('close', () => streams--);
    },
    /** The text format, with the budget and usage gauges read for this scrape. */
    async scrape(): Promise<{ contentType: string; body: string }> {
      await refresh();
      return { contentType: registry.contentType, body: await registry.metrics() };
    },
    close(): void {
      loop.disable();
    },
  };
}

export type Metrics = ReturnType<typeof createMetrics>;

/** `GET|HEAD /metrics`: the text format, never cached; no client key (the front proxy guards it). */
export function metricsRoute(metrics: Metrics) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const { contentType, body } = await metrics.scrape();
    res.writeHead(200, { 'content-type': contentType, 'cache-control': 'no-store', 'content-length': Buffer.byteLength(body) });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
}
