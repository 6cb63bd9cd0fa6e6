// createTracing's `exporter` option (bench/trace-floor.ts measures the SDK with it): spans go to the
// exporter given instead of the OTLP one, nothing is sent to the endpoint, and a failed export is
// still counted as spans dropped.

import t from 'tap';
import { ROOT_CONTEXT } from '@opentelemetry/api';
import type { ReadableSpan, SpanExporter } from '@opentelemetry/sdk-trace-base';
import { createLogger } from '../../lib/log.ts';
import { readTraceSettings } from '../../lib/trace/settings.ts';
import { createTracing } from '../../lib/trace/tracing.ts';
import { closedPort } from '../helpers/otlp.ts';

async function tracingWith(code: 0 | 1) {
  const got: ReadableSpan[] = [];
  const exporter: SpanExporter = {
    export: (spans, done) => {
      got.push(...spans);
      done(code === 0 ? { code } : { code, error: new Error('refused by the test') });
    },
    shutdown: async () => {},
  };
  const settings = readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${await closedPort()}` })!;
  const tracing = await createTracing(settings, { log: createLogger('silent'), version: 'test', exporter });
  return { tracing, got };
}

t.test('spans reach the exporter given, none the endpoint', async (t) => {
  const { tracing, got } = await tracingWith(0);
  t.teardown(() => tracing.shutdown(1000));
  tracing.requests.tracer.startSpan('one', {}, ROOT_CONTEXT).end();
  tracing.requests.tracer.startSpan('two', {}, ROOT_CONTEXT).end();
  await tracing.forceFlush();
  t.same(got.map((s) => s.name), ['one', 'two']);
  t.same(tracing.dropped, { queue_full: 0, export: 0 }, 'nothing lost: the closed endpoint was never tried');
});

t.test('a failed export through the exporter given is counted', async (t) => {
  const { tracing, got } = await tracingWith(1);
  t.teardown(() => tracing.shutdown(1000));
  tracing.requests.tracer.startSpan('lost', {}, ROOT_CONTEXT).end();
  await tracing.forceFlush();
  t.equal(got.length, 1);
  t.same(tracing.dropped, { queue_full: 0, export: 1 });
});

t.test('a failed export never puts a second one in flight: the next starts only when the last has ended', async (t) => {
  const held: Array<() => void> = [];
  let inFlight = 0;
  let most = 0;
  const exporter: SpanExporter = {
    export: (_spans, done) => {
      most = Math.max(most, ++inFlight);
      held.push(() => {
        inFlight--;
        done({ code: 1, error: new Error('the collector timed out') });
      });
    },
    shutdown: async () => {},
  };
  const settings = readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4' })!;
  const tracing = await createTracing(settings, { log: createLogger('silent'), version: 'test', exporter });
  const spans = (n: number) => {
    for (let i = 0; i < n; i++) tracing.requests.tracer.startSpan('s', {}, ROOT_CONTEXT).end();
  };
  const settle = () => new Promise((resolve) => setImmediate(resolve)); // the processor's promise chain, not a clock
  spans(4 * 4); // the first batch goes out at once, three more wait
  t.equal(held.length, 1, 'one export started');
  for (let round = 0; round < 3; round++) {
    held.shift()!(); // it fails; the processor starts the next batch
    await settle();
    spans(4); // a span ending while that one is in flight must not start another
    t.equal(inFlight, 1, `round ${round + 1}: one export in flight`);
  }
  t.equal(most, 1, 'never two at once');
  t.equal(tracing.dropped.export, 12, 'the three failed batches are counted');
  while (held.length > 0) held.shift()!();
  await tracing.shutdown(1000);
});
