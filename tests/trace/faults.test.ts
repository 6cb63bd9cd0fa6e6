// A collector that is down, slow or failing costs the requests nothing: they succeed while an
// export fails or hangs, and the spans lost are counted (by reason, on the tracer and in
// sluice_trace_spans_dropped_total) and logged at most once a minute of the gateway's clock. The
// export is driven with forceFlush; the export timeout is 300 ms where a failure is wanted, below
// the exporter's shortest retry back-off (800 ms), so one attempt is all it makes. A held export
// is released by the test, never by a timer. The shutdown flushes within its bound.

import t, { type Test } from 'tap';
import { Registry } from 'prom-client';
import { droppedTotals, registerTraceMetrics } from '../../lib/trace/metrics.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { closedPort, startFaultyCollector, startReceiver } from '../helpers/otlp.ts';

async function gateway(t: Test, endpoint: string, env: Record<string, string> = {}): Promise<{ h: Harness; key: string }> {
  const h = await startHarness(t, { env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_BSP_SCHEDULE_DELAY: '3600000', OTEL_EXPORTER_OTLP_TIMEOUT: '300', ...env } });
  return { h, key: await h.key('dev') };
}

/** n chat requests, one after another; each must succeed. */
async function requests(t: Test, h: Harness, key: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sluice/fast', stream: i % 2 === 1, messages: [{ role: 'user', content: 'hi' }] }),
    });
    t.equal(res.status, 200, `request ${i + 1} succeeded`);
    await res.text();
  }
}

const dropLines = (h: Harness) => h.logs.filter((l) => l.msg.startsWith('trace spans dropped'));

t.test('collector down (connection refused): requests succeed, the lost spans are counted, one log line a minute', async (t) => {
  const { h, key } = await gateway(t, `http://127.0.0.1:${await closedPort()}`);
  const tracing = h.gateway.tracing!;
  const before = droppedTotals().export;
  await requests(t, h, key, 3);
  await h.rows(3);
  await tracing.forceFlush();
  t.same(tracing.dropped, { queue_full: 0, export: 6 }, 'two spans per request, all lost');
  t.equal(droppedTotals().export - before, 6, 'in the process totals too');
  t.equal(dropLines(h).length, 1, 'logged once');
  t.match(dropLines(h)[0], { level: 40, reason: 'export', cause: /ECONNREFUSED/, spans: 6 });

  await requests(t, h, key, 1);
  await h.rows(4);
  await tracing.forceFlush();
  t.equal(tracing.dropped.export, 8);
  t.equal(dropLines(h).length, 1, 'not again within the minute');
  h.clock.now += 60_000;
  await requests(t, h, key, 1);
  await h.rows(5);
  await tracing.forceFlush();
  t.equal(dropLines(h).length, 2, 'again once a minute has passed');
  t.match(dropLines(h)[1], { dropped: { export: 10, queue_full: 0 } });

  const registry = new Registry();
  registerTraceMetrics(registry);
  const text = await registry.metrics();
  t.match(text, new RegExp(`^sluice_trace_spans_dropped_total\\{reason="export"\\} ${droppedTotals().export}$`, 'm'), '/metrics shows the count');
  t.match(text, /^sluice_trace_spans_dropped_total\{reason="queue_full"\} 0$/m);
});

t.test('collector answering 503: requests succeed, the batch is counted as dropped after one attempt', async (t) => {
  const collector = await startFaultyCollector(t, '503');
  const { h, key } = await gateway(t, collector.url);
  await requests(t, h, key, 2);
  await h.rows(2);
  await h.gateway.tracing!.forceFlush();
  t.equal(collector.received, 1, 'one export, not retried past its timeout');
  t.same(h.gateway.tracing!.dropped, { queue_full: 0, export: 4 });
  // A 503 is retryable: the exporter reports only that, not the status.
  t.match(dropLines(h)[0], { reason: 'export', cause: /retryable/ });
});

t.test('collector slower than the export timeout: requests complete while the export hangs; the batch is counted', async (t) => {
  const collector = await startFaultyCollector(t, 'hold');
  const { h, key } = await gateway(t, collector.url);
  await requests(t, h, key, 2);
  await h.rows(2);
  const flushed = h.gateway.tracing!.forceFlush();
  await collector.nextExport();
  t.equal(collector.held, 1, 'the export hangs at the collector');
  await requests(t, h, key, 5);
  await h.rows(7);
  t.equal(collector.held, 1, 'five requests completed, rows and all, while it hung');
  await flushed; // the export timeout (300 ms) ends it
  t.same(h.gateway.tracing!.dropped, { queue_full: 0, export: 4 }, 'the hung batch is lost and counted');
  t.match(dropLines(h)[0], { reason: 'export', cause: /timed out/ });
  collector.release();
  await h.gateway.tracing!.forceFlush();
  t.equal(collector.received, 2, 'the spans of the five went out in the next export');
  t.same(h.gateway.tracing!.dropped, { queue_full: 0, export: 4 }, 'and arrived');
});

t.test('a full export queue drops the span that does not fit, counted as queue_full', async (t) => {
  const collector = await startFaultyCollector(t, 'hold');
  // A queue of two spans, exported as soon as two are queued; the export timeout long enough not to end the test's hold.
  const { h, key } = await gateway(t, collector.url, { OTEL_BSP_MAX_QUEUE_SIZE: '2', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2', OTEL_EXPORTER_OTLP_TIMEOUT: '60000' });
  const exported = collector.nextExport();
  await requests(t, h, key, 1);
  await exported;
  t.equal(collector.held, 1, 'its two spans are being exported (held)');
  await requests(t, h, key, 2);
  await h.rows(3);
  t.same(h.gateway.tracing!.dropped, { queue_full: 2, export: 0 }, 'the second request\'s spans fill the queue, the third\'s are dropped');
  t.match(dropLines(h)[0], { reason: 'queue_full', spans: 1 });
  collector.release();
  await h.gateway.tracing!.forceFlush();
  t.equal(collector.received, 2, 'the queued spans went out once the export ended');
});

t.test('shutdown flushes what is queued; a collector that never answers holds it no longer than its bound', async (t) => {
  const service = 'sluice-faults-shutdown';
  const rx = await startReceiver(t, service);
  const a = await gateway(t, rx.url, { OTEL_SERVICE_NAME: service, OTEL_EXPORTER_OTLP_TIMEOUT: '3000' });
  await requests(t, a.h, a.key, 2);
  await a.h.rows(2);
  t.equal(rx.spans.length, 0, 'nothing exported yet');
  await a.h.gateway.close(1000);
  t.equal(rx.spans.length, 4, 'the close exported the queued spans');

  const collector = await startFaultyCollector(t, 'hold');
  const b = await gateway(t, collector.url, { OTEL_EXPORTER_OTLP_TIMEOUT: '60000' });
  await requests(t, b.h, b.key, 1);
  await b.h.rows(1);
  await b.h.gateway.close(0); // no grace left: the flush gets TRACE_FLUSH_MIN_MS
  t.equal(collector.held, 1, 'the export still hangs');
  t.ok(b.h.logs.some((l) => l.msg.startsWith('the last trace export did not finish in time')), 'the close went on without it, and said so');
  collector.release(); // else the exporter retries into the closed collector for its whole timeout, keeping the test alive
});
