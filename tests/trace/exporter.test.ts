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
