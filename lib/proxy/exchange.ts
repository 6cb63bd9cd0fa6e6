// One exchange: a request the chain passed, from its forward to its row. It relays the upstream
// response byte for byte (pausing the upstream while the client cannot take more), lets the usage
// tap read a copy, adds response headers only, and makes exactly one row whatever ends it.
// It also bounds the client's side: the upstream's silence timer stops while sluice holds the
// upstream paused, a client that takes nothing for `clientStallMs` while held is cut off, and a
// response sluice ended itself that the client has not taken within `endGraceMs` loses its socket.
// Hot path: one object per request; its listeners are module-level functions that find the
// exchange through a symbol on the emitter, so no closure is allocated per request.

import type { ClientRequest, IncomingMessage, ServerResponse } from 'node:http';
import { budgetHeadersOn, pushBudgetHeaders } from '../budget-report.ts';
import { rowCost, type Catalog, type Prices } from '../catalog.ts';
import type { ReadCtx } from '../context.ts';
import { GatewayError, renderError, streamErrorEvent, type ErrorCode } from '../errors.ts';
import type { Outcome, RequestRow } from '../store/store.ts';
import type { OpenList } from './open-list.ts';
import type { RequestTrace, RequestTracer } from '../trace/request.ts';
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
  /** The upstream's silence limit (a socket timeout on the upstream request). */
  upstreamTimeoutMs: number;
  /** How long the upstream may stay paused for a client that takes nothing before the exchange ends. */
  clientStallMs: number;
  /** How long a client has to take a response sluice ended itself before its socket is destroyed. */
  endGraceMs: number;
  /** Exchanges between forward() and their row: what a shutdown must end. */
  open: OpenList<Exchange>;
  /** The trace hooks (lib/trace/request.ts); null while tracing is off. */
  trace: RequestTracer | null;
}

/** Response headers that are the hop's own, not the body's. */
const STRIP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer']);

export class Exchange {
  readonly ctx: ReadCtx;
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
  /** The size of the body sent upstream. */
  bodyBytes = 0;
  /** The upstream request was written out whole (its 'finish'): the router has the prompt. */
  reached = false;
  /** The upstream's status once its headers arrived; 0 before. */
  upstreamStatus = 0;
  /** The upstream response reached its natural end. */
  upstreamEnded = false;
  /** The router's `x-generation-id` response header, for a body that never gave the id. */
  headerGenerationId: string | null = null;
  /** performance.now() when sluice paused the upstream for the client; -1 while it flows. */
  heldAt = -1;
  /** Checks whether a held upstream has waited `clientStallMs` (see onStallCheck). */
  stallTimer: NodeJS.Timeout | null = null;
  /** Destroys a client socket that has not taken its response's end in time (see closeWithin). */
  endTimer: NodeJS.Timeout | null = null;
  /** The request's spans (lib/trace/request.ts), ended from the row; null while tracing is off or the request is not traced. */
  trace: RequestTrace | null = null;

  constructor(ctx: ReadCtx, core: ExchangeCore) {
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
    this.reached = false; // a retry's request must reach the router itself
    (proxyReq as Tagged<ClientRequest>)[EXCHANGE] = this;
    // The silence limit is a socket timeout, counted from the upstream socket's last activity;
    // hold() stops it while sluice itself keeps the upstream paused.
    proxyReq.setTimeout(this.core.upstreamTimeoutMs);
    proxyReq.on('timeout', onUpstreamTimeout);
    proxyReq.on('finish', onUpstreamSent);
  }

