// The soft drain (lib/server.ts close), in-process over real connections: once it begins, a new
// connection is refused (the listening handle is gone) but a request on a connection already open
// is still answered, with `connection: close`, and the connection then closes; the connections are
// told one a step over the spread, by the gateway's clock, and every one once the spread is over; a response whose head was still to be written says `connection: close`; an
// idle connection is closed once the drain's idle time is over, not at once; an open stream runs to
// its last event and its row, and close() resolves only after it. Every wait is for an event (a
// socket's close, the simulated router seeing the request, a chunk, the spread's end), the spread's
// steps are the harness clock's, and the idle time is either long and ended by hurry() or short
// and waited for by the socket's close.

import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import t from 'tap';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const CHAT = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: 'sluice/fast', max_tokens: 16, messages: [{ role: 'user', content: 'hi' }], ...extra });

/** One keep-alive connection, to send requests on one after another and see it close. */
function connection(h: Harness) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const port = Number(new URL(h.url).port);
  let socket: net.Socket | undefined;
  return {
    agent,
    get socket() {
      return socket!;
    },
    send(key: string, o: { sim?: string; stream?: boolean } = {}): Promise<{ status: number; connection: string | undefined; body: string; res: http.IncomingMessage }> {
      return new Promise((resolve, reject) => {
        const req = http.request({
          host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', agent,
          headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...(o.sim ? { 'x-sim': o.sim } : {}) },
        }, (res) => {
          let body = '';
          res.setEncoding('utf8').on('data', (d: string) => (body += d));
          res.once('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, body, res }));
        });
        req.once('socket', (s) => (socket = s));
        req.once('error', reject);
        req.end(CHAT(o.stream ? { stream: true } : {}));
      });
    },
  };
}

/** `n` keep-alive connections, each opened by one answered request, one after another (so accepted in this order). */
async function opened(h: Harness, key: string, n: number): Promise<Array<ReturnType<typeof connection>>> {
  const conns = Array.from({ length: n }, () => connection(h));
  for (const c of conns) await c.send(key);
  return conns;
}

