// The summary's pure parts: each anomaly rule on both sides of its threshold, histogram buckets
// and percentiles, SLUICE_REQUEST_RETENTION_DAYS, the backfill/retention loop against a scripted
// store, and the JSON route's HEAD and failure answers.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { anomalies, RULES, type AnomalyInput } from '../../lib/board/anomalies.ts';
import { summaryRoute } from '../../lib/board/index.ts';
import { startMaintenance } from '../../lib/store/upkeep.ts';
import { histIndex, histValue, percentiles } from '../../lib/store/rollups.ts';
import type { Summary } from '../../lib/board/types.ts';
import { ConfigError } from '../../lib/config.ts';
import { readSettingsOf } from '../../lib/settings.ts';

const none: AnomalyInput = { endUsers: [], sessions: [], profilesLastHour: [], providers: [], costly: [], authBursts: [], drift: [], onCourse: [] };

t.test('each anomaly rule fires above its threshold and stays quiet below', async (t) => {
  t.strictSame(anomalies(none), []);
  const fire: AnomalyInput = {
    endUsers: [{ profile: 'dev', end_user: 'alice', today_usd: 1, prior_usd: 0.3, prior_days: 3 }, { profile: 'dev', end_user: 'bob', today_usd: 1, prior_usd: 1, prior_days: 1 }],
    sessions: [{ profile: 'dev', subject: 's1', hour_usd: 1, earlier_usd: 0.2, earlier_hours: 2, cap_usd: null }, { profile: 'dev', subject: 's2', hour_usd: 0.3, earlier_usd: 0.2, earlier_hours: 2, cap_usd: null }],
    profilesLastHour: [{ profile: 'dev', requests: 40, errors: 12, rate_limited: 10 }, { profile: 'car', requests: 100, errors: 12, rate_limited: 9 }],
    providers: [{ provider: 'Google', requests_last_hour: 10, p95_last_hour: 3000, p95_7d: 900 }, { provider: 'OpenAI', requests_last_hour: 10, p95_last_hour: 300, p95_7d: 100 }, { provider: 'X', requests_last_hour: 9, p95_last_hour: 9000, p95_7d: 100 }],
    costly: [{ id: 'r1', profile: 'dev', tier: 'agent', cost_usd: 0.5, tier_mean_usd: 0.02, tier_requests: 20 }, { id: 'r2', profile: 'dev', tier: 'fast', cost_usd: 0.04, tier_mean_usd: 0.001, tier_requests: 50 }],
    authBursts: [{ ip: '192.0.2.1', failures: 20 }, { ip: '192.0.2.2', failures: 19 }],
    drift: [{ profile: 'dev', drift_usd: -0.2, drifted: true, day: '2025-03-10', today: '2025-03-10', threshold_usd: 0.05 }, { profile: 'car', drift_usd: 0.2, drifted: true, day: '2025-03-09', today: '2025-03-10', threshold_usd: 0.05 }],
    onCourse: [{ profile: 'dev', projected_exhaustion: '2025-03-10T20:00:00.000Z', next_reset: '2025-03-11T00:00:00.000Z', percent: 60, blocked: false }, { profile: 'car', projected_exhaustion: null, next_reset: '2025-03-11T00:00:00.000Z', percent: 10, blocked: false }],
  };
  const got = anomalies(fire);
  t.strictSame(got.map((a) => `${a.kind}:${a.subject}`), [
    'end_user_spend:alice', 'session_spend:s1', 'error_burst:dev', 'rate_limited_burst:dev', 'provider_ttfb:Google',
    'costly_request:r1', 'auth_failure_burst:192.0.2.1', 'drift:dev', 'budget_on_course:dev',
  ]);
  t.match(got[0], { value: 10, threshold: RULES.endUserRatio, reason: /10× its daily mean/ });
  t.match(got[1], { reason: /; profile dev sets no session cap \(session_daily_usd stops such a session alone\)$/ }, 'a session anomaly names what would stop it');
  const capped = anomalies({ ...none, sessions: [{ profile: 'dev', subject: 's1', hour_usd: 1, earlier_usd: 0.2, earlier_hours: 2, cap_usd: 2 }] });
  t.match(capped[0], { reason: /; \$1\.20 today of the \$2\.00 session cap of profile dev \(60 %\)$/ }, 'and how far into its cap it is');
  t.match(got[2], { value: 30, threshold: 20, reason: /12 of 40 requests failed/ });
  t.match(got[7], { value: -0.2, reason: /differ by -\$0\.2000/ });
  t.match(got[8], { reason: /runs out at 20:00 UTC, 4 h before its reset/ });
});

