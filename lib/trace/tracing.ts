// The tracer of one gateway, built once at start-up when tracing is on (readTraceSettings gave
// settings): the OpenTelemetry SDK's BasicTracerProvider with the configured sampler and resource,
// a BatchSpanProcessor with a bounded queue, and the OTLP http/protobuf exporter. The SDK is loaded
// here, on demand: a process with tracing off never loads it. No request waits for the collector:
// spans are queued when they end and posted in batches (once a batch is full, or when the oldest has
// waited the schedule delay); a full queue drops the span, a failed export (collector down, slower
// than the export timeout, answering an error) drops its batch.
// Both are counted (lib/trace/metrics.ts, sluice_trace_spans_dropped_total) and logged at most once
// a minute. Every setting is passed to the SDK explicitly, so no OTEL_* variable it would fall back
// on has any effect; the exporter still reads two things from the process's environment itself: its
// TLS files (OTEL_EXPORTER_OTLP_CERTIFICATE and the client pair) and the headers variables, merged
// under the same ones readTraceSettings read.

import type { Meter, MeterProvider } from '@opentelemetry/api';
import type { Sampler, SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import type { Logger } from 'pino';
import { SCOPE } from './attributes.ts';
import { countDropped, type DropReason } from './metrics.ts';
import type { RequestTracer } from './request.ts';
import type { TraceSettings } from './settings.ts';

type ExporterConfig = NonNullable<ConstructorParameters<typeof OTLPTraceExporter>[0]>;

/** The fewest milliseconds between two log lines about dropped spans. */
export const DROP_LOG_EVERY_MS = 60_000;

/** The SDK's self-observability counter of spans a processor finished; a queue_full error.type is a drop. */
const PROCESSED = 'otel.sdk.processor.span.processed';

export interface Tracing {
  /** The hooks the handler and the proxy core call per request. */
  readonly requests: RequestTracer;
  /** Spans this tracer dropped so far, by reason. */
  readonly dropped: Readonly<Record<DropReason, number>>;
  /** Exports every span ended so far; resolves when the export has succeeded or failed (a failure is counted). */
  forceFlush(): Promise<void>;
  /** Exports what is queued and stops; resolves within `timeoutMs` whatever the collector does. */
  shutdown(timeoutMs: number): Promise<void>;
}

export interface TracingOptions {
  log: Logger;
  /** The gateway's clock (milliseconds): spaces the log lines about drops. */
  now?: () => number;
  /** service.version and the instrumentation scope's version. */
  version: string;
  /** Spans go here instead of the OTLP exporter (bench/trace-floor.ts measures the SDK without an export). */
  exporter?: SpanExporter;
}

export async function createTracing(settings: TraceSettings, opts: TracingOptions): Promise<Tracing> {
  const [api, sdk, resources, otlp, request] = await Promise.all([
    import('@opentelemetry/api'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/exporter-trace-otlp-proto'),
    import('./request.ts'),
  ]);
  const { log, version } = opts;
  const now = opts.now ?? Date.now;
  const dropped: Record<DropReason, number> = { queue_full: 0, export: 0 };
  let loggedAt = -Infinity;
  function drop(reason: DropReason, spans: number, cause: string): void {
    dropped[reason] += spans;
    countDropped(reason, spans);
    const t = now();
    if (t - loggedAt < DROP_LOG_EVERY_MS) return;
    loggedAt = t;
    log.warn({ reason, cause, spans, dropped: { ...dropped }, endpoint: new URL(settings.url).origin },
      'trace spans dropped (at most one line a minute; sluice_trace_spans_dropped_total counts every one)');
  }

  const exporter: SpanExporter = opts.exporter ?? new otlp.OTLPTraceExporter({
    url: settings.url,
    headers: { ...settings.headers },
    timeoutMillis: settings.timeoutMs,
    compression: settings.compression as ExporterConfig['compression'],
  });
  // A failed export loses its batch: counted here, where the cause is known. The batch processor
  // is then told the export succeeded. It never retries a batch, so that changes nothing but one
  // bug: told of a failure, BatchSpanProcessorBase (sdk-trace 2.12) clears its "exporting" flag in
  // its finally(), which starts the next export, and again in its catch(), while that export is in
  // flight, so the next span to end starts one more. With a collector that never answers, each
  // timeout added an export in flight, up to the exporter's 30, and every 3 s all of them encoded
  // their 64 spans at once: a 20-70 ms stall of every request (the spec: Export() is never called
  // concurrently). tests/trace/exporter.test.ts holds one export at a time.
  const counting: SpanExporter = {
    export(spans, done) {
      exporter.export(spans, (result) => {
        if (result.code !== 0) drop('export', spans.length, causeOf(result.error));
        done({ code: 0 });
      });
    },
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
  };
  // The processor reports a span dropped for a full queue only through its self-observability
  // counter (experimental in the SDK; tests/trace/faults.test.ts holds it): a meter that keeps that one.
  const noop = api.createNoopMeter();
  const meter: Meter = Object.create(noop);
  meter.createCounter = (name, options) => name !== PROCESSED ? noop.createCounter(name, options) : {
    add(n, attributes) {
      if (attributes?.['error.type'] === 'queue_full') drop('queue_full', n, 'the export queue is full');
    },
  };
  const selfObsMeterProvider: MeterProvider = { getMeter: () => meter };
  const buffer = {
    maxQueueSize: settings.maxQueueSize,
    maxExportBatchSize: settings.maxExportBatchSize,
    scheduledDelayMillis: settings.scheduleDelayMs,
    exportTimeoutMillis: settings.exportTimeoutMs,
    selfObsMeterProvider,
  };
  const processor = new sdk.BatchSpanProcessor(counting, buffer);
  const provider = new sdk.BasicTracerProvider({
    resource: resources.defaultResource().merge(resources.resourceFromAttributes({
      ...settings.resource, 'service.name': settings.serviceName, 'service.version': version,
    })),
    sampler: samplerOf(settings, sdk),
    // Explicit, so that no OTEL_*_LIMIT variable applies unread and unchecked.
    spanLimits: {
      attributeValueLengthLimit: 1024, attributeCountLimit: 128, linkCountLimit: 128, eventCountLimit: 128,
      attributePerEventCountLimit: 128, attributePerLinkCountLimit: 128,
    },
    spanProcessors: [processor],
  });
  log.info({ endpoint: new URL(settings.url).origin, sampler: settings.sampler, ratio: settings.ratio, service: settings.serviceName }, 'tracing on: spans exported over OTLP http/protobuf');

  return {
    requests: new request.RequestTracer(provider.getTracer(SCOPE, version)),
    dropped,
    forceFlush: () => provider.forceFlush().catch(() => {}),
    async shutdown(timeoutMs) {
      let timer: NodeJS.Timeout | undefined;
      const done = provider.shutdown().then(() => true, () => true);
      const late = new Promise<boolean>((resolve) => (timer = setTimeout(resolve, Math.max(0, timeoutMs), false)));
      const finished = await Promise.race([done, late]);
      clearTimeout(timer);
      if (!finished) log.warn({ timeout_ms: timeoutMs }, 'the last trace export did not finish in time: the spans still queued are lost');
    },
  };
}

/** The sampler OTEL_TRACES_SAMPLER names, the ratio ones with OTEL_TRACES_SAMPLER_ARG. */
function samplerOf(s: TraceSettings, sdk: typeof import('@opentelemetry/sdk-trace-base')): Sampler {
  switch (s.sampler) {
    case 'always_on': return new sdk.AlwaysOnSampler();
    case 'always_off': return new sdk.AlwaysOffSampler();
    case 'traceidratio': return new sdk.TraceIdRatioBasedSampler(s.ratio);
    case 'parentbased_always_on': return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOnSampler() });
    case 'parentbased_always_off': return new sdk.ParentBasedSampler({ root: new sdk.AlwaysOffSampler() });
    case 'parentbased_traceidratio': return new sdk.ParentBasedSampler({ root: new sdk.TraceIdRatioBasedSampler(s.ratio) });
  }
}

/** A failed export's cause in a few words: the status the collector answered, or the network error; never a response body. */
function causeOf(err: unknown): string {
  if (!(err instanceof Error)) return 'export failed';
  const code = (err as { code?: unknown }).code;
  return typeof code === 'number' ? `HTTP ${code} ${err.message}` : typeof code === 'string' ? `${code} ${err.message}` : err.message;
}
