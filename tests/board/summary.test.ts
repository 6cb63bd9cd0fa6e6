// The summary computed from real stores (SQLite and Postgres) with a fixed clock: the empty store
// answers every section with zeros, and a handful of hand-made rows give exactly the figures each
// section should show. The anomaly rules and histogram percentiles are checked on their own too.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { Admission } from '../../lib/admission.ts';
import { computeSummary, type SummaryDeps } from '../../lib/board/summary.ts';
import { SUMMARY_KEYS } from '../../lib/board/types.ts';
import { Budget } from '../../lib/budget.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow, Store } from '../../lib/store/store.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

const NOW = Date.parse('2025-03-10T12:30:00.000Z');

async function setup(t: Test, kind: 'sqlite' | 'postgres') {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-summary-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profilesYaml('http://127.0.0.1:9'));
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
  const config = loadConfig(dir);
  const store: Store = await openStore(kind === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir: dir } : { dataDir: dir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const admission = new Admission({ counters, budget: { spendKeys: () => ['', ''], observe: () => {} } });
  const deps: SummaryDeps = {
    store, config, admission, budget: new Budget({ counters, store, now: () => NOW }),
    catalog: { prices: () => undefined },
    keyCacheSize: () => 3,
    // A health record without ring 1's figures (no reconcile counts, no usage refresh).
    health: () => ({
      status: 'ok', version: '9.9.9', uptime_s: 5, store: { kind, reachable: true, rows_written: 7, rows_pending: 2 }, counters: { kind: 'memory', degraded: false },
      catalog: { sim: { refreshed_at: '2025-03-10T12:00:00.000Z' } }, in_flight: 1, connections: { max: 10, max_per_address: 2, refused: { per_address: 0, global: 0 } },
    }),
    maintenance: () => ({ backfill_done: true, backfill_rows: 0, retention_days: null, retention_deleted: 0 }),
    now: () => NOW, startedAt: NOW - 5000, version: '9.9.9', driftUsd: 0.05,
  };
  return { store, counters, deps, admission };
}

function row(over: Partial<RequestRow>): RequestRow {
  return {
    id: `r-${Math.random().toString(36).slice(2)}`, ts: '2025-03-10T12:00:00.000Z', endpoint: 'chat', profile: 'dev', key_prefix: 'sluice_dev_…abcd',
    end_user: null, session: null, run: null, tier: null, requested_model: null, model: null, stream: true, status: 200, outcome: 'ok',
    input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0, cost_source: 'upstream',
    provider: null, degradation: 'none', generation_id: null, ttfb_ms: 100, duration_ms: 500, overhead_ms: 0.5, tools: [], ...over,
  };
}

