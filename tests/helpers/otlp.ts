// The collectors the trace tests export to, all on 127.0.0.1 and port 0, closed by t.teardown.
// startReceiver: a real OTLP receiver, Elastic's mockotlpserver over OTLP/HTTP, which decodes each
// export with the official opentelemetry-proto definitions; the spans it decoded are kept,
// flattened (hex ids, plain attribute values). startFaultyCollector: a collector that answers 503,
// or one that holds every export until the test releases it (slower than any export timeout).
// closedPort: a port nothing listens on. waitForResponses: resolves once the gateway's responses
// have closed (a SERVER span sluice answers itself ends then), on the server's own events.

import { once, EventEmitter } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { MockOtlpServer } from '@elastic/mockotlpserver';
import type { Test } from 'tap';

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  kind: 'unspecified' | 'internal' | 'server' | 'client' | 'producer' | 'consumer';
  status: 'unset' | 'ok' | 'error';
  attributes: Record<string, unknown>;
  resource: Record<string, unknown>;
  scope: string;
  events: string[];
}

const KINDS = ['unspecified', 'internal', 'server', 'client', 'producer', 'consumer'] as const;
const STATUSES = ['unset', 'ok', 'error'] as const;

/** An AnyValue as a plain value (a 64-bit integer as a number: every one a span here carries is small). */
function plain(v: any): unknown {
  if (Object.hasOwn(v, 'stringValue')) return v.stringValue;
  if (Object.hasOwn(v, 'boolValue')) return v.boolValue;
  if (Object.hasOwn(v, 'doubleValue')) return v.doubleValue;
  if (Object.hasOwn(v, 'intValue')) return Number(String(v.intValue));
  if (Object.hasOwn(v, 'arrayValue')) return (v.arrayValue.values ?? []).map(plain);
  throw new Error(`an attribute value of an unexpected kind: ${JSON.stringify(v)}`);
}

function attributes(list: any[] | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const kv of list ?? []) out[kv.key] = plain(kv.value);
  return out;
}

const hex = (b: Uint8Array | undefined): string => (b && b.length > 0 ? Buffer.from(b).toString('hex') : '');

export interface Receiver {
  /** The base URL, for OTEL_EXPORTER_OTLP_ENDPOINT. */
  url: string;
  /** Every span decoded so far, in arrival order. */
  spans: ReceivedSpan[];
  /** Export requests decoded so far. */
  readonly exports: number;
  /** The SERVER span carrying this sluice.request.id, and the other spans of its trace. */
  request(id: string): { server: ReceivedSpan; client: ReceivedSpan | undefined; trace: ReceivedSpan[] };
}

/**
 * Elastic's mockotlpserver, OTLP/HTTP only. Its receivers share one diagnostics channel per
 * process, so each keeps only the spans of its own service.name (`service`).
 */
export async function startReceiver(t: Test, service: string): Promise<Receiver> {
  const spans: ReceivedSpan[] = [];
  let exports = 0;
  const server = new MockOtlpServer({
    services: ['http'], httpHostname: '127.0.0.1', httpPort: 0, logLevel: 'error',
    onTrace(request) {
      let mine = false;
      for (const rs of request.resourceSpans ?? []) {
        const resource = attributes(rs.resource?.attributes);
        if (resource['service.name'] !== service) continue;
        mine = true;
        for (const ss of rs.scopeSpans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: hex(s.traceId), spanId: hex(s.spanId), parentSpanId: hex(s.parentSpanId), name: s.name,
              kind: KINDS[s.kind ?? 0], status: STATUSES[s.status?.code ?? 0], attributes: attributes(s.attributes),
              resource, scope: ss.scope?.name ?? '', events: (s.events ?? []).map((e: any) => e.name),
            });
          }
        }
      }
      if (mine) exports++;
    },
  });
  await server.start();
  t.teardown(() => server.close());
  return {
    url: server.httpUrl!.href.replace(/\/$/, ''),
    spans,
    get exports() {
      return exports;
    },
    request(id) {
      const server = spans.find((s) => s.kind === 'server' && s.attributes['sluice.request.id'] === id);
      if (!server) throw new Error(`no SERVER span with sluice.request.id ${id} among ${spans.length} spans`);
      const trace = spans.filter((s) => s.traceId === server.traceId);
      return { server, client: trace.find((s) => s.kind === 'client'), trace };
    },
  };
}

export interface FaultyCollector {
  url: string;
  /** Export requests received so far. */
  readonly received: number;
  /** Export requests held and not answered yet. */
  readonly held: number;
  /** Resolves with the next export request received. */
  nextExport(): Promise<void>;
  /** Answers every held export 200 (and every later one at once). */
  release(): void;
}

/**
 * A collector that answers every export 503 (`503`), or holds it unanswered until release()
 * (`hold`): as slow as a collector that answers after 5 s, or after any export timeout.
 */
export async function startFaultyCollector(t: Test, mode: '503' | 'hold'): Promise<FaultyCollector> {
  const events = new EventEmitter();
  const held: ServerResponse[] = [];
  let received = 0;
  let released = false;
  const server = http.createServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => {
      received++;
      if (mode === '503') res.writeHead(503, { 'content-type': 'text/plain' }).end('unavailable');
      else if (released) res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
      else held.push(res);
      events.emit('export');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    for (const res of held.splice(0)) res.destroy();
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get received() {
      return received;
    },
    get held() {
      return held.filter((r) => !r.writableEnded && !r.destroyed).length;
    },
    nextExport: () => once(events, 'export').then(() => {}),
    release() {
      released = true;
      for (const res of held.splice(0)) if (!res.destroyed) res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    },
  };
}

/** A port on 127.0.0.1 that nothing listens on (bound, then closed). */
export async function closedPort(): Promise<number> {
  const s = net.createServer();
  s.listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/**
 * Counts the responses of `server` that have closed; `closed(n)` resolves once n have. Its close
 * listener is added after the gateway's own (the handler's and the trace's), so they have run.
 */
export function waitForResponses(server: http.Server): { closed(n: number): Promise<void> } {
  let count = 0;
  const events = new EventEmitter();
  server.on('request', (_req, res: ServerResponse) => res.on('close', () => {
    count++;
    events.emit('closed');
  }));
  return {
    async closed(n) {
      while (count < n) await once(events, 'closed');
    },
  };
}
