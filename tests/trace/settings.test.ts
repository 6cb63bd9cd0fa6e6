// readTraceSettings: tracing off without an endpoint (or with OTEL_SDK_DISABLED / OTEL_TRACES_EXPORTER=none),
// the endpoint rules of the OTLP exporter specification (/v1/traces joined to the general endpoint,
// the traces endpoint used as given), the defaults, and every bad value reported at once in one
// ConfigError naming its variable (exit 78), grpc and http/json refused by name, no header value
// or endpoint echoed.

import t from 'tap';
import { ConfigError } from '../../lib/config.ts';
import { readTraceSettings, TRACE_DEFAULTS } from '../../lib/trace/settings.ts';

function problems(env: Record<string, string>): string[] {
  try {
    readTraceSettings(env);
  } catch (err) {
    if (err instanceof ConfigError) return err.problems;
    throw err;
  }
  return [];
}

t.test('off unless an endpoint is set; off when disabled', async (t) => {
  t.equal(readTraceSettings({}), null, 'no endpoint: off');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: '  ' }), null, 'blank is unset');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }), null);
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }), null);
  t.ok(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'false', OTEL_TRACES_EXPORTER: 'otlp' }));
});

t.test('the endpoint: /v1/traces joined to the general one, the traces one as given', async (t) => {
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })!.url, 'http://collector:4318/v1/traces');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://otel.example/base/' })!.url, 'https://otel.example/base/v1/traces');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://a:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://b:9999/custom' })!.url, 'http://b:9999/custom');
});

t.test('the defaults', async (t) => {
  t.same(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }), {
    url: 'http://c:4318/v1/traces', headers: {}, timeoutMs: TRACE_DEFAULTS.timeoutMs, compression: 'none',
    sampler: 'parentbased_traceidratio', ratio: 1, serviceName: 'sluice', resource: {},
    maxQueueSize: 2048, maxExportBatchSize: 64, scheduleDelayMs: 5000, exportTimeoutMs: TRACE_DEFAULTS.timeoutMs + 1000,
  });
});

t.test('every variable read', async (t) => {
  const s = readTraceSettings({
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%20abc,x-team=a', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'X-Team=b',
    OTEL_EXPORTER_OTLP_TIMEOUT: '5000', OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '1500', OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip',
    OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.25',
    OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=prod,service.name=ignored', OTEL_SERVICE_NAME: 'gw-eu',
    OTEL_BSP_MAX_QUEUE_SIZE: '4096', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '256', OTEL_BSP_SCHEDULE_DELAY: '1000', OTEL_BSP_EXPORT_TIMEOUT: '2000',
  })!;
  t.same(s.headers, { authorization: 'Bearer abc', 'x-team': 'b' }, 'decoded; the traces variable wins');
  t.match(s, { timeoutMs: 1500, compression: 'gzip', sampler: 'traceidratio', ratio: 0.25, serviceName: 'gw-eu', maxQueueSize: 4096, maxExportBatchSize: 256, scheduleDelayMs: 1000, exportTimeoutMs: 2000 });
  t.same(s.resource, { 'deployment.environment': 'prod' }, 'OTEL_SERVICE_NAME wins over service.name');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-resource' })!.serviceName, 'from-resource');
  t.equal(readTraceSettings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_SAMPLER: 'always_on', OTEL_TRACES_SAMPLER_ARG: 'whatever' })!.ratio, 1, 'the argument of a sampler that takes none is ignored');
});

t.test('grpc and http/json are refused by name, with what to do instead', async (t) => {
  for (const protocol of ['grpc', 'http/json']) {
    const [p] = problems({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: protocol });
    t.match(p, new RegExp(`^OTEL_EXPORTER_OTLP_PROTOCOL=${protocol} is not supported: sluice exports OTLP over http/protobuf only.*4318`));
  }
  t.match(problems({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc' }), [/^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=grpc is not supported/], 'refused even with tracing off');
});

t.test('every bad value at once, each naming its variable; secrets not echoed', async (t) => {
  const all = problems({
    OTEL_SDK_DISABLED: 'yes', OTEL_TRACES_EXPORTER: 'zipkin', OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4318?token=s3cret',
    OTEL_EXPORTER_OTLP_HEADERS: 'authorization', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x=%E0%A4%A', OTEL_EXPORTER_OTLP_TIMEOUT: '2s',
    OTEL_EXPORTER_OTLP_COMPRESSION: 'br', OTEL_TRACES_SAMPLER: 'jaeger_remote', OTEL_RESOURCE_ATTRIBUTES: 'novalue',
    OTEL_BSP_MAX_QUEUE_SIZE: '0', OTEL_BSP_SCHEDULE_DELAY: '-1', OTEL_BSP_EXPORT_TIMEOUT: '1.5',
  });
  const names = ['OTEL_SDK_DISABLED', 'OTEL_TRACES_EXPORTER', 'OTEL_EXPORTER_OTLP_ENDPOINT', 'OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
    'OTEL_EXPORTER_OTLP_TIMEOUT', 'OTEL_EXPORTER_OTLP_COMPRESSION', 'OTEL_TRACES_SAMPLER', 'OTEL_RESOURCE_ATTRIBUTES', 'OTEL_BSP_MAX_QUEUE_SIZE',
    'OTEL_BSP_SCHEDULE_DELAY', 'OTEL_BSP_EXPORT_TIMEOUT'];
  t.same(all.map((p) => names.find((n) => p.startsWith(n))), names, `one problem per variable, in order:\n${all.join('\n')}`);
  t.notOk(all.join('\n').includes('s3cret'), 'the endpoint is not echoed');
  t.match(problems({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_SAMPLER_ARG: '1.5' }), [/^OTEL_TRACES_SAMPLER_ARG must be a number from 0 to 1/]);
  t.match(problems({ OTEL_EXPORTER_OTLP_HEADERS: 'x-key=abc\r\nevil: 1' }), [/line break/]);
  t.notOk(problems({ OTEL_EXPORTER_OTLP_HEADERS: 'x-key=abc\r\nevil: 1' }).join('').includes('abc'), 'a header value is not echoed');
  t.match(problems({ OTEL_BSP_MAX_QUEUE_SIZE: '10', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '20' }), [/^OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be at most OTEL_BSP_MAX_QUEUE_SIZE/]);
  t.throws(() => readTraceSettings({ OTEL_TRACES_SAMPLER: 'nope' }), ConfigError, 'a ConfigError: sluice exits 78');
});
