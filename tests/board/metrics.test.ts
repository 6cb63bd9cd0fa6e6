// The metrics of lib/board/metrics.ts without a gateway: labels bounded by configuration, a scrape
// that never waits long on a stalled or failing budget read, usage snapshots turned into gauges,
// streams counted until their connection closes, the budgets and the time left in their UTC windows.

import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import t from 'tap';
import type { BudgetState } from '../../lib/budget.ts';
import type { Config, Profile } from '../../lib/config.ts';
import { createMetrics, type MetricsSources } from '../../lib/board/metrics.ts';
import { AUTH_FAILURE_OUTCOMES, type RequestRow, type UsageSnapshot } from '../../lib/store/store.ts';
import { parseMetrics, sumOf } from '../helpers/prom-text.ts';

function profile(name: string, daily: number, monthly: number): Profile {
  return { name, default_tier: 'fast', router: 'r', budget: { daily_usd: daily, monthly_usd: monthly }, l2_cache: false, rate_limits: { per_key_per_minute: 60, per_user_per_minute: 10 } };
}

/** 2025-03-31 18:00 UTC: six hours left in the day, and in the month (its last day). */
const NOW = Date.UTC(2025, 2, 31, 18);

const config: Config = {
  dir: '/nowhere',
  routers: new Map([['r', { name: 'r', url: new URL('http://127.0.0.1:9') }]]),
  profiles: new Map([['dev', profile('dev', 10, 100)], ['ops', profile('ops', 1, 10)]]),
  tiers: new Map([['fast', { name: 'fast', model: 'm/fast', fallbacks: [], price: { input_per_mtok: 1, output_per_mtok: 2 }, max_output_tokens: 100 }]]),
  auto: { decision_model: 'm/d', ladder: ['fast'], session_ttl_minutes: 60, decision_timeout_ms: 1000 },
};

function state(day: number, month: number, degradation: BudgetState['degradation'], blocked = false): BudgetState {
  return { day_usd: day, month_usd: month, percent: 0, degradation, blocked, retryAfterS: 3600, dayResetAt: 0, monthResetAt: 0 };
}

function row(o: Partial<RequestRow> = {}): RequestRow {
  return {
    id: 'x', ts: new Date(0).toISOString(), endpoint: 'chat', profile: 'dev', key_prefix: 'sluice_dev_…abcd', end_user: 'eve-end-user-7', session: 's', run: null,
    tier: 'fast', requested_model: 'm/fast', model: 'm/fast', stream: false, status: 200, outcome: 'ok',
    input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.5, cost_source: 'upstream',
    provider: 'P', degradation: 'none', generation_id: null, ttfb_ms: 120, duration_ms: 900, overhead_ms: 0.4, tools: [], ...o,
  };
}

function sources(o: Partial<MetricsSources> = {}): MetricsSources {
  return {
    config,
    budget: { state: async (p: Profile) => (p.name === 'dev' ? state(2.5, 10, 'none') : state(0.9, 5, 'max-tokens', true)), now: () => NOW },
    store: {},
    recorder: { pending: 3, storeDown: true },
    counters: { degraded: true },
    inFlight: () => 7,
    version: '9.9.9',
    ...o,
  };
}

const value = (text: string, name: string, labels: Record<string, string> = {}) => sumOf(parseMetrics(text), name, labels);

t.test('rows: bounded labels, tokens, cost and histograms', async (t) => {
  const m = createMetrics(sources());
  t.teardown(() => m.close());
  m.row(row());
  m.row(row({ profile: 'ghost', tier: 'made-up', endpoint: 'weird' as RequestRow['endpoint'], outcome: 'odd' as RequestRow['outcome'], status: 0, cost_usd: 0, ttfb_ms: null, overhead_ms: null, input_tokens: 0, output_tokens: 0 }));
  m.row(row({ tier: 'auto-decision', cache_read_tokens: 7, reasoning_tokens: 3, cache_write_tokens: 2 }));
  m.row(row({ tier: null, model: 'free/form', status: 502, outcome: 'upstream_error' }));
  const { body, contentType } = await m.scrape();
  t.match(contentType, /^text\/plain/);
  t.equal(value(body, 'sluice_requests_total'), 4);
  t.equal(value(body, 'sluice_requests_total', { route: 'other', profile: 'other', tier: 'none', outcome: 'other', status_class: 'other' }), 1, 'unknown values fall into bounded buckets');
  t.equal(value(body, 'sluice_requests_total', { tier: 'auto-decision' }), 1);
  t.equal(value(body, 'sluice_requests_total', { tier: 'none', status_class: '5xx', outcome: 'upstream_error' }), 1);
  t.equal(value(body, 'sluice_cost_usd_total', { profile: 'dev' }), 1.5);
  t.equal(value(body, 'sluice_tokens_total', { profile: 'dev', kind: 'input' }), 30);
  t.equal(value(body, 'sluice_tokens_total', { kind: 'cache_read' }), 7);
  t.equal(value(body, 'sluice_tokens_total', { kind: 'cache_write' }), 2);
  t.equal(value(body, 'sluice_tokens_total', { kind: 'reasoning' }), 3);
  t.equal(value(body, 'sluice_ttfb_seconds_count'), 3);
  t.equal(value(body, 'sluice_overhead_seconds_count'), 3);
  t.equal(value(body, 'sluice_request_duration_seconds_count'), 4);
  t.equal(value(body, 'sluice_request_duration_seconds_bucket', { le: '1', route: 'chat', tier: 'fast' }), 1, '0.9 s falls in the 1 s bucket');
  t.notOk(body.includes('free/form'), 'a free-form model is no label');
  t.notOk(body.includes('eve-end-user-7') || body.includes('abcd'), 'no end user, no key prefix');
});

