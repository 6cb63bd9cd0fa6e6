// Summaries for the page's unit tests, typed as lib/board/types.ts says: `sample()` has every section
// filled, with markup in each value a client chooses (end users, session ids, model ids, run labels,
// tool names, addresses); `quietSummary()` is what an empty store answers (zeros, empty lists).

import type { Latency, Percentiles, RequestWindow, RoutingWindow, Summary } from '../../lib/board/types.ts';

export const NOW = '2026-11-24T09:30:00.000Z';
const now = Date.parse(NOW);
const iso = (msAgo: number) => new Date(now - msAgo).toISOString();

export const MARKUP = {
  endUser: '<script>alert(1)</script>',
  session: 'cc:<img src=x onerror=alert(5)>',
  model: '<img src=x onerror=alert(9)>',
  run: '<b>run</b>',
  tool: '<svg onload=alert(3)>',
  ip: '<i>203.0.113.9</i>',
  keyName: '<u>bob</u>',
};

const p = (p50: number | null, p95: number | null, p99: number | null): Percentiles => ({ p50, p95, p99 });
const NO_P = p(null, null, null);
const latency = (scale: number): Latency => ({ overhead_ms: p(0.4, 1.1, 2.3), ttfb_ms: p(420 * scale, 1300 * scale, 2900 * scale), duration_ms: p(2400, 9100, 31000) });

function window(since: string, total: number, scale = 1): RequestWindow {
  return {
    since, total, errors: Math.round(total * 0.03), cost_usd: total * 0.0125,
    by_endpoint: { chat: total - 112, messages: 112 },
    by_outcome: { ok: total - 12, upstream_error: 8, rate_limited: 4 },
    by_status_class: { '2xx': total - 13, '4xx': 4, '5xx': 8, other: 1 },
    latency: latency(scale),
  };
}

function routing(mult: number): RoutingWindow {
  return {
    by_tier: [{ tier: 'fast', requests: 200 * mult, cost_usd: 0.5 * mult }, { tier: 'agent', requests: 150 * mult, cost_usd: 4.25 * mult }, { tier: 'none', requests: 3 * mult, cost_usd: 0.01 * mult }],
    auto: [{ tier: 'fast', requests: 12 * mult, cost_usd: 0.003 * mult }],
    auto_decision_calls: { requests: 12 * mult, cost_usd: 0.0004 * mult },
    degraded: { requests: 4 * mult, fast_only: 3 * mult, max_tokens: 1 * mult },
    fallbacks: { requests: 2 * mult, ratio: 0.005 },
  };
}

