// What sluice assumes of http-proxy-3 (lib/proxy/upstream-client.ts), one test per assumption, on
// real sockets: a front server that reads the client's body as sluice does and then sends through
// UpstreamClient, and a router that records what reached it. An upgrade of http-proxy-3 that
// breaks an assumption fails here, by name, rather than somewhere in the exchange.

import { once } from 'node:events';
import http, { ClientRequest, IncomingMessage, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ProxyServer } from 'http-proxy-3';
import t, { type Test } from 'tap';
import { ConfigError } from '../../../lib/config.ts';
import { UpstreamCall, UpstreamClient, type UpstreamHooks } from '../../../lib/proxy/upstream-client.ts';
import { OneWrite } from '../../../lib/proxy/upstream-request.ts';
import { runCli } from '../../helpers/processes.ts';

interface Seen { method: string; url: string; headers: IncomingHttpHeaders; body: Buffer }

async function listen(t: Test, server: http.Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return (server.address() as AddressInfo).port;
}

/** The router: records each request and answers 200 with `answer`. */
async function router(t: Test, answer = '{"from":"router"}'): Promise<{ url: URL; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
    res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
  });
  t.teardown(() => server.closeAllConnections());
  return { url: new URL(`http://127.0.0.1:${await listen(t, server)}/api/v1/chat/completions`), seen };
}

/** The front: reads the whole client body (as sluice's chain does), then hands over to `send`. */
async function front(t: Test, send: (req: IncomingMessage, res: ServerResponse, body: Buffer) => void): Promise<string> {
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    send(req, res, Buffer.concat(chunks));
  });
  t.teardown(() => server.closeAllConnections());
  return `http://127.0.0.1:${await listen(t, server)}`;
}

/** Hooks that relay the upstream response as sluice's exchange does (by hand), and record what they saw. */
function relayHooks() {
  const events: string[] = [];
  const requests: ClientRequest[] = [];
  const responses: IncomingMessage[] = [];
  const errors: NodeJS.ErrnoException[] = [];
  const pending = new Map<IncomingMessage, ServerResponse>();
  const hooks: UpstreamHooks = {
    request(proxyReq) {
      events.push('request');
      requests.push(proxyReq);
    },
    response(proxyRes, req) {
      events.push('response');
      responses.push(proxyRes);
      const res = pending.get(req)!;
      res.writeHead(proxyRes.statusCode!, { 'content-type': 'application/json' });
      proxyRes.pipe(res);
    },
    error(err, req) {
      events.push('error');
      errors.push(err);
      pending.get(req)!.writeHead(502).end('upstream failed');
    },
  };
  return { hooks, events, requests, responses, errors, pending };
}

const CLIENT_HEADERS = { authorization: 'Bearer client-key', 'x-client-only': 'yes', 'content-type': 'application/json' };

function upstreamHeaders(length: number): IncomingHttpHeaders {
  return { authorization: 'Bearer upstream-key', 'x-upstream': 'yes', 'content-type': 'application/json', 'content-length': String(length) };
}

const agent = new http.Agent({ keepAlive: true });
t.teardown(() => agent.destroy());

t.test('1. selfHandleResponse: http-proxy-3 writes nothing to the client; the response hook relays', async (t) => {
  const up = await router(t, '{"from":"router"}');
  let untouched: { headersSent: boolean; written: number } | undefined;
  const client = new UpstreamClient({
    request() {},
    response(proxyRes, req) {
      const res = holder.get(req)!;
      proxyRes.resume();
      proxyRes.on('end', () => {
        // The whole upstream response has gone by: whatever the library would write is written.
        untouched = { headersSent: res.headersSent, written: res.writableLength };
        res.writeHead(299, { 'content-type': 'text/plain' }).end('relayed by sluice');
      });
    },
    error: (err) => t.fail(err.message),
  });
  t.teardown(() => client.close());
  const holder = new Map<IncomingMessage, ServerResponse>();
  const url = await front(t, (req, res) => {
    holder.set(req, res);
    client.send(req, res, new UpstreamCall(up.url, agent, new OneWrite([Buffer.from('{}')])), upstreamHeaders(2));
  });
  const res = await fetch(url, { method: 'POST', headers: CLIENT_HEADERS, body: '{}' });
  t.equal(res.status, 299);
  t.equal(await res.text(), 'relayed by sluice', "the client gets only the hook's answer");
  t.same(untouched, { headersSent: false, written: 0 }, 'nothing was written by http-proxy-3, even after the upstream response ended');
});

