// The proxy core's bounds against the simulated router: a client that never reads its stream is
// cut off (its socket closed, one row, nothing left in flight, the upstream released), and what
// a request the router received but never answered in full costs: a hang-up before the first
// byte or an upstream timeout is charged the prompt estimate and the budget sees it at once, a
// hang-up after the headers keeps the router's generation id (so ring 1 reconciles it), and a
// router that was never reached costs nothing. Waits are on events and rows, never on sleeps.

import { once } from 'node:events';
import net from 'node:net';
import t from 'tap';
import type { SimRequest } from '../../lib/sim/index.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { RECONCILE } from '../../lib/upstream/reconcile.ts';
import { startHarness, type Harness, type HarnessOptions } from '../helpers/gateway.ts';
import { until } from '../helpers/processes.ts';

/** USD per input token of the fast tier (tests/helpers/gateway.ts: 0.30 per million). */
const FAST_INPUT = 0.3 / 1e6;

async function setup(t: Parameters<typeof startHarness>[0], opts: HarnessOptions = {}) {
  const h = await startHarness(t, opts);
  return { h, key: await h.key('dev'), port: Number(new URL(h.url).port) };
}

/** A chat request with a prompt of about 4 KB, so the estimate is clearly above zero. */
function chatBody(stream: boolean): string {
  return JSON.stringify({ model: 'sluice/fast', stream, messages: [{ role: 'user', content: 'tell me about rivers '.repeat(200) }] });
}

/** The request written at once on a fresh socket; the socket is handed back unread. */
function rawPost(port: number, key: string, body: string, sim: string): net.Socket {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {}); // a reset from the gateway is one of the ends a test waits for
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: sluice\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\n`
    + `x-sim: ${sim}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  return socket;
}

/** The prompt estimate of the one inference request the sim received: ceil(bytes / 4) tokens at the fast tier's input price. */
function estimateOf(h: Harness): number {
  const up = h.sim.received.filter(isInference);
  if (up.length !== 1) throw new Error(`expected one inference request upstream, saw ${up.length}`);
  return Math.round(Math.ceil(Buffer.byteLength(up[0]!.body) / 4) * FAST_INPUT * 1e10) / 1e10;
}

const isInference = (r: SimRequest): boolean => r.path === '/api/v1/chat/completions';

/** The next sim event `name` ('request' or 'closed') of an inference request. */
function nextInference(h: Harness, name: 'request' | 'closed'): Promise<SimRequest> {
  return new Promise((resolve) => {
    const on = (r: SimRequest): void => {
      if (!isInference(r)) return;
      h.sim.events.off(name, on);
      resolve(r);
    };
    h.sim.events.on(name, on);
  });
}

async function inFlight(h: Harness): Promise<number> {
  return ((await (await fetch(`${h.url}/api/health`)).json()) as { in_flight: number }).in_flight;
}

t.test('a client that never reads its stream is cut off: socket closed, one row, nothing in flight, upstream released', async (t) => {
  // The client-stall limit defaults to the upstream timeout: 1 s here (the sim must still answer
  // within it on a loaded machine, building a 16 MB answer).
  const { h, key, port } = await setup(t, { upstreamTimeoutMs: 1000 });
  const upstreamClosed = nextInference(h, 'closed');
  // 16 MB in 1,000 events: far more than the sockets between the sim and the client can hold.
  const client = rawPost(port, key, chatBody(true), 'bytes=16000000;chunks=1000');
  t.teardown(() => client.destroy());
  const [row] = (await h.rows(1)) as RequestRow[];
  t.match(row, { outcome: 'client_disconnect', status: 200, stream: true, cost_source: 'estimate' });
  t.ok(row!.generation_id, 'the generation id the stream gave');
  t.equal(row!.cost_usd, estimateOf(h), 'no usage came: the prompt is estimated');
  t.equal((await upstreamClosed).aborted, true, 'sluice aborted the upstream request');
  await until('the request to leave the in-flight count', async () => (await inFlight(h)) === 1);
  t.equal(await inFlight(h), 1, 'only the /api/health request itself is in flight');
  t.same(h.gateway.upstreamSockets().active, 0, 'no upstream socket is held');
  // Read now: what was queued arrives, then the end sluice gave the socket.
  const closed = once(client, 'close');
  client.resume();
  await closed;
  t.equal(h.rowCount(), 1, 'exactly one row');
});

