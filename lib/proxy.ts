// The streaming proxy core: forwards a request that passed the plugin chain to the router with
// http-proxy-3 (keep-alive agents, the profile's upstream key, the client's key headers stripped)
// and pipes the response back byte for byte while the usage tap reads a copy. It adds response
// headers only. Failures before the response starts answer 502/504 in the dialect; failures after
// it started end the stream with one error event of the dialect. Every request that reached this
// core leaves exactly one row, client disconnects included (the upstream request is aborted).

import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import https from 'node:https';
import { Readable } from 'node:stream';
import { ProxyServer } from 'http-proxy-3';
import { rowCost, tierPrices, withSlash } from './catalog.ts';
import type { Ctx } from './context.ts';
import type { Deps } from './deps.ts';
import { GatewayError, renderError, streamErrorEvent } from './errors.ts';
import { encodeBody } from './request-body.ts';
import type { Outcome, RequestRow } from './store/store.ts';
import { UsageTap, usageOf } from './usage-tap.ts';

const UPSTREAM_PATH = { chat: 'api/v1/chat/completions', messages: 'api/v1/messages', count_tokens: 'api/v1/messages/count_tokens' } as const;

/** Request headers that never go upstream: client credentials, sluice's own, hop-by-hop. */
const STRIP_REQUEST = new Set([
  'authorization', 'x-api-key', 'x-sluice-session', 'x-sluice-run', 'x-claude-code-session-id', 'x-forwarded-for',
  'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port', 'x-real-ip', 'forwarded',
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'content-length', 'accept-encoding', 'host', 'expect',
]);
/** Response headers that are the hop's own, not the body's. */
const STRIP_RESPONSE = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'trailer']);

