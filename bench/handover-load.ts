// The traffic of the handover scenario (bench/handover-scenario.ts), open loop and bounded, all on
// loopback: non-streamed chat at a fixed rate over a keep-alive undici Pool, short streams at a
// fixed rate and long streams on demand, each stream on a connection of its own. Every request
// becomes one Sample: when it was due, how long it took from then (no coordinated omission), its
// status or transport error, sluice's request id, the router's generation id, the usage the client
// saw and, for streams, whether it ended with its final event and equals the router's bytes.
// Chat samples also carry when their connection was opened and whether the answer said
// `connection: close` (read through undici's diagnostics channels), which is how a report tells
// the requests a new generation served from those of the one draining.

import diagnostics from 'node:diagnostics_channel';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Pool } from 'undici';
import { streamCall, streamEnding, streamRequest, sseEvents, type StreamResult } from './stream-client.ts';

/** No tier: sluice forwards it as given, so a request sent to the router directly asks the same. */
export const MODEL = 'google/gemini-2.5-flash';
/** The `x-sluice-run` label of the load (rows are counted by it). */
export const RUN = 'handover';
export const SHORT_SIM = 'chunks=5';
/** A stream of `chunks` content events one second apart. */
export const longSim = (chunks: number) => `chunks=${chunks};chunk-delay-ms=1000`;

export type Kind = 'chat' | 'short' | 'long';

/** Usage as the stored row counts it: input without cached tokens, output, the router's cost. */
export interface Usage { input: number; output: number; cost: number | null }

export interface Sample {
  kind: Kind;
  seq: number;
  /** performance.now() when it was due to leave. */
  at: number;
  /** ms from `at` to the end of the response (or the failure). */
  ms: number;
  status: number;
  error?: string;
  requestId: string;
  generationId: string;
  usage?: Usage;
  /** Chat: performance.now() when its connection was opened; whether the answer said connection: close. */
  connAt?: number;
  /** Chat: performance.now() when its request head went out on that connection. */
  sentAt?: number;
  /** Chat: the first request sent on its connection (it waited for the connection to open). */
  firstOnConn?: boolean;
  closeHeader?: boolean;
  /** Chat: sent in a burst at a handover (kept out of the latency windows). */
  burst?: boolean;
  /** Streams: ended with the dialect's final event; the digest and length of the bytes received. */
  complete?: boolean;
  digest?: string;
  bytes?: number;
}

/** A stream's expected bytes: its digest and length as the router sends it. */
export interface Reference { digest: string; bytes: number }

export interface TrafficOptions {
  /** http://127.0.0.1:port (the shared socket). */
  origin: string;
  key: string;
  chatRate: number;
  connections: number;
  shortRate: number;
  longChunks: number;
  /** Bound: a request due while this many are in flight is not sent (counted as shed). */
  maxInFlight: number;
}

function usageOf(u: any): Usage | undefined {
  if (u === null || typeof u !== 'object') return undefined;
  const cached = Number(u.prompt_tokens_details?.cached_tokens ?? 0);
  const written = Number(u.prompt_tokens_details?.cache_write_tokens ?? 0);
  return { input: Number(u.prompt_tokens) - cached - written, output: Number(u.completion_tokens), cost: typeof u.cost === 'number' ? u.cost : null };
}

