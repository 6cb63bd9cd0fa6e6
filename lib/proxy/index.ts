// The streaming proxy core: forwards a request that passed the plugin chain to the router with
// http-proxy-3 (keep-alive agents, the profile's upstream key, the client's key headers stripped)
// and pipes the response back byte for byte while the usage tap reads a copy (./exchange.ts).
// It adds response headers only. Failures before the response starts answer 502/504 in the
// dialect; failures after it started end the stream with one error event of the dialect. Every
// request that reached this core leaves exactly one row, client disconnects included; a client
// that stops reading is cut off rather than left holding its socket and the upstream.
// This file is the wiring, done once: agents, the upstream client (./upstream-client.ts, the only
// door to http-proxy-3) and its three hooks, the targets.

import http, { type IncomingMessage } from 'node:http';
import https from 'node:https';
import type { Logger } from 'pino';
import { tierPrices, type Catalog } from '../catalog.ts';
import type { Config } from '../config.ts';
import type { ReadCtx } from '../context.ts';
import type { RequestRow } from '../store/store.ts';
import { EXCHANGE, Exchange, type ExchangeCore } from './exchange.ts';
import { OpenList } from './open-list.ts';
import { preconnect, type Preconnected } from './preconnect.ts';
import { UpstreamCall, UpstreamClient } from './upstream-client.ts';
import { bodyOf, headersOf, targetOf, upstreamTargets } from './upstream-request.ts';
import type { RequestTracer } from '../trace/request.ts';

export { UsageTap, usageOf, type Usage } from './usage-tap.ts';

/** What the core needs; it names the types itself rather than borrow the plugins' Deps (which sits above it). */
interface ProxyDeps {
  log: Logger;
  config: Config;
  catalog: Catalog;
  now: () => number;
  record: (row: RequestRow) => void;
  /** Longest wait for the upstream's headers, and longest upstream silence inside a response. */
  upstreamTimeoutMs: number;
  /** How long the upstream may wait paused on a client that takes nothing before both are cut (default: upstreamTimeoutMs). */
  clientStallMs?: number;
  /** How long a client has to take a response sluice ended itself (an error, a shutdown) before its socket is destroyed (default 5 s). */
  endGraceMs?: number;
  /** The trace hooks (lib/trace/request.ts); null or absent while tracing is off. */
  trace?: RequestTracer | null;
}

/** The default of ProxyDeps.endGraceMs. */
export const END_GRACE_MS = 5_000;
/**
 * The hooks get back the request send() was given; its exchange rides on it under a symbol (set in
 * Exchange's constructor). The one cast left here, `req as Tagged`, only adds that optional member.
 */
type Tagged = IncomingMessage & { [EXCHANGE]?: Exchange };

