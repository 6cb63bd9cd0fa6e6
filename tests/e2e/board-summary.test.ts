// `GET /api/summary` after real traffic through both dialects, on SQLite and on Postgres: every
// section filled with the numbers the recorded rows imply, no client key, upstream key or prompt
// text anywhere in it, and HEAD answered without a body.

import { readFileSync } from 'node:fs';
import t from 'tap';
import type { Summary } from '../../lib/board/types.ts';
import { startHarness, UPSTREAM_KEYS, type Harness } from '../helpers/gateway.ts';

const VERSION = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')).version;
const PROMPT = 'the secret prompt text 7f3a9c';
const CC_SESSION = '4f1c2a8e-1b2c-4d5e-9f00-aaaaaaaaaaaa';

async function summary(h: Harness): Promise<Summary> {
  const res = await fetch(`${h.url}/api/summary`);
  if (res.status !== 200) throw new Error(`summary answered ${res.status}`);
  return (await res.json()) as Summary;
}

/** Polls the summary until `ok` holds (audit rows are written off the request path). */
async function summaryWhen(h: Harness, ok: (s: Summary) => boolean): Promise<Summary> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const s = await summary(h);
    if (ok(s) || Date.now() > deadline) return s;
    await new Promise((r) => setImmediate(r));
  }
}

