// How a request's ending shows on its spans, read back from a real OTLP receiver: refusals before
// proxying (401, 400, 429: a SERVER span only, error.type the catalogue code), a client that hangs
// up mid-stream (both spans end, sluice.outcome client_disconnect, no error), the router answering
// 500 (error.type "500" on both spans), the router unreachable (upstream_unreachable), and a request
// degraded by the budget (the model and max_tokens sent, the alias asked for, the rewrites).

import { randomUUID } from 'node:crypto';
import t, { type Test } from 'tap';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, type Harness, type HarnessOptions } from '../helpers/gateway.ts';
import { startReceiver, waitForResponses, type Receiver } from '../helpers/otlp.ts';

const FAST = 'google/gemini-2.5-flash';
let services = 0;

async function traced(t: Test, opts: HarnessOptions = {}): Promise<{ h: Harness; rx: Receiver; flush(): Promise<void> }> {
  const service = `sluice-outcomes-${++services}`;
  const rx = await startReceiver(t, service);
  const h = await startHarness(t, { ...opts, env: { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_SERVICE_NAME: service, OTEL_BSP_SCHEDULE_DELAY: '3600000', ...opts.env } });
  return { h, rx, flush: () => h.gateway.tracing!.forceFlush() };
}

function chat(h: Harness, key: string | null, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', signal,
    headers: { 'content-type': 'application/json', ...(key === null ? {} : { authorization: `Bearer ${key}` }), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
const hi = (extra: Record<string, unknown> = {}) => ({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }], ...extra });

t.test('refused before proxying: only a SERVER span, with the status and the catalogue code', async (t) => {
  const { h, rx, flush } = await traced(t, {
    extraProfiles: '  limited:\n    default_tier: fast\n    router: sim\n    budget: { daily_usd: 5, monthly_usd: 60 }\n    rate_limits: { per_key_per_minute: 1, per_user_per_minute: 1 }\n',
    env: { SLUICE_UPSTREAM_KEY_LIMITED: 'sk-or-v1-limitedlimitedlimitedlimitedlimitedlimitedlimitedlimited0' },
  });
  const key = await h.key('limited');
  const responses = waitForResponses(h.gateway.server);
  const cases: Array<[Response, number, string]> = [];
  cases.push([await chat(h, null, hi()), 401, 'invalid_api_key']);
  cases.push([await chat(h, key, '{"model": "sluice/fast", "messages": ['), 400, 'invalid_body']);
  const ok = await chat(h, key, hi());
  t.equal(ok.status, 200, 'the one request the limit allows');
  await ok.text();
  cases.push([await chat(h, key, hi()), 429, 'rate_limit_exceeded']);
  for (const [res] of cases) await res.text();
  await responses.closed(4);
  await h.rows(1);
  await flush();
  for (const [res, status, code] of cases) {
    t.equal(res.status, status, code);
    const spans = rx.spans.filter((s) => s.attributes['http.response.status_code'] === status);
    t.equal(spans.length, 1, `one span for the ${status}`);
    const [span] = spans;
    t.match(span, { kind: 'server', name: 'POST /v1/chat/completions', status: 'unset' }, `${status}: a 4xx leaves the SERVER span's status unset`);
    t.equal(span!.attributes['error.type'], code, `${status}: error.type ${code}`);
    t.equal(rx.spans.filter((s) => s.traceId === span!.traceId).length, 1, `${status}: no CLIENT span`);
  }
  t.equal(rx.spans.filter((s) => s.attributes['sluice.profile'] === 'limited' && s.attributes['http.response.status_code'] === 429).length, 1, 'the 429 names the profile');
  t.equal(rx.spans.filter((s) => s.attributes['http.response.status_code'] === 401)[0]!.attributes['sluice.profile'], undefined, 'the 401 knows no profile');
});