/** Throws a ConfigError when the environment would turn http-proxy-3 off its node:http path (upstream-client.ts). */
export function createProxy(deps: ProxyDeps) {
  // No cap on upstream sockets: one per open client request, so concurrency is bounded where the
  // clients are (the front proxy, LimitNOFILE). A cap here would queue whole streams behind others
  // (a stream waiting for a socket is a stall of its whole length); idle sockets are reused LIFO.
  // An idle socket is closed after 30 s (or the router's own `keep-alive: timeout=` hint, if
  // shorter): no fd is held for a burst that is over, and fewer reuses race the router's close.
  // Idle sockets are all kept until that timeout (Node keeps 256 by default): the next burst of
  // streams reuses them instead of opening hundreds of connections at once.
  const agentOptions = { keepAlive: true, keepAliveMsecs: 10_000, timeout: 30_000, maxFreeSockets: 4096 };
  const agents = { 'http:': new http.Agent(agentOptions), 'https:': new https.Agent(agentOptions) };
  const agentFor = (url: URL): http.Agent => (url.protocol === 'https:' ? agents['https:'] : agents['http:']);
  // No proxyTimeout here: each exchange sets the upstream timeout itself, and stops it while it
  // holds the upstream paused for a slow client (exchange.ts, hold()).
  const upstream = new UpstreamClient({
    request: (proxyReq, req) => (req as Tagged)[EXCHANGE]?.sent(proxyReq),
    response: (proxyRes, req) => (req as Tagged)[EXCHANGE]?.respond(proxyRes),
    error: onError,
  });
  // Precomputed per router and route: the hot path joins no URLs except for a query string.
  const targets = upstreamTargets(deps.config);
  const core: ExchangeCore = {
    record: deps.record,
    now: deps.now,
    catalog: deps.catalog,
    // Estimates price tier requests at the tier's prices; built once, not per row.
    tierPrices: new Map([...deps.config.tiers].map(([name, tier]) => [name, tierPrices(tier)])),
    open: new OpenList(),
    upstreamTimeoutMs: deps.upstreamTimeoutMs,
    clientStallMs: deps.clientStallMs ?? deps.upstreamTimeoutMs,
    endGraceMs: deps.endGraceMs ?? END_GRACE_MS,
    trace: deps.trace ?? null,
  };

  function onError(err: NodeJS.ErrnoException, req: IncomingMessage): void {
    const ex = (req as Tagged)[EXCHANGE];
    if (!ex || ex.done) return;
    const res = ex.ctx.res;
    // A reset after the response began reaches here before the response's 'close' does: the
    // client must still get its error event, not a stream left open.
    if (res.headersSent) return ex.failMidResponse();
    // A kept-alive socket the upstream closed just as we reused it: nothing reached it, and the
    // body is in memory, so one retry on a fresh socket is safe (Node's documented remedy).
    // Fresh for sure: an upstream that dropped one idle socket (a restart, an idle reaper) has
    // usually dropped the whole idle pool, and the pool would hand out the next stale one.
    const first = ex.upstreamOptions;
    if (ex.reusedSocket && !ex.retried && !ex.timedOut && err.code === 'ECONNRESET' && !res.destroyed && first instanceof UpstreamCall) {
      ex.retried = true;
      upstream.send(req, res, first.fresh(), headersOf(ex.ctx, first.buffer.length, ex.trace));
      return;
    }
    const code = ex.timedOut ? 'upstream_timeout' : 'upstream_unreachable';
    deps.log.warn({ req: ex.ctx.id, err: err.code ?? err.message, code }, 'upstream request failed');
    ex.failBeforeResponse(code);
  }

  return {
    /** Sends the request upstream; returns at once (the exchange ends through events). */
    forward(ctx: ReadCtx): void {
      const ex = new Exchange(ctx, core);
      // Its CLIENT span starts now: the headers below carry its traceparent.
      if (core.trace !== null) ex.trace = core.trace.client(ctx);
      const body = bodyOf(ctx);
      const target = targetOf(targets, ctx);
      const call = new UpstreamCall(target, agentFor(target), body);
      ex.upstreamOptions = call; // for its one retry
      ex.bodyBytes = body.length;
      upstream.send(ctx.req, ctx.res, call, headersOf(ctx, body.length, ex.trace));
    },
    /** Exchanges still open (their rows not yet made). */
    get open(): number {
      return core.open.size;
    },
    /**
     * Ends every open exchange now (the shutdown's grace is over): a stream that began gets one
     * error event of its dialect and its end, a response not yet begun a 503 in the dialect; the
     * upstream request is aborted and the row is made (outcome gateway_error).
     */
    interrupt(): void {
      for (const ex of core.open.snapshot()) ex.interrupt();
    },
    /** Opens `perRouter` idle keep-alive sockets to each router with a keyed profile (./preconnect.ts), before traffic. */
    preconnect(upstreamKeys: ReadonlyMap<string, string>, perRouter: number, timeoutMs: number): Promise<Preconnected> {
      return preconnect(deps.config, upstreamKeys, agentFor, perRouter, timeoutMs);
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
      upstream.close();
      agents['http:'].destroy();
      agents['https:'].destroy();
    },
  };
}
