// The OpenTelemetry variables sluice reads for its traces (the standard OTEL_* names, not SLUICE_*
// ones), read once at start-up by readTraceSettings(env) with the same strictness as
// lib/settings.ts: every bad value is collected and all of them are thrown together as one
// ConfigError (sluice exits 78), each naming the variable and what it must be. Tracing is off
// (null) unless an OTLP endpoint is set. Only OTLP over http/protobuf is exported: `grpc` and
// `http/json` are refused by name. A header value or an endpoint is never echoed in a problem (it
// may carry a token). Nothing here loads the OpenTelemetry SDK.

import { ConfigError } from '../config.ts';

type Env = Readonly<Record<string, string | undefined>>;

export const SAMPLERS = ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** What the tracer is built from (lib/trace/tracing.ts); all durations in milliseconds. */
export interface TraceSettings {
  /** Where spans are posted: the traces endpoint itself, `/v1/traces` included. */
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  /** How long one export may take (a collector slower than this loses that batch, counted as dropped). */
  readonly timeoutMs: number;
  readonly compression: 'gzip' | 'none';
  readonly sampler: SamplerName;
  /** The ratio of the *traceidratio samplers (0 to 1). */
  readonly ratio: number;
  readonly serviceName: string;
  /** OTEL_RESOURCE_ATTRIBUTES, service.name aside (serviceName wins over it). */
  readonly resource: Readonly<Record<string, string>>;
  /** Spans held for export at most; one more is dropped and counted. */
  readonly maxQueueSize: number;
  readonly maxExportBatchSize: number;
  /** The longest a finished span waits before its batch is exported. */
  readonly scheduleDelayMs: number;
  /** How long the batch processor waits for one export before starting the next. */
  readonly exportTimeoutMs: number;
}

/** The defaults, as docs/observability.md and docs/configuration.md state them. */
export const TRACE_DEFAULTS = {
  timeoutMs: 3_000,
  sampler: 'parentbased_traceidratio' as SamplerName,
  ratio: 1,
  serviceName: 'sluice',
  maxQueueSize: 2048,
  // Not the SDK's 512: a batch is encoded on the event loop in one go, about 20 µs a span, so 512
  // spans held every request behind them for about 10 ms (bench --trace, 2 KB chat at 1,000 req/s:
  // p99 16.1 ms traced against 8.6 untraced; with 64, 6.4 against 7.4, and 87 µs of CPU per
  // request added against 110-113).
  maxExportBatchSize: 64,
  scheduleDelayMs: 5_000,
} as const;

const PROTOCOL_HINT = "sluice exports OTLP over http/protobuf only: leave it unset or set it to http/protobuf, and point the endpoint at the collector's OTLP/HTTP port (4318 by default)";

/** The value of the first of `names` that is set and not blank, with the name it came from. */
function first(env: Env, names: readonly string[]): { name: string; value: string } | undefined {
  for (const name of names) {
    const v = env[name];
    if (v !== undefined && v.trim() !== '') return { name, value: v.trim() };
  }
  return undefined;
}

/** An http: or https: URL, or undefined. */
function httpUrl(text: string): URL | undefined {
  try {
    const u = new URL(text);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u : undefined;
  } catch {
    return undefined;
  }
}