t.test('a client that hangs up mid-stream: both spans end, the outcome recorded, no error', async (t) => {
  const { h, rx, flush } = await traced(t);
  const key = await h.key('dev');
  const ac = new AbortController();
  const res = await chat(h, key, hi({ stream: true }), { 'x-sim': 'chunks=50;chunk-delay-ms=20' }, ac.signal);
  t.equal(res.status, 200);
  const reader = res.body!.getReader();
  let seen = '';
  while (!seen.includes('data:')) {
    const { value, done } = await reader.read();
    if (done) break;
    seen += Buffer.from(value).toString();
  }
  ac.abort();
  await reader.read().catch(() => {});
  const [row] = (await h.rows(1)) as [RequestRow];
  t.equal(row.outcome, 'client_disconnect');
  await flush();
  const { server, client } = rx.request(res.headers.get('x-sluice-request-id')!);
  t.match(client, { kind: 'client', status: 'unset', attributes: { 'sluice.outcome': 'client_disconnect', 'gen_ai.request.stream': true, 'http.response.status_code': 200 } });
  t.equal(client!.attributes['error.type'], undefined, 'a hang-up is not an error');
  t.type(client!.attributes['gen_ai.response.time_to_first_chunk'], 'number', 'the first chunk came before it');
  t.equal(client!.attributes['gen_ai.response.id'], row.generation_id);
  t.equal(client!.attributes['gen_ai.usage.input_tokens'], undefined, 'no usage reported before the hang-up: none claimed');
  t.equal(client!.attributes['sluice.cost.source'], 'estimate', 'the row\'s estimate instead');
  t.match(server, { status: 'unset', attributes: { 'sluice.outcome': 'client_disconnect', 'http.response.status_code': 200 } });
});

t.test('the router answers 500: error.type "500" on both spans, both in error', async (t) => {
  const { h, rx, flush } = await traced(t);
  const key = await h.key('dev');
  const res = await chat(h, key, hi(), { 'x-sim': 'status=500' });
  t.equal(res.status, 500);
  await res.text();
  await h.rows(1);
  await flush();
  const { server, client } = rx.request(res.headers.get('x-sluice-request-id')!);
  t.match(client, { status: 'error', attributes: { 'error.type': '500', 'http.response.status_code': 500, 'sluice.outcome': 'upstream_error' } });
  t.match(server, { status: 'error', attributes: { 'error.type': '500', 'http.response.status_code': 500, 'sluice.outcome': 'upstream_error' } });
});

t.test('the router unreachable: sluice\'s 502, error.type upstream_unreachable', async (t) => {
  const { h, rx, flush } = await traced(t);
  const key = await h.key('dev');
  await h.sim.close();
  const res = await chat(h, key, hi());
  t.equal(res.status, 502);
  await res.text();
  await h.rows(1);
  await flush();
  // sluice's own 502 carries no x-sluice-request-id: the one SERVER span is this request's.
  const server = rx.spans.find((s) => s.kind === 'server')!;
  const { client } = rx.request(server.attributes['sluice.request.id'] as string);
  t.match(client, { status: 'error', attributes: { 'error.type': 'upstream_unreachable', 'sluice.outcome': 'upstream_error' } });
  t.equal(client!.attributes['http.response.status_code'], undefined, 'the router never answered');
  t.match(server, { status: 'error', attributes: { 'error.type': 'upstream_unreachable', 'http.response.status_code': 502 } });
});

t.test('a degraded request: the model and max_tokens sent, the alias asked for, the stage and the rewrites', async (t) => {
  // Profile tiny at 90 % of its month: the max-tokens stage (the fast tier, max_tokens at most 2048).
  const { h, rx, flush } = await traced(t, { clockStart: Date.parse('2025-03-15T10:00:00Z') });
  await h.store.insertRequests([{
    id: randomUUID(), ts: '2025-03-10T12:00:00.000Z', endpoint: 'chat', profile: 'tiny', key_prefix: 'sluice_tiny_…seed',
    end_user: null, session: null, run: 'seed', tier: 'fast', requested_model: 'sluice/fast', model: FAST, stream: false, status: 200,
    outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.9 * 0.02,
    cost_source: 'upstream', provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2, overhead_ms: 0.1, tools: [],
  }]);
  const key = await h.key('tiny');
  const res = await chat(h, key, hi({ model: 'sluice/agent', max_tokens: 5000, models: ['sluice/agent'] }), { 'x-sluice-session': 'sess-42' });
  t.equal(res.headers.get('x-sluice-degradation'), 'max-tokens');
  await res.text();
  const rows = await h.rows(1);
  const row = rows.find((r) => r.run !== 'seed')!;
  await flush();
  const { client } = rx.request(res.headers.get('x-sluice-request-id')!);
  t.match(client, {
    name: `chat ${FAST}`,
    attributes: {
      'gen_ai.request.model': FAST, 'sluice.request.model': 'sluice/agent', 'gen_ai.request.max_tokens': 2048,
      'sluice.degradation': 'max-tokens', 'sluice.tier': 'fast', 'sluice.profile': 'tiny', 'sluice.session': row.session,
      'sluice.rewrites': Array,
    },
  });
  t.ok(row.session, 'the session the row keeps');
  t.same(client!.attributes['sluice.rewrites'], ['models ["sluice/agent"]→["openai/gpt-4.1-mini"]'], 'the fallback list the budget replaced');
});