export function createProxy(deps: Pick<Deps, 'log' | 'config' | 'catalog' | 'now'> & { record: (row: RequestRow) => void; upstreamTimeoutMs: number }) {
  // No cap on upstream sockets: one per open client request, so concurrency is bounded where the
  // clients are (the front proxy, LimitNOFILE). A cap here would queue whole streams behind others
  // (a stream waiting for a socket is a stall of its whole length); idle sockets are reused LIFO.
  // An idle socket is closed after 30 s (or the router's own `keep-alive: timeout=` hint, if
  // shorter): no fd is held for a burst that is over, and fewer reuses race the router's close.
  const agentOptions = { keepAlive: true, keepAliveMsecs: 10_000, timeout: 30_000 };
  const agents = { 'http:': new http.Agent(agentOptions), 'https:': new https.Agent(agentOptions) };
  /** Exchanges between forward() and their row: what a shutdown must end (interrupt()). */
  const open = new Set<Exchange>();
  const proxy = new ProxyServer({ selfHandleResponse: true, changeOrigin: true, ignorePath: true, proxyTimeout: deps.upstreamTimeoutMs });
  // Precomputed per router and route: the hot path joins no URLs except for a query string.
  const targets = new Map<string, URL>();
  for (const router of deps.config.routers.values()) {
    for (const [route, path] of Object.entries(UPSTREAM_PATH)) targets.set(`${router.name}:${route}`, new URL(path, withSlash(router.url)));
  }
  const ctxOf = new WeakMap<IncomingMessage, Exchange>();
  // Estimates price tier requests at the tier's prices; built once, not per row.
  const tierPriceOf = new Map([...deps.config.tiers].map(([name, tier]) => [name, tierPrices(tier)]));

  proxy.on('proxyReq', (proxyReq, req) => {
    const ex = ctxOf.get(req);
    if (!ex) return;
    ex.sentAt = performance.now();
    ex.reusedSocket = proxyReq.reusedSocket;
    ex.upstreamReq = proxyReq;
    proxyReq.on('timeout', () => (ex.timedOut = true));
  });
  proxy.on('proxyRes', (proxyRes, req) => {
    const ex = ctxOf.get(req);
    if (ex) ex.respond(proxyRes);
  });

  class Exchange {
    readonly ctx: Ctx;
    sentAt = 0;
    timedOut = false;
    /** Whether the upstream request went out on a kept-alive socket (the one race worth a retry). */
    reusedSocket = false;
    retried = false;
    status = 0;
    ttfb: number | null = null;
    tap?: UsageTap;
    done = false;
    upstreamReq?: http.ClientRequest;
    /** The response is an SSE stream (set once the upstream's headers arrived). */
    isStream = false;

    constructor(ctx: Ctx) {
      this.ctx = ctx;
    }

    respond(proxyRes: IncomingMessage): void {
      const { ctx } = this;
      const res = ctx.res;
      this.status = proxyRes.statusCode ?? 502;
      this.ttfb = performance.now() - ctx.t0;
      const headers: OutgoingHttpHeaders = {};
      const upstream = proxyRes.headers;
      for (const k in upstream) if (!STRIP_RESPONSE.has(k) && upstream[k] !== undefined) headers[k] = upstream[k];
      headers['x-sluice-tier'] = ctx.tier ?? 'none';
      headers['x-sluice-model'] = ctx.model ?? ctx.requestedModel ?? '';
      headers['x-sluice-degradation'] = ctx.degradation;
      headers['x-sluice-request-id'] = ctx.id;
      headers['server-timing'] = `sluice;dur=${(this.sentAt - ctx.t0).toFixed(2)}`;
      const isStream = (this.isStream = String(proxyRes.headers['content-type'] ?? '').includes('text/event-stream'));
      const tap = (this.tap = new UsageTap(ctx.dialect, isStream));
      if (res.destroyed) return; // the client left while the headers were on their way
      res.writeHead(this.status, headers);
      if (isStream) res.flushHeaders();

      proxyRes.on('data', (chunk: Buffer) => {
        tap.write(chunk);
        if (res.writableEnded) return; // ended by a shutdown's interrupt(): a write now would be an error
        if (!res.write(chunk)) proxyRes.pause();
      });
      res.on('drain', () => proxyRes.resume());
      proxyRes.on('end', () => {
        res.end();
        this.finish(tap.finish().error || this.status >= 400 ? 'upstream_error' : 'ok');
      });
      proxyRes.on('close', () => {
        if (proxyRes.complete || this.done) return;
        this.failMidResponse();
      });
      proxyRes.on('error', () => {}); // 'close' above handles it; an unhandled 'error' would crash the process
    }

    /** The upstream failed or went silent after the response began: one error event (a stream) or a cut (JSON), then the row. */
    failMidResponse(): void {
      const res = this.ctx.res;
      if (!res.destroyed && !res.writableEnded) {
        if (this.isStream) res.end(streamErrorEvent(this.ctx.dialect, this.timedOut ? 'upstream_timeout' : 'upstream_stream_failed'));
        else res.destroy();
      }
      this.finish('upstream_error');
    }

    /** Writes the row exactly once, whatever ended the exchange. */
    finish(outcome: Outcome): void {
      if (this.done) return;
      this.done = true;
      open.delete(this);
      const { ctx } = this;
      // No tap: the exchange ended before any response (a client gone first, an upstream down).
      const u = this.tap?.finish() ?? usageOf(ctx.dialect, undefined);
      const prices = ctx.tier ? tierPriceOf.get(ctx.tier) : ctx.model ? deps.catalog.prices(ctx.profile!.router, ctx.model) : undefined;
      deps.record({
        id: ctx.id,
        ts: new Date(deps.now()).toISOString(),
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
        ...rowCost(u, prices),
        provider: u.provider,
        degradation: ctx.degradation,
        generation_id: u.generation_id,
        ttfb_ms: this.ttfb === null ? null : Math.round(this.ttfb),
        duration_ms: Math.round(performance.now() - ctx.t0),
        overhead_ms: this.sentAt ? Math.round((this.sentAt - ctx.t0) * 100) / 100 : null,
        tools: u.tools,
      });
    }
  }

  return {
    /** Sends the request upstream; resolves at once (the exchange ends through events). */
    forward(ctx: Ctx): void {
      const { req, res } = ctx;
      const ex = new Exchange(ctx);
      ctxOf.set(req, ex);
      open.add(ex);
      // A client that leaves first: record what was seen (http-proxy-3 aborts the upstream request).
      res.on('close', () => {
        if (!res.writableFinished) ex.finish('client_disconnect');
      });
      // Untouched: the bytes as received. Changed: only the changed members are re-serialised.
      const body = ctx.changed ? encodeBody(ctx.body!) : ctx.raw!;
      // One filtered copy instead of a delete per header (deletes push the object into slow mode).
      const kept: typeof req.headers = {};
      for (const h in req.headers) if (!STRIP_REQUEST.has(h)) kept[h] = req.headers[h];
      req.headers = kept;
      let target = targets.get(`${ctx.profile!.router}:${ctx.route}`)!;
      const q = req.url!.indexOf('?');
      if (q !== -1) {
        target = new URL(target);
        target.search = req.url!.slice(q);
      }
      const options = {
        target,
        agent: agents[target.protocol as 'http:' | 'https:'],
        // http-proxy-3 only calls `pipe` on this: handing the body over in one write is all it takes
        // (a Readable per request would cost a stream, its state and a tick).
        buffer: { pipe: (dest: NodeJS.WritableStream) => dest.end(body) } as unknown as Readable,
        headers: {
          authorization: `Bearer ${ctx.upstreamKey}`,
          'accept-encoding': 'identity',
          'content-type': 'application/json',
          'content-length': String(body.length),
        },
      };
      const onError = (err: NodeJS.ErrnoException): void => {
        if (ex.done) return;
        // A reset after the response began reaches here before the response's 'close' does: the
        // client must still get its error event, not a stream left open.
        if (res.headersSent) return ex.failMidResponse();
        // A kept-alive socket the upstream closed just as we reused it: nothing reached it, and the
        // body is in memory, so one retry on a fresh socket is safe (Node's documented remedy).
        // Fresh for sure: an upstream that dropped one idle socket (a restart, an idle reaper) has
        // usually dropped the whole idle pool, and the pool would hand out the next stale one.
        if (ex.reusedSocket && !ex.retried && !ex.timedOut && err.code === 'ECONNRESET' && !res.destroyed) {
          ex.retried = true;
          proxy.web(req, res, { ...options, agent: false }, onError);
          return;
        }
        const code = ex.timedOut ? 'upstream_timeout' : 'upstream_unreachable';
        deps.log.warn({ req: ctx.id, err: err.code ?? err.message, code }, 'upstream request failed');
        const gerr = new GatewayError(code);
        ex.status = gerr.status;
        renderError(res, ctx.dialect, gerr);
        ex.finish('upstream_error');
      };
      proxy.web(req, res, options, onError);
    },
    /** Exchanges still open (their rows not yet made). */
    get open(): number {
      return open.size;
    },
    /**
     * Ends every open exchange now (the shutdown's grace is over): a stream that began gets one
     * error event of its dialect and its end, a response not yet begun a 503 in the dialect; the
     * upstream request is aborted and the row is made (outcome gateway_error).
     */
    interrupt(): void {
      for (const ex of [...open]) {
        const { res, dialect } = ex.ctx;
        if (!res.headersSent) renderError(res, dialect, new GatewayError('shutting_down'));
        else if (!res.writableEnded && !res.destroyed) {
          if (ex.isStream) res.end(streamErrorEvent(dialect, 'shutting_down'));
          else res.destroy();
        }
        ex.finish('gateway_error');
        ex.upstreamReq?.destroy();
      }
    },
    /** Upstream sockets in use and idle in the keep-alive pool (leak checks, /health). */
    sockets(): { active: number; idle: number } {
      let active = 0;
      let idle = 0;
      for (const a of Object.values(agents)) {
        for (const list of Object.values(a.sockets)) active += list?.length ?? 0;
        for (const list of Object.values(a.freeSockets)) idle += list?.length ?? 0;
      }
      return { active, idle };
    },
    close(): void {
      proxy.close();
      agents['http:'].destroy();
      agents['https:'].destroy();
    },
  };
}