/** A whole number from `min` up, or undefined. */
function whole(text: string, min: number): number | undefined {
  if (!/^\d+$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n >= min ? n : undefined;
}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/**
 * `key=value,key=value` with percent-encoded values (the OTLP headers and resource attributes
 * format). Returns the pairs, or a reason; a value is never part of the reason.
 */
function pairs(text: string, what: 'header' | 'attribute'): Record<string, string> | string {
  const out: Record<string, string> = {};
  for (const item of text.split(',')) {
    if (item.trim() === '') continue;
    const eq = item.indexOf('=');
    const key = (eq < 0 ? item : item.slice(0, eq)).trim();
    if (eq < 0 || key === '') return `each item must be key=value (${what} ${JSON.stringify(key.slice(0, 40))} is not)`;
    if (what === 'header' && !TOKEN.test(key)) return `${JSON.stringify(key.slice(0, 40))} is not a header name`;
    let value: string;
    try {
      value = decodeURIComponent(item.slice(eq + 1).trim());
    } catch {
      return `the value of ${JSON.stringify(key.slice(0, 40))} is not percent-encoded correctly`;
    }
    if (what === 'header' && /[\r\n\0]/.test(value)) return `the value of ${JSON.stringify(key.slice(0, 40))} holds a line break`;
    out[what === 'header' ? key.toLowerCase() : key] = value;
  }
  return out;
}

/**
 * The trace settings from `env`, or null when tracing is off: no OTLP endpoint,
 * `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`. Every bad value is reported at once, as
 * one ConfigError (exit 78), whether or not tracing would be on.
 */
export function readTraceSettings(env: Env): TraceSettings | null {
  const problems: string[] = [];
  const bad = (name: string, must: string, raw?: string) => problems.push(`${name} must be ${must}${raw === undefined ? '' : `, got ${JSON.stringify(raw)}`}`);

  let off = false;
  const disabled = first(env, ['OTEL_SDK_DISABLED']);
  if (disabled) {
    const v = disabled.value.toLowerCase();
    if (v === 'true') off = true;
    else if (v !== 'false') bad(disabled.name, 'true or false', disabled.value);
  }
  const exporter = first(env, ['OTEL_TRACES_EXPORTER']);
  if (exporter) {
    if (exporter.value === 'none') off = true;
    else if (exporter.value !== 'otlp') bad(exporter.name, 'otlp or none (sluice exports OTLP only)', exporter.value);
  }

  // The signal's own endpoint is used as it is; the general one is a base that /v1/traces is joined to.
  let url: string | undefined;
  const own = first(env, ['OTEL_EXPORTER_OTLP_TRACES_ENDPOINT']);
  const base = first(env, ['OTEL_EXPORTER_OTLP_ENDPOINT']);
  if (own) {
    if (httpUrl(own.value)) url = own.value;
    else bad(own.name, 'an http:// or https:// URL (the value is not shown: it may hold a credential)');
  } else if (base) {
    const u = httpUrl(base.value);
    if (u) url = new URL('v1/traces', u.href.endsWith('/') ? u : new URL(`${u.href}/`)).href;
    else bad(base.name, 'an http:// or https:// URL (the value is not shown: it may hold a credential)');
  }

  const protocol = first(env, ['OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', 'OTEL_EXPORTER_OTLP_PROTOCOL']);
  if (protocol && protocol.value !== 'http/protobuf') {
    const known = protocol.value === 'grpc' || protocol.value === 'http/json';
    problems.push(`${protocol.name}=${protocol.value} is ${known ? 'not supported' : 'not a protocol sluice knows'}: ${PROTOCOL_HINT}`);
  }

  const headers: Record<string, string> = {};
  for (const name of ['OTEL_EXPORTER_OTLP_HEADERS', 'OTEL_EXPORTER_OTLP_TRACES_HEADERS']) {
    const raw = first(env, [name]);
    if (!raw) continue;
    const parsed = pairs(raw.value, 'header');
    if (typeof parsed === 'string') bad(name, `comma-separated name=value pairs with percent-encoded values: ${parsed} (the values are not shown)`);
    else Object.assign(headers, parsed); // the traces variable is read second: it wins
  }

  let timeoutMs: number = TRACE_DEFAULTS.timeoutMs;
  const timeout = first(env, ['OTEL_EXPORTER_OTLP_TRACES_TIMEOUT', 'OTEL_EXPORTER_OTLP_TIMEOUT']);
  if (timeout) {
    const n = whole(timeout.value, 1);
    if (n === undefined) bad(timeout.name, 'a whole number of milliseconds above 0', timeout.value);
    else timeoutMs = n;
  }

  let compression: 'gzip' | 'none' = 'none';
  const comp = first(env, ['OTEL_EXPORTER_OTLP_TRACES_COMPRESSION', 'OTEL_EXPORTER_OTLP_COMPRESSION']);
  if (comp) {
    if (comp.value === 'gzip' || comp.value === 'none') compression = comp.value;
    else bad(comp.name, 'gzip or none', comp.value);
  }

  let sampler: SamplerName = TRACE_DEFAULTS.sampler;
  const s = first(env, ['OTEL_TRACES_SAMPLER']);
  if (s) {
    if ((SAMPLERS as readonly string[]).includes(s.value)) sampler = s.value as SamplerName;
    else bad(s.name, `one of ${SAMPLERS.join(', ')}`, s.value);
  }
  let ratio: number = TRACE_DEFAULTS.ratio;
  const arg = first(env, ['OTEL_TRACES_SAMPLER_ARG']);
  // The argument belongs to the ratio samplers; the others ignore it, as the specification says.
  if (arg && sampler.endsWith('traceidratio')) {
    const n = Number(arg.value);
    if (!Number.isFinite(n) || n < 0 || n > 1) bad(arg.name, `a number from 0 to 1 (the ratio of ${sampler})`, arg.value);
    else ratio = n;
  }

  let resource: Record<string, string> = {};
  const res = first(env, ['OTEL_RESOURCE_ATTRIBUTES']);
  if (res) {
    const parsed = pairs(res.value, 'attribute');
    if (typeof parsed === 'string') bad(res.name, `comma-separated key=value pairs with percent-encoded values: ${parsed}`);
    else resource = parsed;
  }
  const serviceName = first(env, ['OTEL_SERVICE_NAME'])?.value ?? resource['service.name'] ?? TRACE_DEFAULTS.serviceName;
  delete resource['service.name'];

  const count = (name: string, fallback: number, min: number, must: string): number => {
    const raw = first(env, [name]);
    if (!raw) return fallback;
    const n = whole(raw.value, min);
    if (n === undefined) bad(name, must, raw.value);
    return n ?? fallback;
  };
  const maxQueueSize = count('OTEL_BSP_MAX_QUEUE_SIZE', TRACE_DEFAULTS.maxQueueSize, 1, 'a whole number of spans above 0');
  const maxExportBatchSize = count('OTEL_BSP_MAX_EXPORT_BATCH_SIZE', TRACE_DEFAULTS.maxExportBatchSize, 1, 'a whole number of spans above 0');
  if (maxExportBatchSize > maxQueueSize) problems.push(`OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be at most OTEL_BSP_MAX_QUEUE_SIZE (${maxQueueSize}), got "${maxExportBatchSize}"`);
  const scheduleDelayMs = count('OTEL_BSP_SCHEDULE_DELAY', TRACE_DEFAULTS.scheduleDelayMs, 0, 'a whole number of milliseconds, 0 or more');
  // By default the export's own timeout ends a stuck export first, and the batch is counted as dropped then.
  const exportTimeoutMs = count('OTEL_BSP_EXPORT_TIMEOUT', timeoutMs + 1_000, 1, 'a whole number of milliseconds above 0');

  if (problems.length > 0) throw new ConfigError(problems);
  if (off || url === undefined) return null;
  return Object.freeze({
    url, headers: Object.freeze(headers), timeoutMs, compression, sampler, ratio, serviceName, resource: Object.freeze(resource),
    maxQueueSize, maxExportBatchSize, scheduleDelayMs, exportTimeoutMs,
  });
}
