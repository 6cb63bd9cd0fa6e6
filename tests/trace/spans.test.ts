// Traces end to end, exported over OTLP http/protobuf to a real receiver (Elastic's mockotlpserver)
// and read back decoded: the SERVER span and its CLIENT child for chat, messages and responses,
// streamed and not (names, kinds, parentage, every attribute against the row), the traceparent
// the simulated router received (the CLIENT span's, a child of an incoming one, tracestate kept),
// an unsampled parent and a zero ratio (ids propagated, nothing exported), the samplers, a request
// sluice answers itself, no content in any attribute (tracing off: tests/trace/off.test.ts).
// Spans are flushed with forceFlush once the request's row (or its response's close) is seen: no
// sleeps, and the export's own timer never decides a result.

import t, { type Test } from 'tap';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, type Harness, type HarnessOptions } from '../helpers/gateway.ts';
import { startReceiver, waitForResponses, type ReceivedSpan, type Receiver } from '../helpers/otlp.ts';

const AGENT = 'anthropic/claude-sonnet-4.5';
const CANARY = 'prompt-canary-7f3a';
let services = 0;

interface Traced { h: Harness; rx: Receiver; key: string; flush(): Promise<void> }

/** A gateway exporting to a fresh receiver; the batch timer is an hour, so only forceFlush exports. */
async function traced(t: Test, env: Record<string, string> = {}, opts: HarnessOptions = {}): Promise<Traced> {
  const service = `sluice-spans-${++services}`;
  const rx = await startReceiver(t, service);
  const h = await startHarness(t, { ...opts, env: { OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, OTEL_SERVICE_NAME: service, OTEL_BSP_SCHEDULE_DELAY: '3600000', ...env } });
  t.ok(h.gateway.tracing, 'tracing is on');
  return { h, rx, key: await h.key('dev'), flush: () => h.gateway.tracing!.forceFlush() };
}

type Dialect = 'chat' | 'messages' | 'responses';
const PATH: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };

function request(h: Harness, key: string, dialect: Dialect, stream: boolean, headers: Record<string, string> = {}): Promise<Response> {
  const user = `say hi ${CANARY}`;
  const body = dialect === 'chat' ? { model: 'sluice/agent', stream, max_tokens: 300, messages: [{ role: 'user', content: user }] }
    : dialect === 'messages' ? { model: 'sluice/agent', stream, max_tokens: 200, messages: [{ role: 'user', content: user }] }
    : { model: 'sluice/agent', stream, max_output_tokens: 250, input: user };
  const auth: Record<string, string> = dialect === 'messages' ? { 'x-api-key': key, 'anthropic-version': '2023-06-01' } : { authorization: `Bearer ${key}` };
  return fetch(h.url + PATH[dialect], { method: 'POST', headers: { 'content-type': 'application/json', ...auth, ...headers }, body: JSON.stringify(body) });
}

const MAX_TOKENS: Record<Dialect, number> = { chat: 300, messages: 200, responses: 250 };

/** The inference requests the simulated router received, oldest first. */
const inference = (h: Harness) => h.sim.received.filter((r) => /^\/api\/v1\/(chat\/completions|messages|responses)(\?|$)/.test(r.path));

function portOf(url: string): number {
  return Number(new URL(url).port);
}

