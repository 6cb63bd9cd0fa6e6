// The one door to http-proxy-3: every upstream request goes out through UpstreamClient.send, and
// nothing else in sluice touches the library. What sluice assumes of it, each assumption held by a
// test in tests/lib/proxy/upstream-client.test.ts:
//  1. selfHandleResponse: it writes nothing to the client's response. It hands over the upstream
//     response (a node:http IncomingMessage) in 'proxyRes', and sluice relays it.
//  2. It copies the upstream request's headers from `req.headers` synchronously inside web(), and
//     never reads them again: send() puts the call's headers there for that call only, so the
//     client's request never holds the upstream key and the client's credentials never leave.
//  3. The body is `buffer`, piped once into the upstream request; the client's request (already
//     read by sluice) is not read again. With ignorePath and changeOrigin the target URL is the
//     whole upstream URL and its host the Host header.
//  4. Events: 'proxyReq' once the upstream request has its socket, 'proxyRes' with the response
//     head; a failure reaches web()'s callback, never the 'error' event (which would throw).
//  5. The node:http path. With FORCE_FETCH_PATH=true in the environment web() goes through fetch
//     instead: it sends `buffer` as if it were a fetch body, emits no 'proxyReq' and, under
//     selfHandleResponse, discards the response body. The client refuses to start then.

import type { Agent, ClientRequest, IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { ProxyServer } from 'http-proxy-3';
import { ConfigError } from '../config.ts';
import type { OneWrite } from './upstream-request.ts';

export interface UpstreamHooks {
  /** The upstream request has its socket; its head and body are already queued on it. */
  request(proxyReq: ClientRequest, req: IncomingMessage): void;
  /** The upstream's response head arrived; the body is the hook's to read. */
  response(proxyRes: IncomingMessage, req: IncomingMessage): void;
  /** The upstream request failed (refused, reset, destroyed after a timeout). */
  error(err: NodeJS.ErrnoException, req: IncomingMessage): void;
}

/**
 * One upstream request: where, through which agent, with which body. Its fields are the names
 * http-proxy-3's per-request options use, so the call is handed to web() as it is (it copies
 * them into its own options object): no second object per request.
 */
export class UpstreamCall {
  readonly target: URL;
  /** The keep-alive pool, or false for a fresh connection. */
  readonly agent: Agent | false;
  readonly buffer: OneWrite;

  constructor(target: URL, agent: Agent | false, body: OneWrite) {
    this.target = target;
    this.agent = agent;
    this.buffer = body;
  }

  /** The same request on a fresh connection (the one retry, after a pooled socket was found closed). */
  fresh(): UpstreamCall {
    return new UpstreamCall(this.target, false, this.buffer);
  }
}

/** The environment variable that would turn http-proxy-3 onto its fetch path (assumption 5). */
export const FORCE_FETCH_PATH = 'FORCE_FETCH_PATH';

export class UpstreamClient {
  private readonly proxy = new ProxyServer({ selfHandleResponse: true, changeOrigin: true, ignorePath: true });
  private readonly onError: (err: Error, req: IncomingMessage) => void;

  /** Throws a ConfigError (exit 78 at start-up) when `env` would send requests down the fetch path. */
  constructor(hooks: UpstreamHooks, env: NodeJS.ProcessEnv = process.env) {
    if (env[FORCE_FETCH_PATH] === 'true') {
      throw new ConfigError([
        `${FORCE_FETCH_PATH}=true is set: it makes http-proxy-3 proxy through fetch, which would send each request's body as an ` +
          'object instead of its bytes and drop the streamed response; sluice proxies through node:http only, so unset it',
      ]);
    }
    this.proxy.on('proxyReq', (proxyReq, req) => hooks.request(proxyReq, req));
    this.proxy.on('proxyRes', (proxyRes, req) => hooks.response(proxyRes, req));
    this.onError = (err, req) => hooks.error(err, req);
  }

  /** Starts the upstream request; `headers` are its whole header set (assumption 2). Returns at once. */
  send(req: IncomingMessage, res: ServerResponse, call: UpstreamCall, headers: IncomingHttpHeaders): void {
    const own = req.headers;
    req.headers = headers;
    try {
      this.proxy.web(req, res, call, this.onError);
    } finally {
      req.headers = own;
    }
  }

  close(): void {
    this.proxy.close();
  }
}
