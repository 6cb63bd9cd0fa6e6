// `npm run bench:trace-floor [-- --requests N] [--batch N]`: the least CPU a traced request can
// cost with the OpenTelemetry SDK, whatever sluice does around it. No sluice runs: this process
// builds the tracer exactly as sluice does (lib/trace/tracing.ts's createTracing, the same sampler,
// limits, batch processor and OTLP http/protobuf exporter) and makes, per request, the two spans a
// 2 KB chat request gets (a SERVER span and its CLIENT child, with the attributes lib/trace/request.ts
// sets for it), exported to bench/otlp-sink.ts in its own process. It reports the CPU of this
// process per request, split into making the spans (the SDK) and exporting them (encoding and
// posting), the second found by the same run with an exporter that drops every batch unread.
// `npm run bench -- --trace` gives sluice's own added CPU in the same terms; docs/observability.md
// compares the two.

import { ROOT_CONTEXT, SpanKind, trace, type Tracer } from '@opentelemetry/api';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import * as A from '../lib/trace/attributes.ts';
import { createTracing } from '../lib/trace/tracing.ts';
import { readTraceSettings } from '../lib/trace/settings.ts';
import { createLogger } from '../lib/log.ts';
import { cleanup, startOtlpSink } from './servers.ts';
import { numberOption, option } from './settings.ts';

const REQUESTS = Math.round(numberOption('requests', 60_000, 1000));
const BATCH = option('batch');
const WARM = 5_000;
/** Requests made each millisecond at most (8,000 a second): the exports keep up, as they do under load. */
const PER_TURN = 8;

/** The spans of one 2 KB chat request, as lib/trace/request.ts makes them for an answered, unstreamed call. */
function request(tracer: Tracer, i: number): void {
  const path = '/v1/chat/completions';
  const server = tracer.startSpan(`POST ${path}`, {
    kind: SpanKind.SERVER,
    attributes: { [A.HTTP_REQUEST_METHOD]: 'POST', [A.HTTP_ROUTE]: path, [A.URL_PATH]: path, [A.URL_SCHEME]: 'http' },
  }, ROOT_CONTEXT);
  server.setAttribute(A.SERVER_ADDRESS, '127.0.0.1').setAttribute(A.SERVER_PORT, 8080)
    .setAttribute(A.USER_AGENT_ORIGINAL, 'OpenAI/JS 4.77.0').setAttribute(A.CLIENT_ADDRESS, '127.0.0.1')
    .setAttribute(A.NETWORK_PROTOCOL_VERSION, '1.1').setAttribute(A.SLUICE_REQUEST_ID, `01a21ca0-5f3e-7004-b979-${String(i).padStart(12, '0')}`);
  const model = 'openai/gpt-4o-mini';
  const client = tracer.startSpan(`chat ${model}`, {
    kind: SpanKind.CLIENT,
    attributes: {
      [A.GEN_AI_OPERATION_NAME]: 'chat', [A.GEN_AI_PROVIDER_NAME]: A.PROVIDER, [A.GEN_AI_REQUEST_MODEL]: model,
      [A.SERVER_ADDRESS]: '127.0.0.1', [A.SERVER_PORT]: 9000,
    },
  }, trace.setSpan(ROOT_CONTEXT, server));
  const sc = client.spanContext();
  if (`00-${sc.traceId}-${sc.spanId}-01`.length !== 55) throw new Error('traceparent');
  client.setAttribute(A.GEN_AI_REQUEST_STREAM, false).setAttribute(A.SLUICE_REQUEST_MODEL, model)
    .setAttribute(A.SLUICE_PROFILE, 'benchmark').setAttribute(A.SLUICE_KEY_PREFIX, 'sk-benchmark-ab12')
    .setAttribute(A.SLUICE_DEGRADATION, 'none').setAttribute(A.SLUICE_COST_USD, 0.000123)
    .setAttribute(A.SLUICE_COST_SOURCE, 'router').setAttribute(A.SLUICE_OUTCOME, 'ok')
    .setAttribute(A.GEN_AI_REQUEST_MAX_TOKENS, 64).setAttribute(A.OPENAI_API_TYPE, 'chat_completions')
    .setAttribute(A.SLUICE_TIER, 'standard').setAttribute(A.GEN_AI_RESPONSE_ID, `gen-1795775900-${i}`)
    .setAttribute(A.GEN_AI_RESPONSE_MODEL, model).setAttribute(A.SLUICE_PROVIDER, 'OpenAI')
    .setAttribute(A.HTTP_RESPONSE_STATUS_CODE, 200).setAttribute(A.GEN_AI_USAGE_INPUT_TOKENS, 512)
    .setAttribute(A.GEN_AI_USAGE_OUTPUT_TOKENS, 64).setAttribute(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, 0)
    .setAttribute(A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, 0).setAttribute(A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, 0);
  client.end();
  server.setAttribute(A.HTTP_RESPONSE_STATUS_CODE, 200).setAttribute(A.SLUICE_PROFILE, 'benchmark')
    .setAttribute(A.SLUICE_KEY_PREFIX, 'sk-benchmark-ab12').setAttribute(A.SLUICE_OUTCOME, 'ok');
  server.end();
}