export function sample(): Summary {
  const hours = Array.from({ length: 24 }, (_, i) => ({ hour: new Date(Math.floor(now / 3600e3) * 3600e3 - (23 - i) * 3600e3).toISOString(), requests: Math.round(20 + 15 * Math.sin(i / 3)), errors: i % 5 === 0 ? 1 : 0, cost_usd: 0.02 * i }));
  const days = Array.from({ length: 7 }, (_, i) => ({ day: new Date(now - (6 - i) * 86400e3).toISOString().slice(0, 10), requests: 100 + i * 30, errors: i, cost_usd: 1.2 * i }));
  const stats = (read: number, write = 1234) => ({ input_tokens: 200_000, cache_read_tokens: read, cache_write_tokens: write, hit_ratio: read / (200_000 + read + write), saved_usd: read * 2.7e-6 });
  return {
    version: '0.3.0', generated_at: NOW,
    spend: {
      total_day_usd: 5.4013, total_month_usd: 53.0013,
      profiles: [
        { profile: 'dev', day_usd: 3.2, month_usd: 41, daily_budget_usd: 5, monthly_budget_usd: 60, percent: 68.33, day_percent: 64, month_percent: 68.33, degradation: 'none', blocked: false, next_reset: '2026-11-25T00:00:00.000Z', day_reset: '2026-11-25T00:00:00.000Z', month_reset: '2026-12-01T00:00:00.000Z', burn_rate_usd_per_hour: 0.42, projected_exhaustion: '2026-11-24T13:40:00.000Z', router_day_usd: 3.212, ledger_day_usd: 3.2, drift_usd: 0.012, drifted: false, snapshot_at: iso(10 * 60e3), session_cap_usd: 2 },
        { profile: 'tiny', day_usd: 0.0013, month_usd: 0.0013, daily_budget_usd: 0.001, monthly_budget_usd: 0.02, percent: 130, day_percent: 130, month_percent: 6.5, degradation: 'max-tokens', blocked: true, next_reset: '2026-11-25T00:00:00.000Z', day_reset: '2026-11-25T00:00:00.000Z', month_reset: '2026-12-01T00:00:00.000Z', burn_rate_usd_per_hour: 0.0013, projected_exhaustion: null, router_day_usd: 0.9, ledger_day_usd: 0.0013, drift_usd: 0.8987, drifted: true, snapshot_at: iso(2 * 3600e3), session_cap_usd: null },
        { profile: 'assistant', day_usd: 2.2, month_usd: 12, daily_budget_usd: 3, monthly_budget_usd: 40, percent: 73.33, day_percent: 73.33, month_percent: 30, degradation: 'fast-only', blocked: false, next_reset: '2026-11-25T00:00:00.000Z', day_reset: '2026-11-25T00:00:00.000Z', month_reset: '2026-12-01T00:00:00.000Z', burn_rate_usd_per_hour: 0.1, projected_exhaustion: null, router_day_usd: null, ledger_day_usd: null, drift_usd: null, drifted: null, snapshot_at: null, session_cap_usd: null },
      ],
      keys: [
        { profile: 'dev', name: 'ci-runner', daily_usd: 0.5, monthly_usd: 5, day_usd: 0.52, month_usd: 3.1, day_percent: 104, month_percent: 62, percent: 104, stage: 'blocked', next_reset: '2026-11-25T00:00:00.000Z' },
        { profile: 'dev', name: MARKUP.keyName, daily_usd: 1, monthly_usd: null, day_usd: 0.75, month_usd: 4.2, day_percent: 75, month_percent: null, percent: 75, stage: 'fast-only', next_reset: '2026-11-25T00:00:00.000Z' },
      ],
      sessions_stopped: [
        { profile: 'dev', session: MARKUP.session, end_user: MARKUP.endUser, cost_usd: 2.1, cap_usd: 2, requests: 37, last_seen: iso(2 * 60e3) },
      ],
    },
    requests: {
      today: window('2026-11-24T00:00:00.000Z', 412), last_24h: window(iso(86400e3), 530, 1.1), last_7d: window(iso(7 * 86400e3), 1730), month: window('2026-11-01T00:00:00.000Z', 9120),
      by_hour: hours, by_day: days,
    },
    models: {
      today: [
        { model: 'anthropic/claude-sonnet-4.5', requests: 120, input_tokens: 123456, output_tokens: 34567, cache_read_tokens: 99999, cache_write_tokens: 1234, reasoning_tokens: 17, cost_usd: 3.21, share: 0.62 },
        { model: MARKUP.model, requests: 1, input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.0001, share: 0.0001 },
      ],
      month: [{ model: 'google/gemini-2.5-flash', requests: 4000, input_tokens: 9_000_000, output_tokens: 1_000_000, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 40.1, share: 0.8 }],
    },
    routing: { today: routing(1), month: { ...routing(20), by_tier: [...routing(20).by_tier, { tier: 'reasoning', requests: 7, cost_usd: 0.7 }] } },
    providers: {
      last_24h: [{ provider: 'Google', requests: 200, errors: 2, error_rate: 0.01, ttfb_ms: p(300, 900, 1500) }, { provider: 'unknown', requests: 3, errors: 3, error_rate: 1, ttfb_ms: NO_P }],
      last_7d: [{ provider: 'Anthropic', requests: 900, errors: 9, error_rate: 0.01, ttfb_ms: p(700, 1900, 3100) }],
    },
    cache: { profiles: [{ profile: 'dev', l2_cache: true, l2_cache_used: false, today: stats(99_999), month: stats(1_500_000) }, { profile: 'tiny', l2_cache: false, l2_cache_used: false, today: stats(0, 0), month: stats(0, 0) }] },
    health: {
      version: '0.3.0', status: 'degraded', uptime_s: 93784, started_at: iso(93784e3),
      store: { kind: 'sqlite', reachable: true, rows_written: 9120, rows_pending: 3 }, counters: { kind: 'redis', degraded: true }, rows_pending: 3, in_flight: 2,
      catalog: { sim: { refreshed_at: iso(30 * 60e3) }, backup: { refreshed_at: null } },
      usage_snapshots: [{ profile: 'dev', ts: iso(10 * 60e3), usage_daily: 3.212, usage_monthly: 41.3, limit_usd: 100, limit_remaining: 58.7, ledger_day_usd: 3.2, drift_usd: 0.012, drifted: false }, { profile: 'tiny', ts: iso(2 * 3600e3), usage_daily: 0.9, usage_monthly: 0.9, limit_usd: null, limit_remaining: null, ledger_day_usd: 0.0013, drift_usd: 0.8987, drifted: true }],
      key_cache_size: 4, reconcile: { pending: 1, reconciled: 40, abandoned: 0 },
      rollups: { backfill_done: false, backfill_rows: 5000, retention_days: 90, retention_deleted: 12 },
    },
    sessions: {
      active: [
        { profile: 'dev', session: MARKUP.session, end_user: MARKUP.endUser, tier: 'agent', requests: 14, cost_usd: 0.52, last_seen: iso(60e3) },
        { profile: 'dev', session: 'cc:4f1c2a8e-1b2c-4d5e-9f00-aaaaaaaaaaaa', end_user: 'cc:4f1c2a8e-1b2c-4d5e-9f00-aaaaaaaaaaaa', tier: 'agent', requests: 3, cost_usd: 0.02, last_seen: iso(5 * 60e3) },
      ],
      top_today: [{ profile: 'assistant', session: null, end_user: null, tier: 'none', requests: 40, cost_usd: 1.75, last_seen: iso(3 * 3600e3) }],
    },
    anomalies: [
      { kind: 'session_spend', subject: MARKUP.session, profile: 'dev', reason: 'spending 8× its usual', value: 8.1, threshold: 5 },
      { kind: 'auth_failure_burst', subject: MARKUP.ip, profile: null, reason: '21 failures in 10 minutes', value: 21, threshold: 10 },
      { kind: 'drift', subject: 'tiny', profile: 'tiny', reason: "the router's readout is above the ledger", value: 0.8987, threshold: 0.05 },
      { kind: 'budget_on_course', subject: 'dev', profile: 'dev', reason: 'on course to block before the reset', value: 131.2, threshold: 100 },
    ],
    auth_failures: {
      today: { missing_key: 3, unknown_key: 21, revoked: 0 }, total_today: 24,
      top_addresses: [{ ip: MARKUP.ip, failures: 21, blocked: true }, { ip: '192.0.2.7', failures: 3, blocked: false }],
      latest: [{ ts: iso(10 * 60e3), ip: MARKUP.ip, prefix: 'sluice_dev_…zzzz', outcome: 'unknown_key' }, { ts: iso(20 * 60e3), ip: '192.0.2.7', prefix: '', outcome: 'missing_key' }],
    },
    tool_logs: [{ name: MARKUP.tool, profile: 'dev', count: 3, last_seen: iso(20 * 60e3) }, { name: 'get_weather', profile: 'dev', count: 11, last_seen: iso(40 * 60e3) }],
    benchmark_runs: [
      { run: MARKUP.run, requests: 10, errors: 1, input_tokens: 1000, output_tokens: 500, cache_read_tokens: 40, cache_write_tokens: 8, reasoning_tokens: 5, cost_usd: 0.05, duration_ms: p(1200, 2000, 2500), ttfb_ms: p(300, 500, 700), first_seen: iso(90 * 60e3), last_seen: iso(85 * 60e3) },
      { run: 'baseline', requests: 4, errors: 0, input_tokens: 400, output_tokens: 100, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.01, duration_ms: NO_P, ttfb_ms: NO_P, first_seen: iso(5 * 86400e3), last_seen: iso(5 * 86400e3) },
    ],
  };
}

