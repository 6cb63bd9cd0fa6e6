// What goes upstream for one request: the target URL (precomputed per router and route), the
// request headers (the client's minus its credentials, sluice's own and hop-by-hop ones, plus the
// profile's upstream key) and the body bytes (as received, or with the changed members spliced in).
// It never reads or changes the response, and never logs a header (one carries the upstream key).

import { PROXIED, ROUTE_TABLE } from '../routes.ts';
import type { IncomingHttpHeaders } from 'node:http';
import { Stream } from 'node:stream';
import { withSlash, type Config } from '../config.ts';
import type { ReadCtx } from '../context.ts';
import { bodyChanged, encodeBody } from '../request-body.ts';
import type { RequestTrace } from '../trace/request.ts';


/**
 * Request headers that never go upstream: client credentials, sluice's own, the coding agents'
 * session headers sluice consumes (Claude Code's; Codex's `session-id` and `thread-id`, whose ids
 * its `x-codex-*` headers repeat beside the installation id: see CODEX_PREFIX), hop-by-hop.
 */
const STRIP_REQUEST = new Set([
  'authorization', 'x-api-key', 'x-sluice-session', 'x-sluice-run', 'x-claude-code-session-id', 'session-id', 'thread-id', 'x-forwarded-for',
  'x-forwarded-host', 'x-forwarded-proto', 'x-forwarded-port', 'x-real-ip', 'forwarded',
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade',
  'content-length', 'accept-encoding', 'host', 'expect', 'content-type',
]);
/** Codex's telemetry headers (turn metadata, window id, beta features): the router reads none of them. */
const CODEX_PREFIX = 'x-codex-';

/** Every router's URL for every proxied route, joined once at start-up. */
export function upstreamTargets(config: Pick<Config, 'routers'>): Map<string, URL> {
  const targets = new Map<string, URL>();
  for (const router of config.routers.values()) {
    for (const route of PROXIED) targets.set(`${router.name}:${route}`, new URL(ROUTE_TABLE[route].upstream, withSlash(router.url)));
  }
  return targets;
}

/** The target URL of a request: the precomputed one, with the client's query string if it sent one. */
export function targetOf(targets: Map<string, URL>, ctx: ReadCtx): URL {
  const target = targets.get(`${ctx.profile.router}:${ctx.route}`)!;
  const url = ctx.req.url!;
  const q = url.indexOf('?');
  if (q === -1) return target;
  const withQuery = new URL(target);
  withQuery.search = url.slice(q);
  return withQuery;
}

/** The bytes to send: untouched, the body as received; changed, only the changed members re-serialised. */
export function bodyOf(ctx: ReadCtx): OneWrite {
  return new OneWrite(bodyChanged(ctx.body) ? encodeBody(ctx.body) : [ctx.raw]);
}

/**
 * The headers to send, built in one object (http-proxy-3 copies `req.headers` once more; handing
 * it no `headers` option spares it a second merge). Deletes would push the object into slow mode.
 * A traced request's `traceparent` names its CLIENT span (lib/trace/request.ts); untraced, the
 * client's own trace headers pass through like any other.
 */
export function headersOf(ctx: ReadCtx, bodyLength: number, trace: RequestTrace | null = null): IncomingHttpHeaders {
  const from = ctx.req.headers;
  const out: IncomingHttpHeaders = {
    authorization: `Bearer ${ctx.upstreamKey}`,
    'accept-encoding': 'identity',
    'content-type': 'application/json',
    'content-length': String(bodyLength),
  };
  for (const h in from) if (!STRIP_REQUEST.has(h) && !h.startsWith(CODEX_PREFIX)) out[h] = from[h];
  if (trace !== null) trace.inject(out);
  return out;
}

/**
 * A spliced body at least this long goes upstream as its parts, views of the bytes received: joined,
 * a 300 KB agent body would cost a second 300 KB buffer per request, which V8 counts as external
 * memory and answers with a major GC every ~64 MB of it. A shorter one is joined (from Node's
 * buffer pool): one write costs less than several.
 */
const WRITE_PARTS_FROM = 16 * 1024;

/**
 * The request body as http-proxy-3's `buffer` option takes it: a Stream, of which it calls only
 * `pipe` (tests/lib/proxy/upstream-client.test.ts). Node's base Stream is an EventEmitter with a
 * `pipe` to override, so this is one: its `pipe` hands the bytes over in one `end` (or, for a long
 * spliced body, its parts in order, which the request flushes in one writev). Being a Stream costs
 * ~30 ns per body against ~10 for a plain object (5 M constructions); a Readable per request would
 * cost a stream state, a buffer queue and a tick.
 */
export class OneWrite extends Stream {
  readonly parts: readonly Buffer[];
  readonly length: number;
  constructor(parts: Buffer[]) {
    super();
    let length = 0;
    for (const p of parts) length += p.length;
    this.length = length;
    this.parts = parts.length > 1 && length < WRITE_PARTS_FROM ? [Buffer.concat(parts, length)] : parts;
  }
  override pipe<T extends NodeJS.WritableStream>(dest: T): T {
    const parts = this.parts;
    const last = parts.length - 1;
    for (let i = 0; i < last; i++) dest.write(parts[i]!);
    dest.end(parts[last]);
    return dest;
  }
}
