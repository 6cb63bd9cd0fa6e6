// One exchange: a request the chain passed, from its forward to its row. It relays the upstream
// response byte for byte (pausing the upstream while the client cannot take more), lets the usage
// tap read a copy, adds response headers only, and makes exactly one row whatever ends it.
// Hot path: one object per request; its listeners are module-level functions that find the
// exchange through a symbol on the emitter, so no closure is allocated per request.

import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import { rowCost, type Catalog, type Prices } from '../catalog.ts';
import type { Ctx } from '../context.ts';
import { GatewayError, renderError, streamErrorEvent, type ErrorCode } from '../errors.ts';
import type { Outcome, RequestRow } from '../store/store.ts';
import type { OpenList } from './open-list.ts';
import { UsageTap, usageOf } from './usage-tap.ts';

/** The exchange an emitter (client request and response, upstream request and response) belongs to. */
export const EXCHANGE = Symbol('sluice.exchange');
type Tagged<T> = T & { [EXCHANGE]?: Exchange };

/** What every exchange shares: set up once by createProxy. */
export interface ExchangeCore {
  record(row: RequestRow): void;
  now(): number;
  catalog: Pick<Catalog, 'prices'>;
  tierPrices: Map<string, Prices>;
  /** Exchanges between forward() and their row: what a shutdown must end. */
  open: OpenList<Exchange>;
}

/** Response headers that are the hop's own, not the body's. */
const STRIP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer']);

export class Exchange {
  readonly ctx: Ctx;
  readonly core: ExchangeCore;
  /** performance.now() when the upstream request got its socket. */
  sentAt = 0;
  timedOut = false;
  /** Whether the upstream request went out on a kept-alive socket (the one race worth a retry). */
  reusedSocket = false;
  retried = false;
  status = 0;
  ttfb = -1;
  tap: UsageTap | null = null;
  done = false;
  upstreamReq: ClientRequest | null = null;
  upstreamRes: IncomingMessage | null = null;
  /** The http-proxy-3 options the upstream request went out with (a retry reuses them). */
  upstreamOptions: object | null = null;
  /** The response is an SSE stream (set once the upstream's headers arrived). */
  isStream = false;
  /** Its place in core.open. */
  slot = -1;

  constructor(ctx: Ctx, core: ExchangeCore) {
    this.ctx = ctx;
    this.core = core;
    (ctx.req as Tagged<IncomingMessage>)[EXCHANGE] = this;
    core.open.add(this);
    // A client that leaves first: record what was seen (http-proxy-3 aborts the upstream request).
    ctx.res.on('close', onClientClose);
  }

  /** The upstream request has its socket and is about to be written. */
  sent(proxyReq: ClientRequest): void {
    this.sentAt = performance.now();
    this.reusedSocket = proxyReq.reusedSocket;
    this.upstreamReq = proxyReq;
    (proxyReq as Tagged<ClientRequest>)[EXCHANGE] = this;
    proxyReq.on('timeout', onUpstreamTimeout);
  }