/** What an empty store answers: every key present, zeros and empty lists, one configured profile. */
export function quietSummary(): Summary {
  const s = sample();
  const w = (since: string): RequestWindow => ({ since, total: 0, errors: 0, cost_usd: 0, by_endpoint: {}, by_outcome: {}, by_status_class: {}, latency: { overhead_ms: NO_P, ttfb_ms: NO_P, duration_ms: NO_P } });
  const r: RoutingWindow = { by_tier: [], auto: [], auto_decision_calls: { requests: 0, cost_usd: 0 }, degraded: { requests: 0, fast_only: 0, max_tokens: 0 }, fallbacks: { requests: 0, ratio: 0 } };
  const dev = { ...s.spend.profiles[0], day_usd: 0, month_usd: 0, percent: 0, day_percent: 0, month_percent: 0, burn_rate_usd_per_hour: 0, projected_exhaustion: null, router_day_usd: null, ledger_day_usd: null, drift_usd: null, drifted: null, snapshot_at: null };
  return {
    version: '0.3.0', generated_at: NOW,
    spend: { profiles: [{ ...dev, session_cap_usd: null }], total_day_usd: 0, total_month_usd: 0, keys: [], sessions_stopped: [] },
    requests: {
      today: w('2026-11-24T00:00:00.000Z'), last_24h: w(iso(86400e3)), last_7d: w(iso(7 * 86400e3)), month: w('2026-11-01T00:00:00.000Z'),
      by_hour: s.requests.by_hour.map((h) => ({ ...h, requests: 0, errors: 0, cost_usd: 0 })), by_day: s.requests.by_day.map((d) => ({ ...d, requests: 0, errors: 0, cost_usd: 0 })),
    },
    models: { today: [], month: [] },
    routing: { today: r, month: r },
    providers: { last_24h: [], last_7d: [] },
    cache: { profiles: [] },
    health: { ...s.health, status: 'ok', catalog: {}, usage_snapshots: [], reconcile: null, rollups: { backfill_done: true, backfill_rows: 0, retention_days: null, retention_deleted: 0 } },
    sessions: { active: [], top_today: [] },
    anomalies: [],
    auth_failures: { today: { missing_key: 0, unknown_key: 0 }, total_today: 0, top_addresses: [], latest: [] },
    tool_logs: [],
    benchmark_runs: [],
  };
}