t.test("2. headers: the call's set goes upstream, copied synchronously; the client's request keeps its own", async (t) => {
  const up = await router(t);
  const r = relayHooks();
  const client = new UpstreamClient(r.hooks);
  t.teardown(() => client.close());
  let during: { same: boolean; auth: unknown } | undefined;
  const url = await front(t, (req, res) => {
    r.pending.set(req, res);
    const own = req.headers;
    const headers = upstreamHeaders(2);
    client.send(req, res, new UpstreamCall(up.url, agent, new OneWrite([Buffer.from('{}')])), headers);
    during = { same: req.headers === own, auth: req.headers.authorization };
    // Changed once send() returned: a copy made later (on the socket, on a retry of its own) would carry it.
    headers['x-too-late'] = 'yes';
    headers.authorization = 'Bearer changed-after-send';
  });
  const res = await fetch(url, { method: 'POST', headers: CLIENT_HEADERS, body: '{}' });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  t.same(during, { same: true, auth: 'Bearer client-key' }, 'after send() the request holds its own headers again');
  const [seen] = up.seen;
  t.equal(seen!.headers.authorization, 'Bearer upstream-key', 'the upstream key went, not the client key');
  t.equal(seen!.headers['x-upstream'], 'yes');
  t.notOk('x-client-only' in seen!.headers, "a header only the client's request had did not go");
  t.notOk('x-too-late' in seen!.headers, 'the headers were copied inside web(), before send() returned');
  t.equal(r.requests[0]!.getHeader('authorization'), 'Bearer upstream-key', 'the upstream request itself carries the copy');
});

t.test('3. body: `buffer` is piped once and is all the router receives; the target URL is used whole', async (t) => {
  const up = await router(t);
  const r = relayHooks();
  const client = new UpstreamClient(r.hooks);
  t.teardown(() => client.close());
  class Counted extends OneWrite {
    pipes = 0;
    override pipe<T extends NodeJS.WritableStream>(dest: T): T {
      this.pipes++;
      return super.pipe(dest);
    }
  }
  // Three parts past the joining threshold: written in order, as the views of a spliced body are.
  const parts = [Buffer.from('{"model":"x","pad":"'), Buffer.alloc(20_000, 'a'), Buffer.from('"}')];
  const body = new Counted(parts);
  t.equal(body.parts.length, 3, 'kept as parts');
  const url = await front(t, (req, res, received) => {
    t.equal(received.toString(), 'the client sent this', 'the front read the client body first');
    r.pending.set(req, res);
    client.send(req, res, new UpstreamCall(up.url, agent, body), upstreamHeaders(body.length));
  });
  const res = await fetch(`${url}/v1/chat/completions?beta=true`, { method: 'POST', headers: CLIENT_HEADERS, body: 'the client sent this' });
  t.equal(res.status, 200);
  await res.arrayBuffer();
  const [seen] = up.seen;
  t.ok(seen!.body.equals(Buffer.concat(parts)), 'the router received exactly the parts, in order');
  t.equal(Number(seen!.headers['content-length']), seen!.body.length);
  t.equal(body.pipes, 1, 'piped once');
  t.equal(seen!.method, 'POST');
  t.equal(seen!.url, '/api/v1/chat/completions', "ignorePath: the target's path alone, not the client's appended");
  t.equal(seen!.headers.host, up.url.host, "changeOrigin: the target's host");
});