t.test('a hang-up before the first response byte is charged the prompt estimate, and the budget sees it', async (t) => {
  const { h, key } = await setup(t);
  const profile = h.config.profiles.get('dev')!;
  const before = (await h.gateway.deps.budget.state(profile)).day_usd;
  const arrived = nextInference(h, 'request');
  const closed = nextInference(h, 'closed');
  const ac = new AbortController();
  const pending = fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal, body: chatBody(true),
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'delay-ms=60000' },
  }).then(() => 'answered', () => 'aborted');
  await arrived; // the router has the whole request; its headers are a minute away
  ac.abort();
  t.equal(await pending, 'aborted');
  await closed;
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'client_disconnect', status: 499, ttfb_ms: null, generation_id: null, cost_source: 'estimate', input_tokens: 0, output_tokens: 0 });
  t.ok(row!.cost_usd > 0, `the prompt is charged: ${row!.cost_usd}`);
  t.equal(row!.cost_usd, estimateOf(h), 'ceil(bytes / 4) tokens at the tier\'s input price');
  const after = await until('the spend to count the row', async () => {
    const s = (await h.gateway.deps.budget.state(profile)).day_usd;
    return s > before ? s : undefined;
  });
  t.ok(after - before > 0, `the profile's spend rose by ${after - before}`);
});

t.test('a hang-up after the headers keeps the router\'s x-generation-id, and ring 1 reconciles the row', async (t) => {
  const { h, key, port } = await setup(t, { env: { SLUICE_RECONCILE_POLL_S: '0.1' } });
  h.sim.setGenerationDelay(0);
  // A 12 MB JSON answer: the client reads the headers and leaves long before the body is whole,
  // so the body never yields its id; the router's header carries it.
  const client = rawPost(port, key, chatBody(false), 'bytes=12000000');
  let head = '';
  for await (const chunk of client) {
    head += (chunk as Buffer).toString('latin1');
    if (head.includes('\r\n\r\n')) break; // leaving the loop destroys the socket
  }
  const id = /\r\nx-generation-id: ([^\r]+)\r\n/i.exec(head)?.[1];
  t.ok(id, 'the router\'s header reached the client');
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'client_disconnect', status: 200, stream: false, generation_id: id, cost_source: 'estimate' });
  t.equal(row!.cost_usd, estimateOf(h), 'the body gave no usage: the prompt estimate');
  const record = await until('the generation record at the router', async () => h.sim.generation(id!));
  h.clock.now = Date.parse(row!.ts) + RECONCILE.firstLookupMs;
  const reconciled = await until('the row to carry the router\'s cost', async () =>
    (await h.store.listRequests(100)).find((r) => r.id === row!.id && r.cost_source === 'upstream'));
  t.equal(reconciled.cost_usd, record.total_cost, 'the router\'s figure replaced the estimate');
});

t.test('an upstream timeout before the headers (504) is charged the prompt estimate', async (t) => {
  const { h, key } = await setup(t, { upstreamTimeoutMs: 300 });
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', body: chatBody(false), headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'hang' },
  });
  t.equal(res.status, 504);
  await res.arrayBuffer();
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'upstream_error', status: 504, generation_id: null, cost_source: 'estimate' });
  t.equal(row!.cost_usd, estimateOf(h));
  t.ok(row!.cost_usd > 0);
});

t.test('a router that was never reached (connection refused) costs nothing', async (t) => {
  const { h, key } = await setup(t);
  await h.sim.close();
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', body: chatBody(false), headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
  });
  t.equal(res.status, 502);
  await res.arrayBuffer();
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'upstream_error', status: 502, cost_usd: 0, cost_source: 'estimate' });
});
