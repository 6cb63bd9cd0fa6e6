// The spans of one request, made by the hooks the handler and the proxy core call while tracing is
// on (lib/trace/tracing.ts builds the one RequestTracer; while tracing is off there is none and no
// hook runs). A /v1 request gets a SERVER span when its context is made, parented on the incoming
// W3C `traceparent` (its `tracestate` kept); a proxied one gets a CLIENT child when it is forwarded,
// whose context goes upstream in `traceparent`. Both end when the exchange makes its row, every
// attribute read from the row and the context at once; a request sluice answers itself (a refusal,
// /v1/models) ends its SERVER span when its response closes. The state rides on the response under
// a symbol. Attributes are built only for spans that record (a sampled-out request costs its ids
// and its propagation only). No prompt or response content is ever read into an attribute.

import { ROOT_CONTEXT, SpanKind, SpanStatusCode, TraceFlags, defaultTextMapGetter, trace, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Router } from '../config.ts';
import type { Ctx, ReadCtx } from '../context.ts';
import { ROUTE_TABLE } from '../routes.ts';
import type { Outcome, RequestRow } from '../store/store.ts';
import * as A from './attributes.ts';

/** The trace of the request a response answers. */
const TRACE = Symbol('sluice.trace');
type Traced = ServerResponse & { [TRACE]?: RequestTrace };

/** The tracer's side of every request: the handler's and the proxy core's hooks. */
export class RequestTracer {
  readonly tracer: Tracer;
  private readonly propagator = new W3CTraceContextPropagator();
  /** server.address and server.port of each router, found once. */
  private readonly routers = new Map<Router, { address: string; port: number }>();

  constructor(tracer: Tracer) {
    this.tracer = tracer;
  }

  /** A /v1 request's context was made: its SERVER span starts. */
  begin(ctx: Ctx): void {
    const req = ctx.req;
    const parent = req.headers.traceparent === undefined ? ROOT_CONTEXT : this.propagator.extract(ROOT_CONTEXT, req.headers, defaultTextMapGetter);
    const path = ROUTE_TABLE[ctx.route].path;
    const method = req.method ?? 'POST';
    const span = this.tracer.startSpan(`${method} ${path}`, {
      kind: SpanKind.SERVER,
      attributes: { [A.HTTP_REQUEST_METHOD]: method, [A.HTTP_ROUTE]: path, [A.URL_PATH]: path, [A.URL_SCHEME]: 'http' },
    }, parent);
    if (span.isRecording()) {
      const host = A.hostOf(req.headers.host);
      if (host) span.setAttribute(A.SERVER_ADDRESS, host.address).setAttribute(A.SERVER_PORT, host.port);
      const agent = req.headers['user-agent'];
      if (agent) span.setAttribute(A.USER_AGENT_ORIGINAL, agent.length > A.MAX_USER_AGENT ? agent.slice(0, A.MAX_USER_AGENT) : agent);
      span.setAttribute(A.CLIENT_ADDRESS, ctx.ip).setAttribute(A.NETWORK_PROTOCOL_VERSION, req.httpVersion).setAttribute(A.SLUICE_REQUEST_ID, ctx.id);
    }
    (ctx.res as Traced)[TRACE] = new RequestTrace(ctx, span, parent);
    ctx.res.on('close', onResponseClose);
  }

  /** sluice answered the request with its own error (the handler's catalogue code): the SERVER span says so. */
  refused(res: ServerResponse, code: string): void {
    const rt = (res as Traced)[TRACE];
    if (rt !== undefined) rt.code = code;
  }