const near = (t: Test, got: number | null, want: number, msg: string, rel = 0.1) => t.ok(got !== null && Math.abs(got - want) <= want * rel, `${msg}: ${got} ≈ ${want}`);

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: an empty store answers every section`, async (t) => {
    const { deps } = await setup(t, kind);
    const s = await computeSummary(deps);
    t.strictSame(Object.keys(s), [...SUMMARY_KEYS], 'exactly the contract keys, in order');
    t.equal(s.version, '9.9.9');
    t.equal(s.generated_at, '2025-03-10T12:30:00.000Z');
    t.strictSame(s.spend.profiles.map((p) => [p.profile, p.day_usd, p.month_usd, p.percent, p.degradation, p.next_reset, p.projected_exhaustion]), [
      ['assistant', 0, 0, 0, 'none', '2025-03-11T00:00:00.000Z', null], ['dev', 0, 0, 0, 'none', '2025-03-11T00:00:00.000Z', null],
      ['nokey', 0, 0, 0, 'none', '2025-03-11T00:00:00.000Z', null], ['tiny', 0, 0, 0, 'none', '2025-03-11T00:00:00.000Z', null],
    ]);
    t.equal(s.requests.today.total, 0);
    t.strictSame(s.requests.today.latency.ttfb_ms, { p50: null, p95: null, p99: null });
    t.equal(s.requests.by_hour.length, 24);
    t.equal(s.requests.by_hour[23].hour, '2025-03-10T12:00:00.000Z');
    t.strictSame(s.requests.by_day.map((d) => d.day), ['2025-03-04', '2025-03-05', '2025-03-06', '2025-03-07', '2025-03-08', '2025-03-09', '2025-03-10']);
    t.strictSame([s.models.today, s.models.month, s.providers.last_24h, s.sessions.active, s.sessions.top_today, s.anomalies, s.tool_logs, s.benchmark_runs], [[], [], [], [], [], [], [], []]);
    t.strictSame(s.routing.today.fallbacks, { requests: 0, ratio: 0 });
    t.equal(s.cache.profiles.length, 4);
    t.strictSame(s.cache.profiles[0].today, { input_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, hit_ratio: 0, saved_usd: 0 });
    t.equal(s.auth_failures.total_today, 0);
    t.equal(s.auth_failures.today.unknown_key, 0);
    t.strictSame(s.auth_failures.latest, []);
    t.equal(s.health.version, '9.9.9');
    t.equal(s.health.rows_pending, 2);
    t.equal(s.health.key_cache_size, 3);
    t.strictSame(s.health.usage_snapshots, []);
    t.equal(s.health.reconcile, null, 'no reconcile counts in this health record');
    t.equal(s.health.uptime_s, 5, 'uptime on the injected clock');
    t.equal(s.health.started_at, '2025-03-10T12:29:55.000Z');
    t.strictSame(s.health.store, { kind, reachable: true, rows_written: 7, rows_pending: 2 });
    t.notOk('connections' in s.health, 'the summary shows only its own health fields');
  });

  t.test(`${kind}: every section from a few rows`, async (t) => {
    const { store, deps, admission } = await setup(t, kind);
    await store.insertRequests([
      row({ ts: '2025-03-10T12:10:00.000Z', endpoint: 'messages', tier: 'agent', requested_model: 'sluice/agent', model: 'anthropic/claude-sonnet-4.5', provider: 'Anthropic',
        session: 's-1', end_user: 'cc:abc', run: 'run-1', cost_usd: 0.5, input_tokens: 1000, output_tokens: 200, cache_read_tokens: 3000, cache_write_tokens: 100,
        reasoning_tokens: 10, ttfb_ms: 400, duration_ms: 2000, overhead_ms: 1.5, tools: ['Bash', 'Read', 'Bash'] }),
      row({ ts: '2025-03-10T11:00:00.000Z', tier: 'fast', requested_model: 'sluice/auto', model: 'google/gemini-2.5-flash', provider: 'Google', end_user: 'alice', cost_usd: 0.1, degradation: 'fast-only' }),
      row({ ts: '2025-03-10T10:59:00.000Z', tier: 'auto-decision', requested_model: 'google/gemini-2.5-flash-lite', model: 'google/gemini-2.5-flash-lite', provider: 'Google', cost_usd: 0.001 }),
      row({ ts: '2025-03-10T12:20:00.000Z', profile: 'assistant', tier: 'fast', requested_model: 'sluice/fast', model: 'openai/gpt-4.1-mini', provider: 'OpenAI', status: 502, outcome: 'upstream_error', ttfb_ms: null }),
      row({ ts: '2025-03-03T09:00:00.000Z', tier: 'agent', model: 'anthropic/claude-sonnet-4.5', cost_usd: 2 }),
      row({ ts: '2025-02-28T23:00:00.000Z', tier: 'agent', model: 'anthropic/claude-sonnet-4.5', cost_usd: 10 }),
    ]);
    await store.insertAudit([
      ...[1, 2, 3].map((i) => ({ ts: `2025-03-10T12:0${i}:00.000Z`, ip: '203.0.113.9', prefix: 'sluice_dev_…zzzz', outcome: 'unknown_key' as const })),
      { ts: '2025-03-10T12:05:00.000Z', ip: '198.51.100.1', prefix: '', outcome: 'missing_key' as const },
      { ts: '2025-03-09T12:05:00.000Z', ip: '198.51.100.1', prefix: '', outcome: 'missing_key' as const },
    ]);
    for (let i = 0; i < 20; i++) await admission.countAuthFailure('203.0.113.9');
    await store.insertUsageSnapshot({ profile: 'dev', ts: '2025-03-10T12:25:00.000Z', day: '2025-03-10', label: 'dev', limit_usd: 5, limit_remaining: 4.5, limit_reset: 'daily',
      usage: 3, usage_daily: 0.5, usage_weekly: 1, usage_monthly: 2, ledger_day_usd: 0.601, drift_usd: 0.101, drifted: true });

    const s = await computeSummary(deps);
    const dev = s.spend.profiles.find((p) => p.profile === 'dev')!;
    t.match(dev, { day_usd: 0.601, month_usd: 2.601, daily_budget_usd: 5, monthly_budget_usd: 60, degradation: 'none', blocked: false,
      router_day_usd: 0.5, ledger_day_usd: 0.601, drift_usd: 0.101, drifted: true, snapshot_at: '2025-03-10T12:25:00.000Z', month_reset: '2025-04-01T00:00:00.000Z' });
    t.ok(Math.abs(dev.percent - 12.02) < 1e-6, `percent ${dev.percent}`);
    // The last hour at 12:30: 12:00–12:30 whole (0.5 at 12:10) and half of 11:00–12:00 (0.1 at 11:00).
    t.ok(Math.abs(dev.burn_rate_usd_per_hour - 0.55) < 1e-9, `burn rate ${dev.burn_rate_usd_per_hour}`);
    t.equal(dev.projected_exhaustion, new Date(NOW + (4.399 / 0.55) * 3_600_000).toISOString(), 'the daily budget runs out at the last hour\'s pace');

    t.match(s.requests.today, { total: 4, errors: 1, by_endpoint: { messages: 1, chat: 3 }, by_outcome: { ok: 3, upstream_error: 1 }, by_status_class: { '2xx': 3, '5xx': 1 } });
    t.equal(s.requests.month.total, 5);
    t.equal(s.requests.last_7d.total, 4);
    t.equal(s.requests.last_24h.total, 4);
    near(t, s.requests.today.latency.duration_ms.p99, 2000, 'duration p99');
    near(t, s.requests.today.latency.overhead_ms.p50, 0.5, 'overhead p50');
    t.strictSame(s.requests.by_hour.slice(-4).map((h) => h.requests), [0, 1, 1, 2], "10:59, 11:00, then 12:10 and 12:20");
    t.equal(s.requests.by_day[6].requests, 4);
    t.ok(Math.abs(s.requests.by_day[6].cost_usd - 0.601) < 1e-9);

    t.match(s.models.today[0], { model: 'anthropic/claude-sonnet-4.5', requests: 1, input_tokens: 1000, output_tokens: 200, cache_read_tokens: 3000, cache_write_tokens: 100, reasoning_tokens: 10, cost_usd: 0.5 });
    t.ok(Math.abs(s.models.today[0].share - 0.5 / 0.601) < 1e-5, 'share of spend');
    t.match(s.models.month[0], { model: 'anthropic/claude-sonnet-4.5', requests: 2, cost_usd: 2.5 });

    t.strictSame(s.routing.today.by_tier.map((x) => [x.tier, x.requests]).sort(), [['agent', 1], ['auto-decision', 1], ['fast', 2]]);
    t.strictSame(s.routing.today.auto, [{ tier: 'fast', requests: 1, cost_usd: 0.1 }]);
    t.strictSame(s.routing.today.auto_decision_calls, { requests: 1, cost_usd: 0.001 });
    t.strictSame(s.routing.today.degraded, { requests: 1, fast_only: 1, max_tokens: 0 });
    t.strictSame(s.routing.today.fallbacks, { requests: 1, ratio: 0.25 }, 'the fast tier\'s fallback served one');

    t.strictSame(s.providers.last_24h.map((p) => [p.provider, p.requests, p.errors, p.error_rate]), [['Google', 2, 0, 0], ['Anthropic', 1, 0, 0], ['OpenAI', 1, 1, 1]]);
    near(t, s.providers.last_24h[1].ttfb_ms.p95, 400, 'Anthropic ttfb p95');

    const cache = s.cache.profiles.find((p) => p.profile === 'dev')!;
    t.match(cache, { l2_cache: false, l2_cache_used: false, today: { input_tokens: 1000, cache_read_tokens: 3000, cache_write_tokens: 100 } });
    t.ok(Math.abs(cache.today.hit_ratio - 3000 / 4100) < 1e-5, 'hit ratio');
    t.ok(Math.abs(cache.today.saved_usd - 0.0081) < 1e-9, `saved ${cache.today.saved_usd}`);

    t.match(s.health, { version: '9.9.9', status: 'ok', rows_pending: 2, in_flight: 1, key_cache_size: 3, catalog: { sim: { refreshed_at: '2025-03-10T12:00:00.000Z' } } });
    t.match(s.health.usage_snapshots, [{ profile: 'dev', usage_daily: 0.5, drifted: true }]);

    t.strictSame(s.sessions.active, [{ profile: 'dev', session: 's-1', end_user: 'cc:abc', tier: 'agent', requests: 1, cost_usd: 0.5, last_seen: '2025-03-10T12:10:00.000Z' }]);
    t.strictSame(s.sessions.top_today.map((x) => [x.session, x.end_user, x.cost_usd, x.tier]), [['s-1', 'cc:abc', 0.5, 'agent'], [null, 'alice', 0.1, 'fast']]);

    t.strictSame(s.anomalies.map((a) => [a.kind, a.subject]).sort(), [['budget_on_course', 'dev'], ['drift', 'dev']]);
    t.ok(s.anomalies.every((a) => a.reason.length > 10 && typeof a.value === 'number' && typeof a.threshold === 'number'));

    t.strictSame(s.auth_failures.today, { missing_key: 1, malformed_key: 0, unknown_key: 3, revoked_key: 0, expired_key: 0, ip_not_allowed: 0, revoked_by_admin: 0 });
    t.equal(s.auth_failures.total_today, 4);
    t.strictSame(s.auth_failures.top_addresses, [{ ip: '203.0.113.9', failures: 3, blocked: true }, { ip: '198.51.100.1', failures: 1, blocked: false }]);
    t.strictSame(s.auth_failures.latest[0], { ts: '2025-03-10T12:05:00.000Z', ip: '198.51.100.1', prefix: '', outcome: 'missing_key' });
    t.equal(s.auth_failures.latest.length, 5);

    t.strictSame(s.tool_logs, [{ name: 'Bash', profile: 'dev', count: 2, last_seen: '2025-03-10T12:10:00.000Z' }, { name: 'Read', profile: 'dev', count: 1, last_seen: '2025-03-10T12:10:00.000Z' }]);
    t.match(s.benchmark_runs, [{ run: 'run-1', requests: 1, input_tokens: 1000, cost_usd: 0.5, first_seen: '2025-03-10T12:10:00.000Z', last_seen: '2025-03-10T12:10:00.000Z' }]);
    near(t, s.benchmark_runs[0].duration_ms.p50, 2000, 'run duration p50');
    t.notMatch(JSON.stringify(s), /sluice_dev_…abcd/, 'no request key prefix in the summary');
  });
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a busy hour is read from the rollups, and the raw rows read stay bounded`, async (t) => {
    const { store, deps } = await setup(t, kind);
    // 1,500 requests since 12:00 (more than the raw window), 300 of them 429s and 200 failures,
    // with one expensive request among the oldest, and 400 in the previous hour.
    const busy: RequestRow[] = [];
    for (let i = 0; i < 1500; i++) {
      const ts = new Date(Date.parse('2025-03-10T12:00:00.000Z') + i * 1000).toISOString();
      const status = i % 5 === 0 ? 429 : i % 15 === 1 ? 502 : 200;
      busy.push(row({ ts, tier: 'fast', provider: 'Google', cost_usd: i === 3 ? 0.9 : 0.001, status, outcome: status === 200 ? 'ok' : 'upstream_error',
        ttfb_ms: 200, session: i % 2 ? 'busy-session' : null, end_user: null }));
    }
    for (let i = 0; i < 400; i++) busy.push(row({ ts: new Date(Date.parse('2025-03-10T11:00:00.000Z') + i * 1000).toISOString(), provider: 'Google', cost_usd: 0.002, ttfb_ms: 5000 }));
    // The session's earlier hours today: 0.05 at 09 and 10, nothing spent at 08 (not counted).
    for (const [ts, cost_usd] of [['2025-03-10T08:30:00.000Z', 0], ['2025-03-10T09:30:00.000Z', 0.05], ['2025-03-10T10:30:00.000Z', 0.05]] as const) {
      busy.push(row({ ts, tier: 'fast', cost_usd, session: 'busy-session', end_user: null }));
    }
    await store.insertRequests(busy);
    const reads: number[] = [];
    const recent = store.boardRecent.bind(store);
    deps.store = Object.assign(Object.create(store), { boardRecent: (since: string, limit: number) => (reads.push(limit), recent(since, limit)) });
    const s = await computeSummary(deps);
    t.ok(reads.length === 1 && reads[0] <= 1000, `one raw read of at most 1,000 rows (${reads})`);
    const dev = s.spend.profiles.find((p) => p.profile === 'dev')!;
    // 12:00–12:30 whole: 1,499 × 0.001 + 0.9; half of 11:00–12:00: 400 × 0.002 / 2.
    t.ok(Math.abs(dev.burn_rate_usd_per_hour - (1.499 + 0.9 + 0.4)) < 1e-9, `burn ${dev.burn_rate_usd_per_hour}`);
    const kinds = s.anomalies.map((a) => `${a.kind}:${a.subject}`);
    t.ok(kinds.includes('rate_limited_burst:dev'), 'the 300 429s of the hour, from the rollups');
    t.match(s.anomalies.find((a) => a.kind === 'rate_limited_burst'), { value: 300 });
    t.ok(kinds.includes('error_burst:dev'), 'failures counted over the whole hour, not a window of rows');
    // 749 × 0.001 + 0.9 this hour against a mean of 0.05 over the two earlier hours that spent.
    t.match(s.anomalies.find((a) => a.kind === 'session_spend'), { subject: 'busy-session', profile: 'dev', value: 32.98, reason: /spent \$1\.65 this hour, 33× its hourly mean of \$0\.0500 earlier today/ });
    t.strictSame(s.sessions.active.map((x) => [x.session, x.requests, x.tier, x.last_seen]), [['busy-session', 750, 'fast', '2025-03-10T12:24:59.000Z']]);
  });
}