t.test('auth failures, refusals, streams and health gauges', async (t) => {
  const m = createMetrics(sources());
  t.teardown(() => m.close());
  m.authFailure('unknown_key');
  m.refusal('chat', 'dev', 'rate_limit_exceeded');
  m.refusal(undefined, undefined, 'not_found');
  m.refusal('elsewhere', 'ghost', 'budget_exhausted');
  const res = new EventEmitter() as unknown as ServerResponse;
  m.trackStream(res);
  m.trackStream(new EventEmitter() as unknown as ServerResponse);
  let body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_auth_failures_total', { outcome: 'unknown_key' }), 1);
  t.equal(value(body, 'sluice_auth_failures_total', { outcome: 'missing_key' }), 0, 'every outcome starts at zero');
  t.strictSame(parseMetrics(body).filter((s) => s.name === 'sluice_auth_failures_total').map((s) => s.labels.outcome).sort(), [...AUTH_FAILURE_OUTCOMES].sort(), 'one series per auth failure outcome');
  t.equal(value(body, 'sluice_refusals_total', { route: 'chat', profile: 'dev', code: 'rate_limit_exceeded' }), 1);
  t.equal(value(body, 'sluice_refusals_total', { route: 'other', profile: 'none', code: 'not_found' }), 1);
  t.equal(value(body, 'sluice_refusals_total', { route: 'other', profile: 'other', code: 'budget_exhausted' }), 1);
  t.equal(value(body, 'sluice_in_flight_streams'), 2);
  res.emit('close');
  body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_in_flight_streams'), 1, 'a closed stream is no longer counted');
  t.equal(value(body, 'sluice_in_flight_requests'), 7);
  t.equal(value(body, 'sluice_rows_pending'), 3);
  t.equal(value(body, 'sluice_store_up'), 0);
  t.equal(value(body, 'sluice_counters_up'), 0);
  t.equal(value(body, 'sluice_build_info', { version: '9.9.9' }), 1);
  t.equal(value(body, 'sluice_budget_spend_ratio', { profile: 'dev', window: 'day' }), 0.25);
  t.equal(value(body, 'sluice_budget_spend_ratio', { profile: 'dev', window: 'month' }), 0.1);
  t.equal(value(body, 'sluice_budget_degradation_stage', { profile: 'dev' }), 0);
  t.equal(value(body, 'sluice_budget_degradation_stage', { profile: 'ops' }), 3, 'blocked is stage 3');
  t.ok(parseMetrics(body).some((s) => s.name === 'sluice_event_loop_delay_max_seconds'));
  for (const route of ['chat', 'messages', 'count_tokens', 'responses', 'models']) {
    t.ok(parseMetrics(body).some((s) => s.name === 'sluice_refusals_total' && s.labels.route === route && s.labels.profile === 'none' && s.labels.code === 'ip_blocked'), `${route}: the ip_blocked refusals start at zero`);
  }
  t.equal(value(body, 'sluice_refusals_total', { code: 'ip_blocked' }), 0);
  // The budget's refusals start at zero per profile on the routes the budget applies to: the first key or session stopped is an increase.
  for (const code of ['budget_exhausted', 'key_budget_exhausted', 'session_budget_exhausted']) {
    const series = parseMetrics(body).filter((s) => s.name === 'sluice_refusals_total' && s.labels.code === code).map((s) => `${s.labels.route}/${s.labels.profile}`).sort();
    const want = ['chat', 'messages', 'responses'].flatMap((r) => ['dev', 'ops'].map((p) => `${r}/${p}`));
    t.strictSame(series, code === 'budget_exhausted' ? [...want, 'other/other'].sort() : want.sort(), `${code}: one series per generative route and profile`);
  }
  t.equal(value(body, 'sluice_refusals_total', { code: 'key_budget_exhausted' }), 0);
});