  /** The upstream's headers arrived: answer the client with them (and sluice's), then relay the body. */
  respond(proxyRes: IncomingMessage): void {
    const { ctx } = this;
    const res = ctx.res;
    this.status = proxyRes.statusCode ?? 502;
    this.ttfb = performance.now() - ctx.t0;
    // From the raw pairs straight into writeHead's array form: no headers object is built either side.
    const raw = proxyRes.rawHeaders;
    const headers: string[] = [];
    let isStream = false;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i].toLowerCase();
      if (STRIP_RESPONSE.has(name)) continue;
      if (name === 'content-type' && raw[i + 1].includes('text/event-stream')) isStream = true;
      headers.push(raw[i], raw[i + 1]);
    }
    headers.push(
      'x-sluice-tier', ctx.tier ?? 'none',
      'x-sluice-model', ctx.model ?? ctx.requestedModel ?? '',
      'x-sluice-degradation', ctx.degradation,
      'x-sluice-request-id', ctx.id,
      'server-timing', `sluice;dur=${(this.sentAt - ctx.t0).toFixed(2)}`,
    );
    this.isStream = isStream;
    this.tap = new UsageTap(ctx.dialect, isStream);
    if (res.destroyed) return; // the client left while the headers were on their way
    res.writeHead(this.status, headers);
    if (isStream) res.flushHeaders();
    this.upstreamRes = proxyRes;
    (proxyRes as Tagged<IncomingMessage>)[EXCHANGE] = this;
    proxyRes.on('data', onUpstreamData);
    proxyRes.on('end', onUpstreamEnd);
    proxyRes.on('close', onUpstreamClose);
    proxyRes.on('error', ignore); // 'close' handles it; an unhandled 'error' would crash the process
    res.on('drain', onClientDrain);
  }

  /** The upstream failed or went silent after the response began: one error event (a stream) or a cut (JSON), then the row. */
  failMidResponse(): void {
    const res = this.ctx.res;
    if (!res.destroyed && !res.writableEnded) {
      if (this.isStream) res.end(this.streamError(this.timedOut ? 'upstream_timeout' : 'upstream_stream_failed'));
      else res.destroy();
    }
    this.finish('upstream_error');
  }

  /** The upstream could not be reached (or timed out) before any response: the client gets the error. */
  failBeforeResponse(code: 'upstream_timeout' | 'upstream_unreachable'): void {
    const err = new GatewayError(code);
    this.status = err.status;
    renderError(this.ctx.res, this.ctx.dialect, err);
    this.finish('upstream_error');
  }

  /** The shutdown's grace is over: end the exchange now with its dialect's error. */
  interrupt(): void {
    const { res, dialect } = this.ctx;
    if (!res.headersSent) renderError(res, dialect, new GatewayError('shutting_down'));
    else if (!res.writableEnded && !res.destroyed) {
      if (this.isStream) res.end(this.streamError('shutting_down'));
      else res.destroy();
    }
    this.finish('gateway_error');
    this.upstreamReq?.destroy();
  }

  /** The events that end this stream with an error; a Responses stream's continue its numbering and name its response. */
  private streamError(code: ErrorCode): string {
    const tap = this.tap;
    return streamErrorEvent(this.ctx.dialect, code, { sequence: tap?.responseEvents ?? 0, responseId: tap?.usage.generation_id ?? null });
  }

  /** Writes the row exactly once, whatever ended the exchange. */
  finish(outcome: Outcome): void {
    if (this.done) return;
    this.done = true;
    const { ctx, core } = this;
    core.open.delete(this);
    // No tap: the exchange ended before any response (a client gone first, an upstream down).
    const u = this.tap?.finish() ?? usageOf(ctx.dialect, undefined);
    const prices = ctx.tier ? core.tierPrices.get(ctx.tier) : ctx.model ? core.catalog.prices(ctx.profile!.router, ctx.model) : undefined;
    const cost = rowCost(u, prices);
    const end = performance.now();
    core.record({
      id: ctx.id,
      ts: new Date(core.now()).toISOString(),
      endpoint: ctx.route as RequestRow['endpoint'],
      profile: ctx.profile!.name,
      key_prefix: ctx.key!.row.prefix,
      end_user: ctx.endUser,
      session: ctx.session,
      run: ctx.run,
      tier: ctx.tier,
      requested_model: ctx.requestedModel,
      model: u.model ?? ctx.model ?? ctx.requestedModel,
      stream: ctx.stream,
      status: outcome === 'client_disconnect' && this.status === 0 ? 499 : this.status,
      outcome,
      input_tokens: u.input_tokens,
      output_tokens: u.output_tokens,
      cache_read_tokens: u.cache_read_tokens,
      cache_write_tokens: u.cache_write_tokens,
      reasoning_tokens: u.reasoning_tokens,
      cost_usd: cost.cost_usd,
      cost_source: cost.cost_source,
      provider: u.provider,
      degradation: ctx.degradation,
      generation_id: u.generation_id,
      ttfb_ms: this.ttfb < 0 ? null : Math.round(this.ttfb),
      duration_ms: Math.round(end - ctx.t0),
      overhead_ms: this.sentAt ? Math.round((this.sentAt - ctx.t0) * 100) / 100 : null,
      tools: u.tools,
    });
  }
}

// The listeners: `this` is the emitter; the exchange rides on it (or on the client request).

function onUpstreamData(this: Tagged<IncomingMessage>, chunk: Buffer): void {
  const ex = this[EXCHANGE]!;
  ex.tap!.write(chunk);
  const res = ex.ctx.res;
  if (res.writableEnded) return; // ended by a shutdown's interrupt(): a write now would be an error
  if (!res.write(chunk)) this.pause();
}

function onUpstreamEnd(this: Tagged<IncomingMessage>): void {
  const ex = this[EXCHANGE]!;
  ex.ctx.res.end();
  ex.finish(ex.tap!.finish().error || ex.status >= 400 ? 'upstream_error' : 'ok');
}

function onUpstreamClose(this: Tagged<IncomingMessage>): void {
  const ex = this[EXCHANGE]!;
  if (this.complete || ex.done) return;
  ex.failMidResponse();
}

function onUpstreamTimeout(this: Tagged<ClientRequest>): void {
  this[EXCHANGE]!.timedOut = true;
}

function onClientDrain(this: ServerResponse): void {
  // The upstream response is the one paused in onUpstreamData.
  (this.req as Tagged<IncomingMessage>)[EXCHANGE]?.upstreamRes?.resume();
}

function onClientClose(this: ServerResponse): void {
  if (this.writableFinished) return;
  (this.req as Tagged<IncomingMessage>)[EXCHANGE]?.finish('client_disconnect');
}

function ignore(): void {}