function refused(h: Harness): Promise<string> {
  return new Promise((resolve) => {
    const s = net.connect(Number(new URL(h.url).port), '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
  });
}

t.test('a request on an open connection during the drain is answered with connection: close; new connections are refused', async (t) => {
  const h = await startHarness(t, { drainIdleMs: 60_000 });
  const key = await h.key();
  const c = connection(h);
  const first = await c.send(key);
  t.equal(first.status, 200);
  t.equal(first.connection, 'keep-alive', 'before the drain: kept alive');
  const socket = c.socket;
  const closing = h.gateway.close(60_000);
  t.equal(await refused(h), 'ECONNREFUSED', 'the listening handle is gone: a new connection is refused');
  t.equal(socket.destroyed, false, 'the idle connection is not closed at once');
  const during = await c.send(key);
  t.equal(c.socket, socket, 'the same connection');
  t.equal(during.status, 200, 'answered in full');
  t.equal(during.connection, 'close', 'and told to close');
  if (!socket.closed) await once(socket, 'close');
  t.pass('the connection closed after that response');
  h.gateway.hurry();
  await closing;
  c.agent.destroy();
});

t.test('the spread tells one connection a step, the first to answer in it, by the gateway clock', async (t) => {
  const h = await startHarness(t, { drainSpreadMs: 60_000, drainIdleMs: 60_000 });
  const key = await h.key();
  const [a, b, c] = await opened(h, key, 3);
  let told = false;
  // A grace of 120 s leaves room for the spread and the 60 s idle time after it.
  const closing = h.gateway.close(120_000, () => (told = true));
  // Three connections over 60 s: steps at 0, 20 and 40 s.
  t.equal((await c.send(key)).connection, 'close', 'the first to answer in the first step is told, though the youngest');
  t.equal((await a.send(key)).connection, 'keep-alive', 'one a step: the others wait');
  t.equal((await b.send(key)).connection, 'keep-alive', 'both of them');
  h.clock.now += 20_000;
  const bSocket = b.socket;
  t.equal((await b.send(key)).connection, 'close', 'the second step tells the next to answer');
  t.equal((await a.send(key)).connection, 'keep-alive', 'and only it');
  if (!bSocket.closed) await once(bSocket, 'close');
  h.clock.now += 20_000;
  t.equal((await a.send(key)).connection, 'close', 'the third is told at 40 s');
  t.equal(told, false, 'the spread runs on its own timer: not over yet');
  h.gateway.hurry();
  await closing;
  t.equal(told, true, 'a second signal ends the spread: every connection counts as told');
  for (const x of [a, b, c]) x.agent.destroy();
});

t.test('once the spread is over every response says connection: close, those still to be written included', async (t) => {
  // Two connections over 100 ms, each with a response still to be written when the drain begins:
  // the first takes the first step; the second step begins at 50 ms, but the harness clock stands
  // still, so only the spread's end can tell the second. A second signal then ends both before
  // the router answers (a 503 each).
  const h = await startHarness(t, { drainSpreadMs: 100, drainIdleMs: 60_000 });
  const key = await h.key();
  const [a, b] = await opened(h, key, 2);
  const pending = [];
  for (const x of [a, b]) {
    const seen = once(h.sim.events, 'request');
    pending.push(x.send(key, { sim: 'delay-ms=60000' }));
    await seen;
  }
  let toldAll!: () => void;
  const told = new Promise<void>((resolve) => (toldAll = resolve));
  const closing = h.gateway.close(120_000, () => toldAll());
  await told;
  h.gateway.hurry();
  const [ra, r] = await Promise.all(pending);
  t.equal(ra!.connection, 'close', 'the first told in the first step');
  t.equal(r!.status, 503, 'the second signal ended it before its head');
  t.equal(r!.connection, 'close', 'the second told at the spread\'s end, its step not begun');
  await closing;
  for (const x of [a, b]) x.agent.destroy();
});

t.test('a grace no longer than the idle time leaves no room for a spread: every connection is told at once', async (t) => {
  const h = await startHarness(t, { drainSpreadMs: 60_000, drainIdleMs: 60_000 });
  const key = await h.key();
  const [a, b] = await opened(h, key, 2);
  let told = false;
  const closing = h.gateway.close(60_000, () => (told = true));
  const r = await b.send(key);
  t.equal(r.connection, 'close', 'the second connection, due after 30 s by the schedule, is told at once');
  t.equal(told, true, 'toldAll ran before that request was answered');
  h.gateway.hurry();
  await closing;
  for (const x of [a, b]) x.agent.destroy();
});

t.test('a response not begun when the drain began says connection: close', async (t) => {
  const h = await startHarness(t, { drainIdleMs: 60_000 });
  const key = await h.key();
  const c = connection(h);
  await c.send(key); // the connection is open and idle
  const seen = once(h.sim.events, 'request');
  const slow = c.send(key, { sim: 'delay-ms=300' });
  await seen; // sluice forwarded it: its response head is still to come
  const closing = h.gateway.close(60_000);
  const r = await slow;
  t.equal(r.status, 200);
  t.equal(r.connection, 'close');
  h.gateway.hurry();
  await closing;
  c.agent.destroy();
});

t.test('an idle connection is closed once the idle time is over', async (t) => {
  const h = await startHarness(t, { drainIdleMs: 100 });
  const key = await h.key();
  const c = connection(h);
  await c.send(key);
  const socket = c.socket;
  const closing = h.gateway.close(60_000);
  await once(socket, 'close');
  t.pass('closed by the drain');
  await closing;
  c.agent.destroy();
});

t.test('an open stream runs to its last event and its row; close() waits for it', async (t) => {
  const h = await startHarness(t, { drainIdleMs: 50 });
  const key = await h.key();
  const c = connection(h);
  let closedAt = 0;
  let endedAt = 0;
  const stream = c.send(key, { stream: true, sim: 'chunks=6;chunk-delay-ms=100' }).then((r) => {
    endedAt = performance.now();
    return r;
  });
  await once(h.sim.events, 'request');
  const closing = h.gateway.close(60_000).then(() => (closedAt = performance.now()));
  const r = await stream;
  t.equal(r.status, 200);
  t.match(r.body, /data: \[DONE\]\n\n$/, 'the stream reached its last event');
  t.notMatch(r.body, /"error"/, 'no error event');
  await closing;
  t.ok(closedAt >= endedAt, 'close() resolved after the stream ended');
  const rows = await h.store.listRequests(10);
  t.equal(rows.length, 1, 'one row');
  t.match(rows[0], { stream: true, status: 200, outcome: 'ok' });
  c.agent.destroy();
});