  /** The upstream's headers arrived: answer the client with them (and sluice's), then relay the body. */
  respond(proxyRes: IncomingMessage): void {
    const { ctx } = this;
    const res = ctx.res;
    this.status = proxyRes.statusCode ?? 502;
    this.upstreamStatus = this.status;
    this.ttfb = performance.now() - ctx.t0;
    // From the raw pairs straight into writeHead's array form: no headers object is built either side.
    const raw = proxyRes.rawHeaders;
    const headers: string[] = [];
    let isStream = false;
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i].toLowerCase();
      if (STRIP_RESPONSE.has(name)) continue;
      if (name === 'content-type' && raw[i + 1].includes('text/event-stream')) isStream = true;
      else if (name === 'x-generation-id') this.headerGenerationId = raw[i + 1];
      headers.push(raw[i], raw[i + 1]);
    }
    headers.push(
      'x-sluice-tier', ctx.tier ?? 'none',
      'x-sluice-model', ctx.model ?? ctx.requestedModel ?? '',
      'x-sluice-degradation', ctx.degradation,
      'x-sluice-request-id', ctx.id,
      'server-timing', `sluice;dur=${(this.sentAt - ctx.t0).toFixed(2)}`,
    );
    // The budget's standing (generative routes: the budget step left its view); its values come from tables.
    const view = ctx.budget;
    if (view !== null && budgetHeadersOn(ctx.profile)) pushBudgetHeaders(headers, view);
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
    this.closeWithin(this.core.endGraceMs);
  }

  /** The upstream could not be reached (or timed out) before any response: the client gets the error. */
  failBeforeResponse(code: 'upstream_timeout' | 'upstream_unreachable'): void {
    const err = new GatewayError(code);
    this.status = err.status;
    renderError(this.ctx.res, this.ctx.dialect, err);
    this.finish('upstream_error');
    this.closeWithin(this.core.endGraceMs);
  }

  /**
   * sluice paused the upstream because the client's socket is full: the upstream's quiet is
   * sluice's doing, so its silence timer stops; the client's stall is timed instead.
   */
  hold(): void {
    this.heldAt = performance.now();
    this.upstreamRes!.socket?.setTimeout(0);
    if (this.stallTimer === null && this.core.clientStallMs > 0) {
      this.stallTimer = setTimeout(onStallCheck, this.core.clientStallMs, this).unref();
    }
  }

  /** The client took what was written: the upstream flows again, with its full silence limit. */
  release(): void {
    this.heldAt = -1;
    const upstream = this.upstreamRes!;
    upstream.socket?.setTimeout(this.core.upstreamTimeoutMs);
    upstream.resume();
  }

  /** The client took nothing for clientStallMs while the upstream waited on it: record, then cut both sides. */
  stalled(): void {
    this.finish('client_disconnect');
    this.ctx.res.destroy();
    this.upstreamReq?.destroy();
  }

  /**
   * The response's end is written but may not be taken: a client socket that has not finished
   * within `ms` is destroyed, so a client that stopped reading holds no socket, buffer or fd.
   * Cleared when the response closes (onClientClose), which follows its 'finish'.
   */
  closeWithin(ms: number): void {
    const res = this.ctx.res;
    if (res.destroyed || res.writableFinished || this.endTimer !== null || ms <= 0) return;
    this.endTimer = setTimeout(onEndOverdue, ms, this).unref();
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
    this.closeWithin(this.core.endGraceMs);
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
    if (this.stallTimer !== null) {
      clearTimeout(this.stallTimer);
      this.stallTimer = null;
    }
    // No tap: the exchange ended before any response (a client gone first, an upstream down).
    const u = this.tap?.finish() ?? usageOf(ctx.dialect, undefined);
    const profile = ctx.profile;
    // The tier's prices; for a model outside the tiers the catalog's; failing both, the profile's default tier's.
    const prices = (ctx.tier ? core.tierPrices.get(ctx.tier) : ctx.model ? core.catalog.prices(profile.router, ctx.model) : undefined)
      ?? core.tierPrices.get(profile.default_tier);
    // The router has the prompt but gave no complete answer (a client that left, a timeout, a
    // cut): its prompt is estimated from the body's size. A complete answer, or an error status,
    // is the router's own word on what it charged.
    const unanswered = this.reached && !this.upstreamEnded && (this.upstreamStatus === 0 || this.upstreamStatus < 400);
    const cost = rowCost(u, prices, unanswered ? this.bodyBytes : 0);
    const end = performance.now();
    const row: RequestRow = {
      id: ctx.id,
      ts: new Date(core.now()).toISOString(),
      endpoint: ctx.route,
      profile: profile.name,
      key_prefix: ctx.key.row.prefix,
      key_id: ctx.key.row.id,
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
      generation_id: u.generation_id ?? this.headerGenerationId,
      ttfb_ms: this.ttfb < 0 ? null : Math.round(this.ttfb),
      duration_ms: Math.round(end - ctx.t0),
      overhead_ms: this.sentAt ? Math.round((this.sentAt - ctx.t0) * 100) / 100 : null,
      tools: u.tools,
    };
    core.record(row);
    if (this.trace !== null) this.trace.end(row, this); // both spans end with every attribute the row gives
  }
}

// The listeners: `this` is the emitter; the exchange rides on it (or on the client request).

function onUpstreamData(this: Tagged<IncomingMessage>, chunk: Buffer): void {
  const ex = this[EXCHANGE]!;
  ex.tap!.write(chunk);
  if (ex.trace !== null) ex.trace.chunk(chunk); // the time to the first chunk
  const res = ex.ctx.res;
  if (res.writableEnded) return; // ended by a shutdown's interrupt(): a write now would be an error
  if (!res.write(chunk)) {
    this.pause();
    ex.hold();
  }
}

function onUpstreamEnd(this: Tagged<IncomingMessage>): void {
  const ex = this[EXCHANGE]!;
  ex.upstreamEnded = true;
  const res = ex.ctx.res;
  res.end();
  ex.finish(ex.tap!.finish().error || ex.status >= 400 ? 'upstream_error' : 'ok');
  // The tail still queued for a full client socket: as long as a held upstream would wait for it.
  if (res.socket && res.socket.writableLength > 0) ex.closeWithin(ex.core.clientStallMs);
}

function onUpstreamClose(this: Tagged<IncomingMessage>): void {
  const ex = this[EXCHANGE]!;
  if (this.complete || ex.done) return;
  ex.failMidResponse();
}

function onUpstreamTimeout(this: Tagged<ClientRequest>): void {
  this[EXCHANGE]!.timedOut = true;
  this.destroy(); // the error or the response's close that follows ends the exchange
}

function onUpstreamSent(this: Tagged<ClientRequest>): void {
  this[EXCHANGE]!.reached = true;
}

function onClientDrain(this: ServerResponse): void {
  // The upstream response is the one paused in onUpstreamData.
  const ex = (this.req as Tagged<IncomingMessage>)[EXCHANGE];
  if (ex && !ex.done && ex.upstreamRes) ex.release();
}

function onClientClose(this: ServerResponse): void {
  const ex = (this.req as Tagged<IncomingMessage>)[EXCHANGE];
  if (!ex) return;
  if (ex.endTimer !== null) {
    clearTimeout(ex.endTimer);
    ex.endTimer = null;
  }
  if (!this.writableFinished) ex.finish('client_disconnect');
}

/** The stall timer: ends the exchange if the upstream has been held clientStallMs, else waits out the rest. */
function onStallCheck(ex: Exchange): void {
  ex.stallTimer = null;
  if (ex.done || ex.heldAt < 0) return; // flowing again: the next hold starts a new wait
  const left = ex.core.clientStallMs - (performance.now() - ex.heldAt);
  if (left > 1) ex.stallTimer = setTimeout(onStallCheck, left, ex).unref();
  else ex.stalled();
}

function onEndOverdue(ex: Exchange): void {
  ex.endTimer = null;
  ex.ctx.res.destroy();
}

function ignore(): void {}
