// The client's side of an exchange (lib/proxy/exchange.ts), with the proxy core between a plain
// node:http front and a hand-written upstream: sluice's own backpressure pause is not upstream
// silence (a slow reader gets the whole stream), a response sluice ended itself that the client
// cannot take loses its socket after endGraceMs, a client that never reads is cut off after
// clientStallMs, and the cost of a request the router received but never answered in full: its
// prompt estimated (at the default tier's prices for a model nobody prices), the `x-generation-id`
// header kept, an error answer not charged. Option values are small; the tests wait on events
// (rows, the front going idle, sockets closing), never on a timer firing at a given time.

import { waitDrain } from '../../../lib/sim/exchange.ts';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net, { type AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import type { Catalog } from '../../../lib/catalog.ts';
import type { Config } from '../../../lib/config.ts';
import type { ReadCtx } from '../../../lib/context.ts';
import { createLogger } from '../../../lib/log.ts';
import { EXCHANGE, type Exchange } from '../../../lib/proxy/exchange.ts';
import { createProxy } from '../../../lib/proxy/index.ts';
import type { RequestRow } from '../../../lib/store/store.ts';
import { scannedBody } from '../../helpers/body.ts';

/** USD per token of the rig's one tier (1 USD per million input tokens). */
const INPUT_PRICE = 1e-6;

interface RigOptions { upstreamTimeoutMs: number; clientStallMs?: number; endGraceMs?: number; ctx?: Partial<ReadCtx> }

interface Rig {
  port: number;
  rows: RequestRow[];
  /** 'row' (each row recorded), 'idle' (the front answers no request), 'full' (see watchFull). */
  events: EventEmitter;
  inFlight(): number;
  /** The front's requests, in arrival order (each carries its exchange under EXCHANGE). */
  requests: IncomingMessage[];
  /** The proxy's interrupt(): what a shutdown calls once its grace is over. */
  interrupt(): void;
}

async function listen(server: http.Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** The upstream `handler`, the proxy core, and a front that hands each request to it as the handler would. */
async function rig(t: Test, handler: http.RequestListener, opts: RigOptions): Promise<Rig> {
  const upstream = http.createServer(handler);
  const upstreamPort = await listen(upstream);
  t.teardown(() => {
    upstream.closeAllConnections();
    upstream.close();
  });
  const config = {
    routers: new Map([['r', { name: 'r', url: new URL(`http://127.0.0.1:${upstreamPort}/`) }]]),
    tiers: new Map([['fast', { name: 'fast', model: 'test/fast', fallbacks: [], price: { input_per_mtok: 1, output_per_mtok: 4 }, max_output_tokens: 1000 }]]),
  } as unknown as Config;
  const events = new EventEmitter();
  const rows: RequestRow[] = [];
  const proxy = createProxy({
    log: createLogger('silent'), config, catalog: { prices: () => undefined } as unknown as Catalog, now: Date.now,
    record: (row) => {
      rows.push(row);
      events.emit('row', row);
    },
    upstreamTimeoutMs: opts.upstreamTimeoutMs, clientStallMs: opts.clientStallMs, endGraceMs: opts.endGraceMs,
  });
  let inFlight = 0;
  const requests: IncomingMessage[] = [];
  const front = http.createServer((req, res) => {
    inFlight++;
    requests.push(req);
    watchFull(res, events);
    res.on('close', () => {
      if (--inFlight === 0) events.emit('idle');
    });
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => proxy.forward(ctxOf(req, res, Buffer.concat(parts), opts.ctx)));
  });
  const port = await listen(front);
  t.teardown(() => {
    front.closeAllConnections();
    front.close();
    proxy.close();
  });
  return { port, rows, events, requests, inFlight: () => inFlight, interrupt: () => proxy.interrupt() };
}

/**
 * Emits 'full' when a write to the client found its socket full: the write returned false and,
 * a tick later (once the socket is uncorked and written), bytes are still queued in user space,
 * which means the kernel refused them. A client that never reads stays full from then on.
 */
function watchFull(res: ServerResponse, events: EventEmitter): void {
  const write = res.write.bind(res) as (...args: unknown[]) => boolean;
  (res as { write: (...args: unknown[]) => boolean }).write = (...args) => {
    const ok = write(...args);
    if (!ok) setImmediate(() => (res.socket?.writableLength ?? 0) > 0 && events.emit('full'));
    return ok;
  };
}

function ctxOf(req: IncomingMessage, res: ServerResponse, raw: Buffer, extra: Partial<ReadCtx> = {}): ReadCtx {
  return {
    id: randomUUID(), req, res, route: 'chat', dialect: 'chat', t0: performance.now(), ip: '127.0.0.1',
    key: { row: { prefix: 'sk-test' }, allow: undefined },
    profile: { name: 'p', default_tier: 'fast', router: 'r', budget: { daily_usd: 1, monthly_usd: 1 }, l2_cache: false, rate_limits: { per_key_per_minute: 1, per_user_per_minute: 1 } },
    upstreamKey: 'sk-upstream', raw, body: scannedBody(raw), stream: true, endUser: null, session: null, run: null,
    requestedModel: 'sluice/fast', tier: 'fast', model: 'test/fast', degradation: 'none', budget: null, removed: [], adjusted: [],
    ...extra,
  } as unknown as ReadCtx;
}

const BODY = JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'x'.repeat(1000) }] });
const ESTIMATE = Math.ceil(Buffer.byteLength(BODY) / 4) * INPUT_PRICE;