for (const dialect of ['chat', 'messages', 'responses'] as const) {
  for (const stream of [false, true]) {
    t.test(`${dialect}${stream ? ', streamed' : ''}: a SERVER span and its CLIENT child, the row's every figure on them`, async (t) => {
      const { h, rx, key, flush } = await traced(t);
      const res = await request(h, key, dialect, stream, { 'x-sim': 'cached=3;cache-write=2;reasoning=5', 'user-agent': 'trace-test/1.0' });
      t.equal(res.status, 200);
      const text = await res.text();
      const id = res.headers.get('x-sluice-request-id')!;
      const [row] = (await h.rows(1)) as [RequestRow];
      await flush();
      const { server, client, trace } = rx.request(id);
      t.equal(trace.length, 2, 'two spans in the trace');

      t.match(server, { kind: 'server', name: `POST ${PATH[dialect]}`, parentSpanId: '', status: 'unset', scope: 'sluice' });
      t.same(server.attributes, {
        'http.request.method': 'POST', 'http.route': PATH[dialect], 'url.path': PATH[dialect], 'url.scheme': 'http',
        'server.address': '127.0.0.1', 'server.port': portOf(h.url), 'user_agent.original': 'trace-test/1.0', 'client.address': '127.0.0.1',
        'network.protocol.version': '1.1', 'sluice.request.id': id, 'http.response.status_code': 200,
        'sluice.profile': 'dev', 'sluice.key.prefix': row.key_prefix, 'sluice.outcome': 'ok',
      }, 'the SERVER span: HTTP conventions and the request id');
      t.match(server.resource, { 'service.name': rx.spans[0]!.resource['service.name'], 'service.version': String });

      t.ok(client, 'a CLIENT span');
      t.match(client, { kind: 'client', name: `chat ${AGENT}`, traceId: server.traceId, parentSpanId: server.spanId, status: 'unset' });
      const expected: Record<string, unknown> = {
        'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openrouter', 'gen_ai.request.model': AGENT,
        'server.address': '127.0.0.1', 'server.port': portOf(h.sim.url),
        'gen_ai.request.stream': stream, 'gen_ai.request.max_tokens': MAX_TOKENS[dialect], 'sluice.request.model': 'sluice/agent',
        'sluice.profile': 'dev', 'sluice.key.prefix': row.key_prefix, 'sluice.tier': 'agent', 'sluice.degradation': 'none',
        'sluice.cost.usd': row.cost_usd, 'sluice.cost.source': row.cost_source, 'sluice.outcome': 'ok',
        'gen_ai.response.id': row.generation_id, 'gen_ai.response.model': row.model,
        'http.response.status_code': 200,
        'gen_ai.usage.input_tokens': row.input_tokens + row.cache_read_tokens + row.cache_write_tokens,
        'gen_ai.usage.output_tokens': row.output_tokens, 'gen_ai.usage.cache_read.input_tokens': row.cache_read_tokens,
        'gen_ai.usage.cache_creation.input_tokens': row.cache_write_tokens, 'gen_ai.usage.reasoning.output_tokens': row.reasoning_tokens,
      };
      if (row.provider !== null) expected['sluice.provider'] = row.provider;
      if (dialect !== 'messages') expected['openai.api.type'] = dialect === 'chat' ? 'chat_completions' : 'responses';
      const ttfc = client!.attributes['gen_ai.response.time_to_first_chunk'];
      if (stream) {
        t.type(ttfc, 'number', 'a stream records its time to the first chunk');
        t.ok((ttfc as number) > 0 && (ttfc as number) * 1000 <= row.duration_ms, `${ttfc} s, within the request's ${row.duration_ms} ms`);
        expected['gen_ai.response.time_to_first_chunk'] = ttfc;
      }
      t.same(client!.attributes, expected, 'the CLIENT span: GenAI conventions and the row');
      // The simulated Responses API reports no cache writes.
      t.match(row, { cache_read_tokens: 3, cache_write_tokens: dialect === 'responses' ? 0 : 2 }, 'the figures are the router\'s');
      t.ok(row.input_tokens > 0 && row.output_tokens > 0, `${row.input_tokens} uncached input, ${row.output_tokens} output tokens`);
      if (dialect !== 'messages') t.equal(row.reasoning_tokens, 5);

      const sent = inference(h).at(-1)!;
      t.equal(sent.headers.traceparent, `00-${client!.traceId}-${client!.spanId}-01`, 'the router got the CLIENT span as parent');
      t.equal(sent.headers.tracestate, undefined, 'no tracestate to pass on');
      const everything = JSON.stringify([server, client]);
      t.notOk(everything.includes(CANARY), 'no prompt text in any attribute');
      t.notOk(text.length > 0 && everything.includes(text.slice(0, 40)), 'no response text either');
    });
  }
}