t.test('the budgets in USD and the time left in their UTC windows, on the budget clock', async (t) => {
  const clock = { now: NOW };
  const m = createMetrics(sources({ budget: { state: async () => state(0, 0, 'none'), now: () => clock.now } }));
  t.teardown(() => m.close());
  let body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_budget_usd', { profile: 'dev', window: 'day' }), 10);
  t.equal(value(body, 'sluice_budget_usd', { profile: 'dev', window: 'month' }), 100);
  t.equal(value(body, 'sluice_budget_usd', { profile: 'ops', window: 'day' }), 1);
  t.equal(value(body, 'sluice_budget_usd', { profile: 'ops', window: 'month' }), 10);
  t.equal(value(body, 'sluice_budget_window_seconds_left', { window: 'day' }), 6 * 3600);
  t.equal(value(body, 'sluice_budget_window_seconds_left', { window: 'month' }), 6 * 3600, 'the last day of March: the month ends with the day');
  clock.now += 6 * 3600 * 1000 + 500;
  body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_budget_window_seconds_left', { window: 'day' }), 86_399.5, 'a new day, half a second in');
  t.equal(value(body, 'sluice_budget_window_seconds_left', { window: 'month' }), 30 * 86_400 - 0.5, 'April has thirty days');
  t.strictSame(parseMetrics(body).filter((s) => s.name === 'sluice_budget_window_seconds_left').map((s) => s.labels), [{ window: 'day' }, { window: 'month' }], 'one series per window, no profile');
});

t.test('usage snapshots become the remaining-limit and drift gauges', async (t) => {
  const snap = (o: Partial<UsageSnapshot>): UsageSnapshot => ({
    profile: 'dev', ts: '', day: '', label: null, limit_usd: 50, limit_remaining: 12.5, limit_reset: null, usage: 0, usage_daily: 0,
    usage_weekly: 0, usage_monthly: 0, ledger_day_usd: 0, drift_usd: -0.25, drifted: false, ...o,
  });
  let snapshots = [snap({}), snap({ profile: 'ops', limit_remaining: null, drift_usd: 0 }), snap({ profile: 'removed', limit_remaining: 1 })];
  const m = createMetrics(sources({ store: { latestUsageSnapshots: async () => snapshots } }));
  t.teardown(() => m.close());
  let body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_upstream_limit_remaining_usd', { profile: 'dev' }), 12.5);
  t.notOk(parseMetrics(body).some((s) => s.name === 'sluice_upstream_limit_remaining_usd' && s.labels.profile !== 'dev'), 'no limit, or a profile not configured: no series');
  t.equal(value(body, 'sluice_upstream_drift_usd', { profile: 'dev' }), -0.25);
  snapshots = [snap({ limit_remaining: 3 })];
  body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_upstream_limit_remaining_usd', { profile: 'dev' }), 3, 'the latest snapshot wins');
});

t.test('a stalled or failing budget read never holds the scrape', async (t) => {
  let release!: () => void;
  const stalled = new Promise<void>((resolve) => (release = resolve));
  let reads = 0;
  let fail = false;
  const m = createMetrics(sources({
    collectTimeoutMs: 50,
    budget: {
      now: () => NOW,
      async state() {
        reads++;
        if (fail) throw new Error('redis gone');
        await stalled;
        return state(1, 1, 'fast-only');
      },
    },
  }));
  t.teardown(() => m.close());
  const started = performance.now();
  let body = (await m.scrape()).body;
  t.ok(performance.now() - started < 1000, 'the scrape answered while the read stalls');
  t.equal(value(body, 'sluice_metrics_collect_failures_total'), 1);
  t.notOk(parseMetrics(body).some((s) => s.name === 'sluice_budget_spend_ratio'), 'no budget value known yet');
  body = (await m.scrape()).body;
  t.equal(reads, 2, 'a second scrape shares the read still under way (one per profile)');
  t.equal(value(body, 'sluice_metrics_collect_failures_total'), 2);
  release();
  body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_budget_degradation_stage', { profile: 'dev' }), 1, 'once the read completes its values show');
  fail = true;
  body = (await m.scrape()).body;
  t.equal(value(body, 'sluice_metrics_collect_failures_total'), 3, 'a failed read counts');
  t.equal(value(body, 'sluice_budget_degradation_stage', { profile: 'dev' }), 1, 'and the last values stay');
});