/** An exporter that takes every batch and sends nothing. */
const DROP: SpanExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {} };

/**
 * CPU µs of this process per request, making REQUESTS requests' spans through a tracer built as
 * sluice builds it: exported (`export`), handed to an exporter that drops them (`drop`), or not
 * made at all (`loop`: the pacing alone, subtracted from the others).
 */
async function measure(url: string, mode: 'loop' | 'drop' | 'export'): Promise<number> {
  const drop = mode !== 'export';
  const env: Record<string, string> = { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: url, OTEL_TRACES_SAMPLER: 'parentbased_always_on' };
  if (BATCH !== undefined) env.OTEL_BSP_MAX_EXPORT_BATCH_SIZE = BATCH;
  const settings = readTraceSettings(env);
  if (settings === null) throw new Error('tracing settings');
  const tracing = await createTracing(settings, { log: createLogger('warn'), version: 'bench', exporter: drop ? DROP : undefined });
  const tracer = tracing.requests.tracer;
  const run = async (n: number) => {
    for (let i = 0; i < n; i++) {
      if (mode !== 'loop') request(tracer, i);
      if (i % PER_TURN === PER_TURN - 1) await new Promise((r) => setTimeout(r, 1));
    }
    await tracing.forceFlush();
  };
  await run(WARM);
  const before = process.cpuUsage();
  await run(REQUESTS);
  const used = process.cpuUsage(before);
  const lost = tracing.dropped.export + tracing.dropped.queue_full;
  await tracing.shutdown(5_000);
  if (!drop && lost > 0) throw new Error(`${lost} spans were dropped: the floor would be too low`);
  return (used.user + used.system) / REQUESTS;
}

const sink = await startOtlpSink();
const url = `${sink.origin}/v1/traces`;
try {
  const loop = await measure(url, 'loop');
  const made = (await measure(url, 'drop')) - loop;
  const total = (await measure(url, 'export')) - loop;
  process.stdout.write([
    `Trace floor: the OpenTelemetry SDK and OTLP http/protobuf exporter alone, 2 spans per request (${REQUESTS.toLocaleString('en')} requests, batch ${BATCH ?? 'default'})`,
    '',
    '| part | CPU µs per request |',
    '|---|---:|',
    `| making the spans (SDK: ids, attributes, the batch processor) | ${made.toFixed(1)} |`,
    `| exporting them (encoding, posting) | ${(total - made).toFixed(1)} |`,
    `| total | ${total.toFixed(1)} |`,
    '',
    `(The pacing loop's own ${loop.toFixed(1)} µs per request, measured alone, is taken out of each.)`,
    '',
  ].join('\n'));
} finally {
  await cleanup();
}