t.test('histogram buckets and percentiles', async (t) => {
  t.equal(histIndex(0), 0);
  t.equal(histIndex(-5), 0);
  t.equal(histIndex(1e12), 127, 'capped');
  for (const v of [0.05, 1, 37, 1000, 123456]) t.ok(Math.abs(histValue(histIndex(v)) - v) / v < 0.1, `${v} within 10 %`);
  t.strictSame(percentiles(new Map()), { p50: null, p95: null, p99: null });
  const m = new Map<number, number>([[histIndex(10), 90], [histIndex(1000), 9], [histIndex(5000), 1]]);
  const p = percentiles(m);
  t.ok(Math.abs(p.p50! - 10) < 1 && Math.abs(p.p95! - 1000) < 100 && Math.abs(p.p99! - 1000) < 100, JSON.stringify(p));
});

t.test('SLUICE_REQUEST_RETENTION_DAYS', async (t) => {
  const retentionDays = (env: Record<string, string>) => readSettingsOf(env, ['requestRetentionDays']).requestRetentionDays;
  t.equal(retentionDays({}), null);
  t.equal(retentionDays({ SLUICE_REQUEST_RETENTION_DAYS: ' ' }), null);
  t.equal(retentionDays({ SLUICE_REQUEST_RETENTION_DAYS: '30' }), 30);
  for (const bad of ['0', '1.5', 'x', '-3']) t.throws(() => retentionDays({ SLUICE_REQUEST_RETENTION_DAYS: bad }), ConfigError, bad);
});

t.test('the upkeep loop: backfill in slices (retrying a failure), then retention, until stopped', async (t) => {
  // The loop's timers are unref'd (they never hold a process open): hold this one open meanwhile.
  const hold = setInterval(() => {}, 1000);
  t.teardown(() => clearInterval(hold));
  const calls: string[] = [];
  let backfills = 0;
  let pruned = 0;
  const logs: string[] = [];
  let pruneDone!: () => void;
  const pruneSeen = new Promise<void>((r) => (pruneDone = r));
  const m = startMaintenance({
    store: {
      async backfillRollups(limit) {
        calls.push(`backfill ${limit}`);
        backfills += 1;
        if (backfills === 2) throw new Error('store away');
        return { done: backfills >= 4, rows: backfills >= 4 ? 3 : limit };
      },
      async pruneRequests(before, limit) {
        calls.push(`prune ${before} ${limit}`);
        const n = pruned === 0 ? limit : pruned === limit ? 2 : 0;
        pruned += n;
        if (n < limit) pruneDone();
        return n;
      },
    },
    log: { info: (_o: object, msg: string) => logs.push(msg), warn: (_o: object, msg: string) => logs.push(msg) } as never,
    now: () => Date.parse('2025-03-10T00:00:00.000Z'), retentionDays: 7, backfillSlice: 5, pruneSlice: 4, retryMs: 1, retentionEveryMs: 60_000,
  });
  await pruneSeen;
  await m.stop();
  t.strictSame(calls, ['backfill 5', 'backfill 5', 'backfill 5', 'backfill 5', 'prune 2025-03-03T00:00:00.000Z 4', 'prune 2025-03-03T00:00:00.000Z 4']);
  t.strictSame(m.state(), { backfill_done: true, backfill_rows: 13, retention_days: 7, retention_deleted: 6 });
  t.ok(logs.includes('board rollup backfill failed; retrying') && logs.includes('board rollups backfilled') && logs.includes('old request rows deleted (retention)'));

  const idle = startMaintenance({ store: { backfillRollups: async () => ({ done: true, rows: 0 }), pruneRequests: async () => 0 }, log: { info() {}, warn() {} } as never, now: Date.now, retentionDays: null });
  await idle.done;
  t.equal(await idle.prune(), 0, 'no retention: nothing deleted');
  await idle.stop();
});

t.test('the JSON route: HEAD without a body, a failure as 503 without details', async (t) => {
  const errors: string[] = [];
  let fail = false;
  const route = summaryRoute(async () => {
    if (fail) throw new Error('connection to postgres://secret@db lost');
    return { version: '1' } as Summary;
  }, { error: (o: { err: Error }) => errors.push(o.err.message) } as never);
  const server = http.createServer((req, res) => void route(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/summary`;
  const ok = await fetch(url);
  t.equal(ok.status, 200);
  t.equal(ok.headers.get('cache-control'), 'no-store');
  t.strictSame(await ok.json(), { version: '1' });
  const head = await fetch(url, { method: 'HEAD' });
  t.equal(head.status, 200);
  fail = true;
  const bad = await fetch(url);
  t.equal(bad.status, 503);
  t.notMatch(await bad.text(), /postgres/, 'the cause stays in the log');
  t.strictSame(errors, ['connection to postgres://secret@db lost']);
});
