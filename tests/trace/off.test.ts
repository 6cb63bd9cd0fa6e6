// Tracing off (no OTLP endpoint), in a process of its own: the gateway has no tracer, the
// OpenTelemetry SDK and exporter are never loaded, sluice adds no traceparent upstream, and a
// client's own traceparent passes through untouched like any other header.

import { createRequire } from 'node:module';
import t from 'tap';
import { startHarness } from '../helpers/gateway.ts';

t.test('off: no tracer, no SDK loaded, no traceparent of sluice\'s, the client\'s untouched', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  t.equal(h.gateway.tracing, null, 'no tracer');
  const post = (headers: Record<string, string>, stream: boolean) => fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body: JSON.stringify({ model: 'sluice/fast', stream, messages: [{ role: 'user', content: 'hi' }] }),
  });
  await (await post({}, true)).text();
  const given = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
  await (await post({ traceparent: given, tracestate: 'rojo=00f067aa0ba902b7' }, false)).text();
  await h.rows(2);
  const [a, b] = h.sim.received.filter((r) => r.path === '/api/v1/chat/completions');
  t.equal(a!.headers.traceparent, undefined, 'none added');
  t.equal(b!.headers.traceparent, given, 'the client\'s own goes through as any other header');
  t.equal(b!.headers.tracestate, 'rojo=00f067aa0ba902b7');
  const loaded = Object.keys(createRequire(import.meta.url).cache).filter((f) => /@opentelemetry\/(sdk-trace|exporter|otlp|resources)/.test(f));
  t.same(loaded, [], 'neither the SDK nor the exporter was loaded');
});