/** The usage of a finished chat stream: its usage chunk's. */
export function streamUsage(text: string): Usage | undefined {
  for (const e of sseEvents(text).reverse()) {
    if (!e.data.includes('"usage"')) continue;
    try {
      return usageOf(JSON.parse(e.data).usage);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

/** The reference bytes of a chat stream steered by `sim`, asked of the router directly. */
export async function reference(routerOrigin: string, upstreamKey: string, sim: string): Promise<Reference> {
  const r = await streamRequest({ origin: routerOrigin, ...streamCall('chat', { key: upstreamKey, direct: true, model: MODEL, sim }) });
  if (r.status !== 200 || r.error) throw new Error(`the router's reference stream (${sim}) failed: ${r.status} ${r.error ?? ''}`);
  return { digest: r.digest, bytes: r.bytes };
}

const header = (v: string | string[] | undefined): string => (Array.isArray(v) ? v[0] ?? '' : v ?? '');

/**
 * The load alone for `seconds` (a new pool, as Traffic always opens): every request's sample in
 * the order they were due. Throws when any was not answered 200.
 */
export async function runLoad(o: TrafficOptions, seconds: number): Promise<Sample[]> {
  const traffic = new Traffic(o);
  traffic.start();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  await traffic.stop();
  const failed = traffic.samples.filter((x) => x.status !== 200);
  if (failed.length > 0) throw new Error(`${failed.length} requests failed (${failed[0]!.status} ${failed[0]!.error ?? ''})`);
  return traffic.samples.sort((a, b) => a.at - b.at);
}

/** Requests through serverCloses: enough for V8 to compile undici's path for a server's close. */
const SERVER_CLOSES_REQUESTS = 2_000;

/**
 * Runs this process's undici through a server that ends connections itself: `requests` over a pool
 * of `connections` to a throwaway local server answering every other request `connection: close`.
 * A draining sluice closes connections that way, which undici handles on another path than a
 * close the request asked for (Traffic.reconnect's): left cold, that path was compiled at the
 * first handover, in this process, and counted against the new generation's first requests.
 */
async function serverCloses(connections: number, requests: number): Promise<void> {
  let n = 0;
  const server = http.createServer((req, res) => {
    req.resume();
    req.once('end', () => {
      if (n++ % 2 === 0) res.setHeader('connection', 'close');
      res.end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections, pipelining: 1 });
  try {
    await Promise.all(Array.from({ length: requests }, async () => {
      const res = await pool.request({ path: '/', method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
      await res.body.text();
    }));
  } finally {
    await pool.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

export class Traffic {
  readonly samples: Sample[] = [];
  shed = 0;
  private readonly o: TrafficOptions;
  private readonly pool: Pool;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly waitingForSocket = new Map<number, Sample>();
  private readonly opened = new WeakMap<object, number>();
  private readonly used = new WeakSet<object>();
  private seq = 0;
  /** The pending timer of each schedule. */
  private readonly timers: Array<NodeJS.Timeout | undefined> = [];
  private stopped = false;
  private stopping: Promise<void> | undefined;
  private readonly chatBody: string;
  private readonly onConnected = (m: any) => this.opened.set(m.socket, performance.now());
  private readonly onSendHeaders = (m: any) => {
    const at = typeof m.headers === 'string' ? m.headers.indexOf('x-load-seq: ') : -1;
    if (at < 0) return;
    const s = this.waitingForSocket.get(Number.parseInt(m.headers.slice(at + 12), 10));
    if (s) {
      s.connAt = this.opened.get(m.socket);
      s.sentAt = performance.now();
      s.firstOnConn = !this.used.has(m.socket);
      this.used.add(m.socket);
    }
  };

  constructor(o: TrafficOptions) {
    this.o = o;
    this.pool = new Pool(o.origin, { connections: o.connections, pipelining: 1 });
    this.chatBody = JSON.stringify({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello.' }] });
  }

  /** Starts the open-loop chat and short-stream schedules (from now until stop()). */
  start(): void {
    diagnostics.subscribe('undici:client:connected', this.onConnected);
    diagnostics.subscribe('undici:client:sendHeaders', this.onSendHeaders);
    this.schedule(this.o.chatRate, (at) => this.chat(at));
    if (this.o.shortRate > 0) this.schedule(this.o.shortRate, (at) => this.stream('short', SHORT_SIM, at));
  }

  /** Opens `n` long streams; resolves once each has its response head (or has failed). */
  long(n: number): Promise<void> {
    const heads: Array<Promise<void>> = [];
    for (let i = 0; i < n; i++) {
      let headed!: () => void;
      heads.push(new Promise<void>((r) => (headed = r)));
      this.stream('long', longSim(this.o.longChunks), performance.now(), headed);
    }
    return Promise.all(heads).then(() => {});
  }

  /** Sends `n` chat requests at once, over the pool, outside the schedule. */
  burst(n: number): void {
    for (let i = 0; i < n; i++) this.chat(performance.now(), true);
  }

  /**
   * Makes every connection of the pool close and open again, `rounds` times (one request each with
   * `connection: close`, kept out of the latency windows like a burst). Run once before the first
   * handover: a handover makes every connection reconnect at once, and this process's own first
   * reconnects (undici's connect path compiled for the first time) would otherwise be counted
   * against the new generation's first requests.
   */
  async reconnect(rounds: number): Promise<void> {
    for (let r = 0; r < rounds; r++) {
      await Promise.all(Array.from({ length: this.o.connections }, () => this.chat(performance.now(), true, true)));
    }
    await serverCloses(this.o.connections, SERVER_CLOSES_REQUESTS);
  }

  /** Stops the schedules and waits for every request still in flight, long streams included (once). */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      this.stopped = true;
      for (const t of this.timers) clearTimeout(t);
      while (this.inFlight.size > 0) await Promise.all([...this.inFlight]);
      diagnostics.unsubscribe('undici:client:connected', this.onConnected);
      diagnostics.unsubscribe('undici:client:sendHeaders', this.onSendHeaders);
      await this.pool.close();
    })();
    return this.stopping;
  }

  /** Request i of a schedule leaves at t0 + i/rate; a late timer sends every request already due. */
  private schedule(rate: number, send: (at: number) => void): void {
    const t0 = performance.now();
    const interval = 1000 / rate;
    const slot = this.timers.push(undefined) - 1;
    let i = 0;
    const tick = () => {
      if (this.stopped) return;
      const now = performance.now();
      for (; t0 + i * interval <= now; i++) {
        if (this.inFlight.size >= this.o.maxInFlight) this.shed++;
        else send(t0 + i * interval);
      }
      this.timers[slot] = setTimeout(tick, Math.max(0, t0 + i * interval - performance.now()));
    };
    tick();
  }

  private track(p: Promise<void>): void {
    this.inFlight.add(p);
    void p.finally(() => this.inFlight.delete(p));
  }

  private chat(at: number, burst?: boolean, close?: boolean): Promise<void> {
    const s: Sample = { kind: 'chat', seq: ++this.seq, at, ms: NaN, status: 0, requestId: '', generationId: '', burst };
    this.waitingForSocket.set(s.seq, s);
    const done = (async () => {
      try {
        const res = await this.pool.request({
          path: '/v1/chat/completions', method: 'POST', body: this.chatBody,
          headers: {
            authorization: `Bearer ${this.o.key}`, 'content-type': 'application/json', 'x-sluice-run': RUN, 'x-load-seq': String(s.seq),
            ...(close ? { connection: 'close' } : {}),
          },
        });
        s.status = res.statusCode;
        s.requestId = header(res.headers['x-sluice-request-id']);
        s.generationId = header(res.headers['x-generation-id']);
        s.closeHeader = header(res.headers.connection).toLowerCase() === 'close';
        const text = await res.body.text();
        try {
          s.usage = usageOf(JSON.parse(text).usage);
        } catch {
          // not JSON: the status says what happened
        }
      } catch (err) {
        s.error = (err as NodeJS.ErrnoException).code ?? (err as Error).message;
      }
      s.ms = performance.now() - at;
      this.waitingForSocket.delete(s.seq);
      this.samples.push(s);
    })();
    this.track(done);
    return done;
  }

  private stream(kind: 'short' | 'long', sim: string, at: number, headed?: () => void): void {
    const s: Sample = { kind, seq: ++this.seq, at, ms: NaN, status: 0, requestId: '', generationId: '' };
    const call = streamCall('chat', { key: this.o.key, direct: false, model: MODEL, sim, run: RUN });
    this.track(streamRequest({ origin: this.o.origin, ...call, keepText: true, timeoutMs: 600_000, onResponse: headed }).then((r: StreamResult) => {
      headed?.();
      s.ms = performance.now() - at;
      s.status = r.status;
      s.error = r.error;
      s.requestId = r.requestId;
      s.generationId = r.generationId;
      s.complete = r.status === 200 && !r.error && streamEnding('chat', r.text ?? '').complete;
      s.usage = streamUsage(r.text ?? '');
      s.digest = r.digest; // the text itself is dropped here
      s.bytes = r.bytes;
      this.samples.push(s);
    }));
  }
}