t.test('an incoming traceparent is the SERVER span\'s parent, its tracestate goes upstream, the router sees the CLIENT span', async (t) => {
  const { h, rx, key, flush } = await traced(t);
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const parent = '00f067aa0ba902b7';
  const res = await request(h, key, 'chat', true, { traceparent: `00-${traceId}-${parent}-01`, tracestate: 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7' });
  await res.text();
  await h.rows(1);
  await flush();
  const { server, client } = rx.request(res.headers.get('x-sluice-request-id')!);
  t.match(server, { traceId, parentSpanId: parent });
  t.match(client, { traceId, parentSpanId: server.spanId });
  const sent = inference(h).at(-1)!;
  t.equal(sent.headers.traceparent, `00-${traceId}-${client!.spanId}-01`, 'a child of the incoming trace, through the CLIENT span');
  t.equal(sent.headers.tracestate, 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7', 'tracestate kept');
});

t.test('a traceparent that cannot be read: a new trace, and its tracestate is not passed on', async (t) => {
  const { h, rx, key, flush } = await traced(t);
  const res = await request(h, key, 'chat', false, { traceparent: '00-not-a-trace-01', tracestate: 'rojo=00f067aa0ba902b7' });
  await res.text();
  await h.rows(1);
  await flush();
  const { server, client } = rx.request(res.headers.get('x-sluice-request-id')!);
  t.equal(server.parentSpanId, '', 'a root span');
  const sent = inference(h).at(-1)!;
  t.equal(sent.headers.traceparent, `00-${client!.traceId}-${client!.spanId}-01`, 'the router still gets the CLIENT span');
  t.equal(sent.headers.tracestate, undefined, 'a tracestate of no readable trace is dropped');
});

t.test('an unsampled parent and a zero ratio: ids still propagated, nothing exported', async (t) => {
  const { h, rx, key, flush } = await traced(t, { OTEL_TRACES_SAMPLER_ARG: '0' });
  const traceId = '0af7651916cd43dd8448eb211c80319c';
  const incoming = 'b7ad6b7169203331';
  const a = await request(h, key, 'chat', false, { traceparent: `00-${traceId}-${incoming}-00` });
  await a.text();
  const b = await request(h, key, 'messages', false);
  await b.text();
  await h.rows(2);
  await flush();
  const [first, second] = inference(h);
  const m = /^00-([0-9a-f]{32})-([0-9a-f]{16})-00$/.exec(String(first!.headers.traceparent));
  t.ok(m, 'an unsampled traceparent went upstream');
  t.equal(m![1], traceId, 'in the incoming trace');
  t.not(m![2], incoming, 'naming sluice\'s own (unrecorded) span');
  t.match(String(second!.headers.traceparent), /^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/, 'a root at ratio 0: unsampled too');
  t.equal(rx.exports, 0, 'no span exported');
  t.same(h.gateway.tracing!.dropped, { queue_full: 0, export: 0 });
});

t.test('sampler always_on ignores an unsampled parent; parentbased_always_off records nothing', async (t) => {
  const on = await traced(t, { OTEL_TRACES_SAMPLER: 'always_on' });
  const res = await request(on.h, on.key, 'chat', false, { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00' });
  await res.text();
  await on.h.rows(1);
  await on.flush();
  t.equal(on.rx.request(res.headers.get('x-sluice-request-id')!).trace.length, 2, 'always_on: both spans');
  const off = await traced(t, { OTEL_TRACES_SAMPLER: 'parentbased_always_off' });
  await (await request(off.h, off.key, 'chat', false)).text();
  await off.h.rows(1);
  await off.flush();
  t.equal(off.rx.exports, 0, 'parentbased_always_off: nothing');
});

t.test('the SERVER span of a request sluice answers itself ends with its response', async (t) => {
  const { h, rx, key, flush } = await traced(t);
  const responses = waitForResponses(h.gateway.server);
  const res = await fetch(`${h.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  t.equal(res.status, 200);
  await res.text();
  await responses.closed(1); // no row for this route: its span ends when its response closes
  await flush();
  const spans = rx.spans.filter((s: ReceivedSpan) => s.name === 'GET /v1/models');
  t.equal(spans.length, 1);
  t.match(spans[0]!.attributes, { 'http.response.status_code': 200, 'http.route': '/v1/models', 'sluice.profile': 'dev' });
  t.equal(rx.spans.filter((s) => s.kind === 'client').length, 0, 'no CLIENT span: nothing went upstream');
});