t.test("4. events: 'proxyReq' then 'proxyRes' once each; a failure reaches the callback, not 'error'", async (t) => {
  const up = await router(t);
  const r = relayHooks();
  const client = new UpstreamClient(r.hooks);
  t.teardown(() => client.close());
  // A port nothing listens on: a server opened and closed again.
  const gone = http.createServer();
  gone.listen(0, '127.0.0.1');
  await once(gone, 'listening');
  const deadPort = (gone.address() as AddressInfo).port;
  await new Promise<void>((resolve) => gone.close(() => resolve()));
  let target = up.url;
  const url = await front(t, (req, res) => {
    r.pending.set(req, res);
    client.send(req, res, new UpstreamCall(target, agent, new OneWrite([Buffer.from('{}')])), upstreamHeaders(2));
  });
  const ok = await fetch(url, { method: 'POST', headers: CLIENT_HEADERS, body: '{}' });
  t.same(await ok.json(), { from: 'router' });
  t.same(r.events, ['request', 'response'], 'the request hook first, with its socket; then the response');
  t.ok(r.requests[0] instanceof ClientRequest, 'the upstream request is a node:http ClientRequest');
  t.ok(r.responses[0] instanceof IncomingMessage, 'the upstream response is a node:http IncomingMessage');
  t.ok(r.responses[0]!.rawHeaders.length > 0, 'with its raw headers');

  target = new URL(`http://127.0.0.1:${deadPort}/api/v1/chat/completions`);
  const failed = await fetch(url, { method: 'POST', headers: CLIENT_HEADERS, body: '{}' });
  t.equal(failed.status, 502);
  await failed.arrayBuffer();
  t.same(r.events.slice(2), ['request', 'error'], "refused: the error hook (an 'error' event would have thrown)");
  t.equal(r.errors[0]!.code, 'ECONNREFUSED');
});

t.test('5. FORCE_FETCH_PATH=true is refused at start-up', async (t) => {
  const hooks = relayHooks().hooks;
  t.throws(() => new UpstreamClient(hooks, { FORCE_FETCH_PATH: 'true' }), ConfigError);
  t.throws(() => new UpstreamClient(hooks, { FORCE_FETCH_PATH: 'true' }), /FORCE_FETCH_PATH=true .*unset it/s, 'the message names it and says what to do');
  for (const env of [{}, { FORCE_FETCH_PATH: 'false' }, { FORCE_FETCH_PATH: '' }]) new UpstreamClient(hooks, env).close();
  t.pass('unset, or anything but "true", is the node:http path: accepted');

  const dataDir = mkdtempSync(join(tmpdir(), 'sluice-fetch-path-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, SLUICE_DATA_DIR: dataDir, FORCE_FETCH_PATH: 'true' };
  const run = await runCli(['serve', '--config', 'config', '--listen', '127.0.0.1:0'], env);
  t.equal(run.code, 78, '`sluice serve` exits as for bad configuration');
  t.match(run.stderr, /FORCE_FETCH_PATH=true/, 'and says why');
});

t.test('5 (why). With FORCE_FETCH_PATH=true, http-proxy-3 itself hands `buffer` to fetch', async (t) => {
  const proxy = new ProxyServer({ selfHandleResponse: true, changeOrigin: true, ignorePath: true });
  t.teardown(() => proxy.close());
  const events: string[] = [];
  let response: unknown;
  proxy.on('proxyReq', () => events.push('proxyReq'));
  const answered = new Promise<void>((resolve) => proxy.on('proxyRes', (proxyRes, _req, res) => {
    events.push('proxyRes');
    response = proxyRes;
    res.writeHead(200).end();
    resolve();
  }));
  // The fetch it would call, recorded instead of sent: what it is given is what would go upstream.
  const fetched: RequestInit[] = [];
  const realFetch = globalThis.fetch;
  const before = process.env.FORCE_FETCH_PATH;
  t.teardown(() => {
    globalThis.fetch = realFetch;
    if (before === undefined) delete process.env.FORCE_FETCH_PATH;
    else process.env.FORCE_FETCH_PATH = before;
  });
  const body = new OneWrite([Buffer.from('{"model":"x"}')]);
  const url = await front(t, (req, res) => {
    req.headers = upstreamHeaders(body.length);
    process.env.FORCE_FETCH_PATH = 'true';
    globalThis.fetch = async (_input, init) => {
      fetched.push(init!);
      return new Response('{"from":"fetch"}', { status: 200 });
    };
    proxy.web(req, res, { target: new URL('http://127.0.0.1:9/api/v1/chat/completions'), agent, buffer: body }, () => res.writeHead(502).end());
  });
  const res = await realFetch(url, { method: 'POST', headers: CLIENT_HEADERS, body: '{}' });
  await res.arrayBuffer();
  await answered;
  t.equal(fetched.length, 1, 'web() went through fetch');
  t.equal(fetched[0]!.body, body, 'with the body object itself as the fetch body, not its bytes');
  t.same(events, ['proxyRes'], "no 'proxyReq': the exchange would never see its upstream request");
  t.notOk(response instanceof IncomingMessage, 'and the response is no IncomingMessage to stream from');
});