/** A raw HTTP/1.1 request on its own socket, written at once; the socket is handed back unread. */
function rawRequest(port: number): net.Socket {
  const socket = net.connect(port, '127.0.0.1');
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: sluice\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(BODY)}\r\n\r\n${BODY}`);
  return socket;
}

/** One chat chunk of about 1 KB; its id is the generation's, as the router's first chunk gives it. */
const EVENT = `data: ${JSON.stringify({ id: 'gen-upstream', choices: [{ delta: { content: 'y'.repeat(1000) } }] })}\n\n`;

/** Writes EVENT after EVENT, waiting for drain, until `total` bytes are sent or the response closes. */
async function endlessStream(res: ServerResponse, total = Infinity): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'x-generation-id': 'gen-upstream' });
  let sent = 0;
  while (!res.destroyed && sent < total) {
    sent += EVENT.length;
    if (!res.write(EVENT)) await waitDrain(res);
  }
  if (!res.destroyed) res.end();
}

t.test('a slow reader gets the whole stream: sluice\'s own pause is not upstream silence', async (t) => {
  // The reader stops twice for three upstream timeouts each while the upstream has more to send;
  // the client-stall limit is far above that. Before, the silence timer ran during the pause and
  // cut the stream. (The timeout is not smaller so that a loaded machine's own pauses never reach it.)
  const events = 16 * 1024; // 16 MB: more than the sockets between the upstream and the reader hold
  const r = await rig(t, (_req, res) => void endlessStream(res, events * EVENT.length), { upstreamTimeoutMs: 500, clientStallMs: 60_000 });
  const res = await new Promise<IncomingMessage>((resolve) => {
    const req = http.request({ port: r.port, host: '127.0.0.1', method: 'POST', path: '/v1/chat/completions', headers: { 'content-type': 'application/json' } }, resolve);
    req.end(BODY);
  });
  t.equal(res.statusCode, 200);
  let bytes = 0;
  let tail = '';
  let stops = 2;
  res.on('data', (c: Buffer) => {
    bytes += c.length;
    tail = (tail + c.toString('latin1')).slice(-200);
    if (stops > 0 && bytes >= (2 - stops) * 1024 * 1024) {
      stops--;
      res.pause();
      setTimeout(() => res.resume(), 1500); // a slow reader: its pace, not an assertion on a timer
    }
  });
  await once(res, 'end');
  t.equal(stops, 0, 'the reader stopped twice');
  t.equal(bytes, events * EVENT.length, 'every byte arrived');
  t.notOk(tail.includes('upstream_timeout'), 'no timeout error event');
  const [row] = r.rows.length ? r.rows : ((await once(r.events, 'row')) as [RequestRow]);
  t.match(row, { outcome: 'ok', status: 200, generation_id: 'gen-upstream' });
});

t.test('a response sluice ended itself that the client cannot take loses its socket after endGraceMs', async (t) => {
  const r = await rig(t, (_req, res) => void endlessStream(res), { upstreamTimeoutMs: 60_000, clientStallMs: 60_000, endGraceMs: 50 });
  const client = rawRequest(r.port); // never read until the end of the test
  t.teardown(() => client.destroy());
  await once(r.events, 'full'); // the client's socket takes no more: an end written now stays queued
  const ex = (r.requests[0] as IncomingMessage & { [EXCHANGE]?: Exchange })[EXCHANGE]!;
  t.equal(ex.upstreamRes!.socket!.timeout, 0, 'held for the client: the upstream silence timer is off');
  const idle = once(r.events, 'idle');
  r.interrupt(); // sluice ends the stream itself (a shutdown's grace is over): its error event, its end
  const [row] = r.rows;
  t.match(row, { outcome: 'gateway_error', status: 200 });
  await idle;
  t.equal(r.inFlight(), 0, 'the front holds no request: the client socket was destroyed');
  const closed = once(client, 'close');
  client.on('error', () => {});
  client.resume(); // what was in flight drains, then the end sluice gave the socket
  await closed;
  t.equal(r.rows.length, 1, 'one row');
});

t.test('a client that never reads is cut off after clientStallMs with one row; the upstream is released', async (t) => {
  let upstreamClosed!: (aborted: boolean) => void;
  const aborted = new Promise<boolean>((resolve) => (upstreamClosed = resolve));
  const r = await rig(t, (_req, res) => {
    res.on('close', () => upstreamClosed(!res.writableFinished));
    void endlessStream(res);
  }, { upstreamTimeoutMs: 60_000, clientStallMs: 100 });
  const client = rawRequest(r.port);
  t.teardown(() => client.destroy());
  const idle = once(r.events, 'idle');
  const [row] = (await once(r.events, 'row')) as [RequestRow];
  t.match(row, { outcome: 'client_disconnect', status: 200, generation_id: 'gen-upstream', cost_source: 'estimate' });
  t.equal(row.cost_usd, ESTIMATE, 'no usage came: the prompt is estimated from the body');
  await idle;
  t.equal(await aborted, true, 'the upstream request was aborted');
  const closed = once(client, 'close');
  client.on('error', () => {});
  client.resume();
  await closed;
  t.equal(r.rows.length, 1);
});

t.test('a hang-up after the headers keeps the router\'s x-generation-id and is charged the prompt estimate', async (t) => {
  const r = await rig(t, (_req, res) => {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'x-generation-id': 'gen-from-header' });
    res.flushHeaders(); // then nothing: the body never gives an id
  }, { upstreamTimeoutMs: 60_000 });
  const ac = new AbortController();
  const res = await fetch(`http://127.0.0.1:${r.port}/v1/chat/completions`, { method: 'POST', body: BODY, signal: ac.signal });
  t.equal(res.headers.get('x-generation-id'), 'gen-from-header');
  ac.abort();
  const [row] = (await once(r.events, 'row')) as [RequestRow];
  t.match(row, { outcome: 'client_disconnect', generation_id: 'gen-from-header', cost_source: 'estimate', input_tokens: 0, output_tokens: 0 });
  t.equal(row.cost_usd, ESTIMATE);
});

