// Connection bounds on real sockets, with small configured values and no timing guesses: every
// wait is for a socket's 'close' or a response. The per-address cap closes the N+1th connection
// of one address before reading it, while other addresses and a trusted proxy are unaffected, and
// a closed connection frees its place; the global cap does the same for every address; both
// refusals count (metric, /api/health, one log line). A connection that sends nothing and one that
// trickles header lines are answered 408 and closed by the header timeout, while a slow stream
// outlives it. /health?details shows only the status; the details moved to the board's
// /api/health. The keep-alive timeout sluice advertises stays above nginx's 60 s.

import { once } from 'node:events';
import net from 'node:net';
import { Writable } from 'node:stream';
import t from 'tap';
import type { Test } from 'tap';
import { createKey } from '../helpers/keys.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { createGateway, VERSION } from '../../lib/server.ts';
import { readSettings, type Settings } from '../../lib/settings.ts';
import { openStore } from '../../lib/store/open.ts';
import { startSimWithConfig, UPSTREAM_KEYS } from '../helpers/gateway.ts';

async function start(t: Test, connections: Partial<Pick<Settings, 'maxConnections' | 'maxPerAddress' | 'headersTimeoutMs'>>, env: Record<string, string> = {}, host = '127.0.0.1') {
  const { sim, dataDir, config } = await startSimWithConfig(t);
  const store = await openStore({ dataDir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const gateway = await createGateway({
    config, store, counters, log: createLogger('debug', sink), dataDir, loadCatalog: false,
    // Bounds smaller than the variables' units (a 400 ms header timeout) go in past the reader.
    settings: Object.freeze({ ...readSettings({ SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev, SLUICE_USAGE_REFRESH_S: '0', SLUICE_RECONCILE_POLL_S: '0', ...env }), ...connections }),
  });
  const { port } = await gateway.listen(host, 0);
  t.teardown(() => gateway.close(1000));
  // The server's side of each connection, by the client's port: a test waits for its 'close'.
  const serverSide = new Map<number, net.Socket>();
  gateway.server.on('connection', (s: net.Socket) => serverSide.set(s.remotePort!, s));
  return { sim, store, config, gateway, port, logs: () => lines.map((l) => JSON.parse(l) as Record<string, any>), serverSide };
}

/** A connection from `from` (any 127.0.0.0/8 address is this host; ::1 to an IPv6 listener); resolves once TCP is up. */
async function connect(port: number, from = '127.0.0.1'): Promise<net.Socket & { received: () => string }> {
  const socket = net.connect({ port, host: from.includes(':') ? from : '127.0.0.1', localAddress: from });
  let data = '';
  socket.setEncoding('latin1').on('data', (d: string) => (data += d));
  socket.on('error', () => {}); // a refused connection may be reset: its 'close' is what counts
  await once(socket, 'connect');
  return Object.assign(socket, { received: () => data });
}

/** GET `path` on an open connection (kept alive); resolves with the response, its body de-chunked, once complete. */
async function get(socket: net.Socket & { received: () => string }, path = '/health'): Promise<string> {
  const start = socket.received().length;
  socket.write(`GET ${path} HTTP/1.1\r\nhost: sluice\r\n\r\n`);
  for (;;) {
    const text = socket.received().slice(start);
    const end = text.indexOf('\r\n\r\n');
    if (end >= 0) {
      const head = text.slice(0, end + 4);
      const rest = text.slice(end + 4);
      const length = /^content-length: (\d+)/im.exec(head);
      if (length && rest.length >= Number(length[1])) return head + rest.slice(0, Number(length[1]));
      if (/^transfer-encoding: chunked/im.test(head) && /(^|\r\n)0\r\n\r\n$/.test(rest)) return head + dechunk(rest);
    }
    await Promise.race([once(socket, 'data'), once(socket, 'close').then(() => { throw new Error(`closed mid-response: ${text}`); })]);
  }
}

function dechunk(raw: string): string {
  let out = '';
  for (let i = 0; ;) {
    const eol = raw.indexOf('\r\n', i);
    const size = parseInt(raw.slice(i, eol), 16);
    if (size === 0) return out;
    out += raw.slice(eol + 2, eol + 2 + size);
    i = eol + 2 + size + 2;
  }
}

/** A one-off GET from `from` on its own connection. */
async function fetchFrom(port: number, path: string, from: string): Promise<string> {
  const socket = await connect(port, from);
  try {
    return await get(socket, path);
  } finally {
    socket.destroy();
  }
}

/** Waits until the server has closed a refused connection; asserts nothing was answered on it. */
async function refusedAtOnce(t: Test, socket: net.Socket & { received: () => string }, what: string): Promise<void> {
  socket.write('GET /health HTTP/1.1\r\nhost: sluice\r\n\r\n');
  if (!socket.destroyed) await once(socket, 'close');
  t.equal(socket.received(), '', `${what}: closed without an answer`);
}

t.test('the per-address cap: the N+1th connection of one address is closed, others are unaffected', async (t) => {
  const g = await start(t, { maxPerAddress: 3 }, { SLUICE_TRUSTED_PROXIES: '127.0.0.2' });
  const held = [];
  for (let i = 0; i < 3; i++) {
    const s = await connect(g.port);
    t.match(await get(s), /^HTTP\/1\.1 200 [^]*\r\n\r\nok$/, `connection ${i + 1} of 127.0.0.1 is served`);
    held.push(s);
  }
  await refusedAtOnce(t, await connect(g.port), 'the fourth connection of 127.0.0.1');
  for (const s of held) t.match(await get(s), /\r\n\r\nok$/, 'the three held connections still work');

  t.match(await fetchFrom(g.port, '/health', '127.0.0.3'), /\r\n\r\nok$/, 'another address is served');
  const proxied = [];
  for (let i = 0; i < 5; i++) proxied.push(await connect(g.port, '127.0.0.2'));
  for (const s of proxied) t.match(await get(s), /\r\n\r\nok$/, 'the trusted proxy is not capped');
  for (const s of proxied) s.destroy();

  // A connection that closes frees its place.
  const gone = held.pop()!;
  const side = g.serverSide.get(gone.localPort!)!;
  gone.destroy();
  if (!side.destroyed) await once(side, 'close');
  const next = await connect(g.port);
  t.match(await get(next), /\r\n\r\nok$/, 'a freed place is taken again');
  held.push(next);

  const health = JSON.parse((await fetchFrom(g.port, '/api/health', '127.0.0.3')).split('\r\n\r\n')[1]!);
  t.same(health.connections, { max: readSettings({}).maxConnections, max_per_address: 3, refused: { per_address: 1, global: 0 } });
  const metrics = await fetchFrom(g.port, '/metrics', '127.0.0.3');
  t.match(metrics, /^sluice_connections_refused_total\{cap="per_address"\} 1$/m, 'the metric counts the refusal');
  t.match(metrics, /^sluice_connections_refused_total\{cap="global"\} 0$/m);
  // Another refusal within the minute: counted, not logged again.
  await refusedAtOnce(t, await connect(g.port), 'the fourth connection again');
  const warned = g.logs().filter((l) => l.msg === 'connection refused: over a connection cap');
  t.equal(warned.length, 1, 'one log line for the minute');
  t.match(warned[0], { level: 40, reason: 'per_address', refused: { per_address: 1, global: 0 }, max_per_address: 3 });
  for (const s of held) s.destroy();
});

t.test('an IPv6 peer is capped too', { skip: !(await loopbackV6()) && 'no IPv6 loopback here' }, async (t) => {
  const g = await start(t, { maxPerAddress: 1 }, {}, '::1');
  const first = await connect(g.port, '::1');
  t.match(await get(first), /\r\n\r\nok$/, 'the first connection of ::1 is served');
  await refusedAtOnce(t, await connect(g.port, '::1'), 'the second connection of ::1');
  first.destroy();
});

async function loopbackV6(): Promise<boolean> {
  const s = net.createServer();
  return new Promise((resolve) => {
    s.once('error', () => resolve(false));
    s.listen(0, '::1', () => s.close(() => resolve(true)));
  });
}

t.test('the global cap: one connection over it is closed, whatever its address', async (t) => {
  const g = await start(t, { maxConnections: 2, maxPerAddress: 0 });
  const a = await connect(g.port);
  const b = await connect(g.port, '127.0.0.3');
  t.match(await get(a), /\r\n\r\nok$/);
  t.match(await get(b), /\r\n\r\nok$/);
  await refusedAtOnce(t, await connect(g.port, '127.0.0.4'), 'the third connection');
  const side = g.serverSide.get(a.localPort!)!;
  a.destroy();
  if (!side.destroyed) await once(side, 'close');
  const health = JSON.parse((await fetchFrom(g.port, '/api/health', '127.0.0.4')).split('\r\n\r\n')[1]!);
  t.same(health.connections.refused, { per_address: 0, global: 1 });
  t.match(g.logs().find((l) => l.msg === 'connection refused: over a connection cap'), { reason: 'global', refused: { global: 1 } });
  b.destroy();
});

t.test('the header timeout closes silent and trickling connections; a slow stream outlives it', async (t) => {
  const g = await start(t, { headersTimeoutMs: 400 });

  const silent = await connect(g.port);
  const t0 = performance.now();
  await once(silent, 'close');
  t.match(silent.received(), /^HTTP\/1\.1 408 Request Timeout\r\n/, 'a connection that sends nothing: 408');
  t.ok(performance.now() - t0 >= 380, `not before the timeout (${Math.round(performance.now() - t0)} ms)`);

  const trickle = await connect(g.port);
  const t1 = performance.now();
  trickle.write('POST /v1/chat/completions HTTP/1.1\r\nhost: sluice\r\n');
  let sent = 0;
  const drip = setInterval(() => {
    if (trickle.writable) trickle.write(`x-drip-${sent++}: ${'v'.repeat(8)}\r\n`);
  }, 50);
  await once(trickle, 'close');
  clearInterval(drip);
  t.match(trickle.received(), /^HTTP\/1\.1 408 Request Timeout\r\n/, 'a connection trickling header lines: 408');
  t.ok(performance.now() - t1 >= 380, 'closed at the timeout, not at the first line');
  t.ok(sent >= 4, `it kept sending lines until it was closed (${sent})`);

  // A stream whose response takes longer than the header timeout runs to its end.
  const key = await createKey(g.store, g.config, { profile: 'dev', name: 'slow' });
  const res = await fetch(`http://127.0.0.1:${g.port}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'chunks=8;chunk-delay-ms=100' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'slow' }] }),
  });
  t.equal(res.status, 200);
  const body = await res.text();
  t.match(body, /data: \[DONE\]\n\n$/, 'the slow stream finished');
  t.equal((body.match(/"content":"[^"]+"/g) ?? []).length, 8, 'all eight chunks arrived');
});

t.test('/health stays plain; its details show only the status; the board has the rest', async (t) => {
  const g = await start(t, {});
  const plain = await fetchFrom(g.port, '/health', '127.0.0.1');
  t.match(plain, /\r\n\r\nok$/);
  const details = await fetchFrom(g.port, '/health?details', '127.0.0.1');
  const body = details.split('\r\n\r\n')[1]!;
  t.same(JSON.parse(body), { status: 'ok' }, 'only the status');
  t.notMatch(body, VERSION, 'no version');
  for (const profile of g.config.profiles.keys()) t.notMatch(body, profile, `no profile name (${profile})`);
  t.match(details, /^keep-alive: timeout=65$/im, 'idle connections are kept 65 s, above nginx\'s 60 s');
  const full = JSON.parse((await fetchFrom(g.port, '/api/health', '127.0.0.1')).split('\r\n\r\n')[1]!);
  t.match(full, { status: 'ok', version: VERSION, store: { kind: 'sqlite' }, counters: { kind: 'memory' }, in_flight: 1 });
  t.same(Object.keys(full.catalog), ['sim'], 'the board route keeps the details');
});