  /**
   * The request is being forwarded: its CLIENT span starts, a child of its SERVER span, named
   * `{operation} {model sent upstream}`. Returns the trace the exchange keeps (null: not traced).
   */
  client(ctx: ReadCtx): RequestTrace | null {
    const rt = (ctx.res as Traced)[TRACE];
    if (rt === undefined) return null;
    const model = ctx.model ?? ctx.requestedModel;
    const operation = A.OPERATION[ctx.route];
    const at = this.addressOf(ctx.router);
    rt.client = this.tracer.startSpan(`${operation} ${model}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        [A.GEN_AI_OPERATION_NAME]: operation, [A.GEN_AI_PROVIDER_NAME]: A.PROVIDER, [A.GEN_AI_REQUEST_MODEL]: model,
        [A.SERVER_ADDRESS]: at.address, [A.SERVER_PORT]: at.port,
      },
    }, trace.setSpan(rt.parent, rt.server));
    rt.clientStart = performance.now();
    return rt;
  }

  private addressOf(router: Router): { address: string; port: number } {
    let at = this.routers.get(router);
    if (at === undefined) {
      const u = router.url;
      at = { address: u.hostname.replace(/^\[(.*)\]$/, '$1'), port: u.port ? Number(u.port) : u.protocol === 'https:' ? 443 : 80 };
      this.routers.set(router, at);
    }
    return at;
  }
}

/** One traced request: its spans and what their attributes need that the row does not carry. */
export class RequestTrace {
  readonly ctx: Ctx;
  readonly server: Span;
  /** The incoming trace context (ROOT_CONTEXT when the request carried none). */
  readonly parent: Context;
  client: Span | null = null;
  /** performance.now() when the CLIENT span started (the upstream request was issued). */
  clientStart = 0;
  /** performance.now() when the first SSE event arrived from the router; -1 before. */
  firstChunk = -1;
  /** The catalogue code sluice answered with, when it refused the request itself. */
  code: string | null = null;
  ended = false;

  constructor(ctx: Ctx, server: Span, parent: Context) {
    this.ctx = ctx;
    this.server = server;
    this.parent = parent;
  }

  /**
   * Puts the CLIENT span's context in the upstream request's headers, replacing any `traceparent`
   * the client sent (it named the client's span, not sluice's); `tracestate` is the incoming one.
   */
  inject(headers: IncomingHttpHeaders): void {
    const sc = this.client!.spanContext();
    headers.traceparent = `00-${sc.traceId}-${sc.spanId}-${sc.traceFlags & TraceFlags.SAMPLED ? '01' : '00'}`;
    const state = sc.traceState?.serialize();
    if (state) headers.tracestate = state;
    // A tracestate beside a traceparent that could not be read belongs to no trace: it is not passed on.
    else if (headers.tracestate !== undefined) delete headers.tracestate;
  }

  /** A chunk of the upstream response: the first one holding an SSE event (not only `:` comment lines) marks the first chunk. */
  chunk(chunk: Buffer): void {
    if (this.firstChunk >= 0) return;
    if (chunk[0] !== 0x3a || chunk.indexOf('\ndata:') !== -1 || chunk.indexOf('\nevent:') !== -1) this.firstChunk = performance.now();
  }

  /** The exchange made its row: both spans end, with everything the row and the context know. */
  end(row: RequestRow, ex: A.ExchangeFacts): void {
    if (this.ended) return;
    this.ended = true;
    const error = A.errorTypeOf(row.outcome, ex);
    const span = this.client;
    if (span !== null) {
      if (span.isRecording()) this.clientAttributes(span, row, ex, error);
      span.end();
    }
    this.endServer(row.outcome, error);
  }

  private clientAttributes(span: Span, row: RequestRow, ex: A.ExchangeFacts, error: string | undefined): void {
    const ctx = this.ctx as ReadCtx;
    span.setAttribute(A.GEN_AI_REQUEST_STREAM, ctx.stream)
      .setAttribute(A.SLUICE_REQUEST_MODEL, ctx.requestedModel)
      .setAttribute(A.SLUICE_PROFILE, row.profile)
      .setAttribute(A.SLUICE_KEY_PREFIX, row.key_prefix)
      .setAttribute(A.SLUICE_DEGRADATION, row.degradation)
      .setAttribute(A.SLUICE_COST_USD, row.cost_usd)
      .setAttribute(A.SLUICE_COST_SOURCE, row.cost_source)
      .setAttribute(A.SLUICE_OUTCOME, row.outcome);
    const maxTokens = A.maxTokensOf(ctx.route, ctx.body);
    if (maxTokens !== undefined) span.setAttribute(A.GEN_AI_REQUEST_MAX_TOKENS, maxTokens);
    const api = A.OPENAI_API[ctx.route];
    if (api !== undefined) span.setAttribute(A.OPENAI_API_TYPE, api);
    if (row.tier !== null) span.setAttribute(A.SLUICE_TIER, row.tier);
    if (row.end_user !== null) span.setAttribute(A.SLUICE_END_USER, row.end_user);
    if (row.session !== null) span.setAttribute(A.SLUICE_SESSION, row.session);
    if (ctx.removed.length > 0 || ctx.adjusted.length > 0) span.setAttribute(A.SLUICE_REWRITES, [...ctx.removed, ...ctx.adjusted]);
    if (row.generation_id !== null) span.setAttribute(A.GEN_AI_RESPONSE_ID, row.generation_id);
    const model = ex.tap?.usage.model ?? null; // the router's word only, never sluice's guess
    if (model !== null) span.setAttribute(A.GEN_AI_RESPONSE_MODEL, model);
    if (row.provider !== null) span.setAttribute(A.SLUICE_PROVIDER, row.provider);
    if (ex.upstreamStatus > 0) span.setAttribute(A.HTTP_RESPONSE_STATUS_CODE, ex.upstreamStatus);
    // Usage only when the router reported some: a response cut before its usage leaves the row's estimate (sluice.cost.*).
    if (row.input_tokens + row.output_tokens + row.cache_read_tokens + row.cache_write_tokens > 0) {
      // The conventions count cached and cache-written tokens inside the input; the row keeps uncached input apart.
      span.setAttribute(A.GEN_AI_USAGE_INPUT_TOKENS, row.input_tokens + row.cache_read_tokens + row.cache_write_tokens)
        .setAttribute(A.GEN_AI_USAGE_OUTPUT_TOKENS, row.output_tokens)
        .setAttribute(A.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, row.cache_read_tokens)
        .setAttribute(A.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS, row.cache_write_tokens)
        .setAttribute(A.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, row.reasoning_tokens);
    }
    if (ctx.stream && this.firstChunk >= 0) span.setAttribute(A.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK, (this.firstChunk - this.clientStart) / 1000);
    if (error !== undefined) span.setAttribute(A.ERROR_TYPE, error).setStatus({ code: SpanStatusCode.ERROR });
  }

  /**
   * Ends the SERVER span: the status sent (none when the client left before one was), the outcome,
   * and error.type for a refusal (its catalogue code) or a 5xx (the exchange's error, else the status).
   */
  endServer(outcome: Outcome | null, error: string | undefined): void {
    const span = this.server;
    if (span.isRecording()) {
      const { ctx } = this;
      const res = ctx.res;
      const status = res.headersSent ? res.statusCode : 0;
      if (status > 0) span.setAttribute(A.HTTP_RESPONSE_STATUS_CODE, status);
      const type = this.code ?? (status >= 500 ? (error ?? String(status)) : undefined);
      if (type !== undefined) span.setAttribute(A.ERROR_TYPE, type);
      if (status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
      if (ctx.profile !== null) span.setAttribute(A.SLUICE_PROFILE, ctx.profile.name);
      if (ctx.key !== null) span.setAttribute(A.SLUICE_KEY_PREFIX, ctx.key.row.prefix);
      if (outcome !== null) span.setAttribute(A.SLUICE_OUTCOME, outcome);
    }
    span.end();
  }
}

/**
 * The response closed. A request that reached the proxy core ends its spans with its row (the
 * exchange's close listener runs after this one); any other ends its SERVER span here, and so does
 * one refused after its CLIENT span began (the exchange then never made a row).
 */
function onResponseClose(this: Traced): void {
  const rt = this[TRACE];
  if (rt === undefined || rt.ended || (rt.client !== null && rt.code === null)) return;
  rt.ended = true;
  if (rt.client !== null) {
    if (rt.client.isRecording()) rt.client.setAttribute(A.ERROR_TYPE, rt.code!).setStatus({ code: SpanStatusCode.ERROR });
    rt.client.end();
  }
  rt.endServer(null, undefined);
}