for (const store of ['sqlite', 'postgres'] as const) {
  t.test(`${store}: the summary after real traffic`, async (t) => {
    const h = await startHarness(t, { store, env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } }); // client addresses as X-Forwarded-For from loopback
    const key = await h.key('dev');
    const chat = (body: object, headers: Record<string, string> = {}) => fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers }, body: JSON.stringify(body),
    }).then((r) => r.text());
    await chat({ model: 'sluice/fast', stream: true, user: 'alice', messages: [{ role: 'user', content: PROMPT }] },
      { 'x-sluice-session': 'sess-1', 'x-sluice-run': 'bench-1', 'x-sim': 'tool=get_weather;cached=100;cache-write=20;reasoning=5' });
    const msg = await fetch(`${h.url}/v1/messages`, {
      method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 50, stream: true, metadata: { user_id: JSON.stringify({ device_id: 'd', account_uuid: 'a', session_id: CC_SESSION }) }, messages: [{ role: 'user', content: PROMPT }] }),
    });
    await msg.text();
    await chat({ model: 'sluice/auto', messages: [{ role: 'user', content: PROMPT }] }, { 'x-sluice-session': 'auto-1' });
    await chat({ model: 'sluice/fast', messages: [{ role: 'user', content: PROMPT }] }, { 'x-sim': 'status=502' });
    await chat({ model: 'sluice/fast', messages: [{ role: 'user', content: PROMPT }] }, { 'x-sim': 'status=429' });
    for (let i = 0; i < 3; i++) {
      await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer sluice_dev_${'x'.repeat(31)}${i}`, 'x-forwarded-for': '203.0.113.7', 'content-type': 'application/json' }, body: '{}' }).then((r) => r.text());
    }
    const rows = await h.rows(6);
    t.equal(rows.length, 6, 'six rows: two dialects, auto and its decision, two upstream errors');

    const s = await summaryWhen(h, (x) => x.auth_failures.total_today >= 3);
    const sum = (f: (r: (typeof rows)[number]) => number) => rows.reduce((a, r) => a + f(r), 0);
    const close = (a: number, b: number) => Math.abs(a - b) < 1e-6;

    const dev = s.spend.profiles.find((p) => p.profile === 'dev')!;
    t.ok(close(dev.day_usd, sum((r) => r.cost_usd)) && dev.day_usd > 0, `dev spent ${dev.day_usd} today`);
    t.ok(close(dev.month_usd, dev.day_usd) && close(dev.burn_rate_usd_per_hour, dev.day_usd));
    t.equal(dev.daily_budget_usd, 5);
    t.match(dev.next_reset, /T00:00:00\.000Z$/);

    t.equal(s.requests.today.total, 6);
    t.strictSame(s.requests.today.by_endpoint, { chat: 5, messages: 1 });
    t.equal(s.requests.today.by_outcome.upstream_error, 2);
    t.equal(s.requests.today.by_status_class['2xx'], 4);
    t.equal(s.requests.today.errors, 2);
    t.equal(s.requests.last_24h.total, 6);
    t.ok(s.requests.today.latency.duration_ms.p50! > 0 && s.requests.today.latency.ttfb_ms.p95! > 0 && s.requests.today.latency.overhead_ms.p99! >= 0);
    t.equal(s.requests.by_hour[23].requests, 6);

    t.ok(close(s.models.today.reduce((a, m) => a + m.cost_usd, 0), sum((r) => r.cost_usd)), 'models add up to the spend');
    t.ok(s.models.today.some((m) => m.model === rows.find((r) => r.endpoint === 'messages')!.model), 'the messages model is listed');
    t.equal(s.routing.today.auto.reduce((a, x) => a + x.requests, 0), 1, 'one sluice/auto request');
    t.equal(s.routing.today.auto_decision_calls.requests, 1, 'and its decision call');
    t.ok(s.routing.today.by_tier.some((x) => x.tier === 'agent'), 'claude-* went to the default tier');
    t.ok(s.providers.last_24h.length > 0 && s.providers.last_24h.every((p) => p.error_rate >= 0 && p.error_rate <= 1));
    t.equal(s.providers.last_24h.reduce((a, p) => a + p.errors, 0), 2);

    const cache = s.cache.profiles.find((p) => p.profile === 'dev')!;
    t.equal(cache.today.cache_read_tokens, sum((r) => r.cache_read_tokens));
    t.ok(cache.today.cache_read_tokens > 0 && cache.today.hit_ratio > 0 && cache.today.saved_usd > 0, 'caching saved something');
    t.equal(cache.l2_cache, false);

    t.equal(s.health.version, VERSION);
    t.match(s.health, { store: { kind: store, reachable: true }, counters: { kind: 'memory', degraded: false }, rows_pending: 0 });
    t.ok(s.health.key_cache_size >= 1, 'the key cache holds the key');
    t.match(s.health.reconcile, { pending: Number, reconciled: Number, abandoned: Number }, 'ring 1\'s reconcile counts');

    t.ok(s.sessions.active.some((x) => x.session === 'sess-1' && x.end_user === 'alice' && x.tier === 'fast'), 'alice\'s session');
    t.ok(s.sessions.active.some((x) => x.end_user === `cc:${CC_SESSION}`), 'the Claude Code session');
    t.ok(s.sessions.top_today.length >= 3);

    t.equal(s.auth_failures.today.unknown_key + s.auth_failures.today.malformed_key, 3);
    t.match(s.auth_failures.top_addresses[0], { ip: '203.0.113.7', failures: 3, blocked: false });
    t.match(s.auth_failures.latest[0], { ip: '203.0.113.7' });

    t.match(s.tool_logs, [{ name: 'get_weather', profile: 'dev', count: 1 }]);
    t.match(s.benchmark_runs, [{ run: 'bench-1', requests: 1 }]);
    t.ok(s.benchmark_runs[0].duration_ms.p50! > 0);
    t.ok(Array.isArray(s.anomalies));

    const text = JSON.stringify(s);
    t.notOk(text.includes(key), 'no client key');
    t.notMatch(text, /sluice_[a-z][a-z0-9-]*_[A-Za-z0-9]{32}/, 'nothing shaped like a full key');
    for (const k of Object.values(UPSTREAM_KEYS)) t.notOk(text.includes(k), 'no upstream key');
    t.notOk(text.includes(PROMPT), 'no prompt text');

    const head = await fetch(`${h.url}/api/summary`, { method: 'HEAD' });
    t.equal(head.status, 200);
    t.match(head.headers.get('content-type'), /application\/json/);
    t.equal(await head.text(), '');
  });
}