t.test('a model outside the tiers and the catalog is priced at the profile\'s default tier', async (t) => {
  const r = await rig(t, () => {}, { upstreamTimeoutMs: 100, ctx: { tier: null, model: 'unknown/model' } });
  const res = await fetch(`http://127.0.0.1:${r.port}/v1/chat/completions`, { method: 'POST', body: BODY });
  t.equal(res.status, 504, 'the router never answered');
  await res.arrayBuffer();
  const row = r.rows[0] ?? ((await once(r.events, 'row')) as [RequestRow])[0];
  t.match(row, { outcome: 'upstream_error', status: 504, cost_source: 'estimate', tier: null });
  t.equal(row.cost_usd, ESTIMATE);
});

t.test('an error answer from the router is its own word: no estimate', async (t) => {
  const r = await rig(t, (_req, res) => {
    res.writeHead(429, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ error: { code: 429, message: 'Rate limit exceeded' } }));
  }, { upstreamTimeoutMs: 60_000 });
  const res = await fetch(`http://127.0.0.1:${r.port}/v1/chat/completions`, { method: 'POST', body: BODY });
  t.equal(res.status, 429);
  await res.arrayBuffer();
  const row = r.rows[0] ?? ((await once(r.events, 'row')) as [RequestRow])[0];
  t.match(row, { outcome: 'upstream_error', status: 429, cost_usd: 0, cost_source: 'estimate' });
});
