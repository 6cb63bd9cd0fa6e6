// The upstream misbehaving under load: the router restarting mid-traffic, answering slowly,
// resetting kept-alive sockets, sending a malformed SSE line. Only the requests in flight at that
// moment fail, each with its dialect's error (an error event inside a stream that began, a 502/504
// body otherwise); the upstream pool recovers without a restart; and once the traffic is over no
// upstream socket, connection or timer is left behind (counted with getActiveResourcesInfo).

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { streamCall, streamEnding, streamRequest, type Dialect, type StreamResult } from '../../bench/stream-client.ts';
import { createKey } from '../helpers/keys.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { createGateway } from '../../lib/server.ts';
import { readSettings } from '../../lib/settings.ts';
import { startSimulatedRouter, type SimulatedRouter } from '../../lib/sim/index.ts';
import { openStore } from '../../lib/store/open.ts';
import { TIERS_YAML } from '../helpers/gateway.ts';
import { until } from '../helpers/processes.ts';

const KEYS = { BULK: 'sk-or-v1-bulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulk04', WEIRD: 'sk-or-v1-weirdweirdweirdweirdweirdweirdweirdweirdweirdweirdweird05' };
const LONG = 'chunks=400;chunk-delay-ms=20';

/** Counts of the process's active resources by type (sockets, timers, servers). */
function resources(): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) out[r] = (out[r] ?? 0) + 1;
  return out;
}

/** A TCP relay to the router that can reset its connections: every one, or each pooled one when it is next used. */
async function resettingRelay(t: Test, target: () => number) {
  const conns = new Set<{ client: Socket; upstream: Socket; resetOnUse: boolean }>();
  let resets = 0;
  const server = net.createServer((client) => {
    const upstream = net.connect(target(), '127.0.0.1');
    const c = { client, upstream, resetOnUse: false };
    conns.add(c);
    client.on('data', (d: Buffer) => {
      if (c.resetOnUse) {
        resets++;
        client.resetAndDestroy();
        upstream.destroy();
        return;
      }
      upstream.write(d);
    });
    upstream.pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      conns.delete(c);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => {
    for (const c of conns) c.client.destroy();
    server.close(() => resolve());
  }));
  return {
    port: (server.address() as AddressInfo).port,
    /** The next request on each connection open now is answered with a TCP reset. */
    resetOnNextUse: () => conns.forEach((c) => (c.resetOnUse = true)),
    /** Resets every connection now, the busy ones included. */
    resetAll: () => conns.forEach((c) => {
      resets++;
      c.client.resetAndDestroy();
      c.upstream.destroy();
    }),
    get resets() {
      return resets;
    },
  };
}

/** A router that streams a chat answer with a malformed SSE line in the middle, then ends normally. */
async function malformedRouter(t: Test) {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'x-generation-id': 'gen-weird' });
      const ev = (content: string) => `data: {"id":"gen-weird","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":null}]}\n\n`;
      res.write(ev('one '));
      res.write('data: {"id":"gen-weird","choices":[{"delta":{"content":"unterminated\n\n'); // not JSON
      res.write('event\u0000: \uFFFD\n\n'); // not even a field
      res.write(ev('two'));
      res.write('data: {"id":"gen-weird","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5,"cost":0.00001}}\n\n');
      res.end('data: [DONE]\n\n');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

t.test('the router restarting, slow, resetting sockets, malformed: only the requests in flight fail; no leak after', async (t) => {
  let sim: SimulatedRouter = await startSimulatedRouter({ record: false });
  const simPort = sim.port;
  t.teardown(() => sim.close());
  const relay = await resettingRelay(t, () => simPort);
  const weird = await malformedRouter(t);
  const configDir = mkdtempSync(join(tmpdir(), 'sluice-cfg-'));
  const dataDir = mkdtempSync(join(tmpdir(), 'sluice-data-'));
  t.teardown(() => rmSync(configDir, { recursive: true, force: true }));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const roomy = 'budget: { daily_usd: 1000, monthly_usd: 10000 }\n    rate_limits: { per_key_per_minute: 100000, per_user_per_minute: 100000 }';
  writeFileSync(join(configDir, 'profiles.yaml'), `routers:
  sim:
    url: http://127.0.0.1:${relay.port}
  weird:
    url: ${weird}
profiles:
  bulk:
    default_tier: fast
    router: sim
    ${roomy}
  weird:
    default_tier: fast
    router: weird
    ${roomy}
`);
  writeFileSync(join(configDir, 'tiers.yaml'), TIERS_YAML);
  const config = loadConfig(configDir);
  const store = await openStore({ dataDir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const gateway = await createGateway({
    config, store, counters, log: createLogger('fatal'), dataDir, loadCatalog: false,
    settings: readSettings({ SLUICE_UPSTREAM_KEY_BULK: KEYS.BULK, SLUICE_UPSTREAM_KEY_WEIRD: KEYS.WEIRD, SLUICE_UPSTREAM_TIMEOUT_S: '1' }),
  });
  const addr = await gateway.listen('127.0.0.1', 0);
  t.teardown(() => gateway.close(200));
  const origin = `http://127.0.0.1:${addr.port}`;
  const key = await createKey(store, config, { profile: 'bulk', name: 'k' });
  const weirdKey = await createKey(store, config, { profile: 'weird', name: 'k' });
  const baseline = resources();
  let sent = 0;

  const stream = async (dialect: Dialect, sim: string, k = key) => {
    sent++;
    const r = await streamRequest({ origin, keepText: true, ...streamCall(dialect, { key: k, direct: false, model: 'sluice/fast', sim }) });
    return { ...r, dialect, complete: r.status === 200 && streamEnding(dialect, r.text!).complete };
  };
  const plain = async (dialect: Dialect, sim: string) => {
    sent++;
    const call = streamCall(dialect, { key, direct: false, model: 'sluice/fast', sim });
    const body = JSON.stringify({ ...JSON.parse(call.body), stream: false });
    const r = await streamRequest({ origin, keepText: true, path: call.path, headers: call.headers, body });
    return { status: r.status, json: JSON.parse(r.text!) };
  };
  /** Opens `n` long streams (both dialects) and resolves once each has begun, with their endings. */
  const inFlight = async (n: number) => {
    const begun: Array<Promise<void>> = [];
    const ends: Array<Promise<StreamResult & { dialect: Dialect }>> = [];
    for (let i = 0; i < n; i++) {
      const dialect: Dialect = i % 2 ? 'messages' : 'chat';
      sent++;
      const call = streamCall(dialect, { key, direct: false, model: 'sluice/fast', sim: LONG });
      let began!: () => void;
      begun.push(new Promise((r) => (began = r)));
      // Reads until the first delta then on to the end: abortAfterBytes is not used, the stream ends by itself.
      ends.push(new Promise((resolve) => {
        const u = new URL(origin);
        const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: call.path, headers: call.headers, agent: false }, (res) => {
          let text = '';
          res.setEncoding('utf8').on('data', (c: string) => {
            text += c;
            if (text.includes('content_block_delta') || text.includes('"delta":{"content":"H')) began();
          });
          res.on('close', () => {
            began(); // a stream that failed before its first delta must not hold the test
            resolve({ dialect, status: res.statusCode!, text } as StreamResult & { dialect: Dialect });
          });
        });
        req.end(call.body);
      }));
    }
    await Promise.all(begun);
    return ends;
  };
  const allOk = async (what: string, n = 6) => {
    const streams = await Promise.all(Array.from({ length: n }, (_, i) => stream(i % 2 ? 'messages' : 'chat', 'chunks=5')));
    const plains = await Promise.all([plain('chat', 'chunks=3'), plain('messages', 'chunks=3')]);
    t.ok(streams.every((r) => r.complete), `${what}: every new stream completes`);
    t.ok(plains.every((r) => r.status === 200), `${what}: every new request answers 200`);
  };
  const failedInDialect = (ends: Array<StreamResult & { dialect: Dialect }>, code: string) => ends.every((e) => {
    const how = streamEnding(e.dialect, e.text!);
    return e.status === 200 && how.errorEvents === 1 && how.lastIsError && e.text!.includes(e.dialect === 'chat' ? `"code":"${code}"` : '"type":"api_error"');
  });

  await allOk('warm-up');

  // 1. The router restarts mid-traffic.
  const cut = await inFlight(10);
  await sim.close();
  const during = await plain('chat', 'chunks=3');
  t.equal(during.status, 502, 'a request while the router is down: 502');
  t.equal(during.json.error?.code, 'upstream_unreachable');
  const duringMessages = await plain('messages', 'chunks=3');
  t.same([duringMessages.status, duringMessages.json.type, duringMessages.json.error?.type], [502, 'error', 'api_error'], 'in the messages dialect too');
  t.ok(failedInDialect(await Promise.all(cut), 'upstream_stream_failed'), 'each stream in flight ended with one error event of its dialect');
  sim = await startSimulatedRouter({ port: simPort, record: false });
  await allOk('after the restart');

  // 2. Answering slowly: past the 1 s timeout, only those requests fail.
  const [slowPlain, slowStream, ...fine] = await Promise.all([
    plain('chat', 'delay-ms=3000'),
    stream('messages', 'chunks=5;silent-after=2'),
    stream('chat', 'chunks=20;chunk-delay-ms=20'),
    stream('messages', 'chunks=20;chunk-delay-ms=20'),
  ]);
  t.same([slowPlain.status, slowPlain.json.error?.code], [504, 'upstream_timeout'], 'no headers in time: 504 upstream_timeout');
  const silent = streamEnding('messages', slowStream.text!);
  t.ok(slowStream.status === 200 && silent.errorEvents === 1 && silent.lastIsError, 'silent mid-stream: one error event');
  t.ok(fine.every((r) => r.complete), 'the others are untouched');

  // 3. Kept-alive sockets reset: pooled ones when next used (retried on a fresh socket, nobody
  // fails), then every one, the busy ones included (only those in flight fail).
  const before = relay.resets;
  relay.resetOnNextUse();
  await allOk('pooled sockets reset on reuse');
  t.ok(relay.resets > before, `the reset path was taken (${relay.resets - before} resets) and retried`);
  const busy = await inFlight(6);
  relay.resetAll();
  t.ok(failedInDialect(await Promise.all(busy), 'upstream_stream_failed'), 'the streams whose sockets were reset end with their dialect\'s error event');
  await allOk('after resetting every socket');

  // 4. A malformed SSE line passes through as sent (sluice never rewrites a response); the tap skips it.
  const odd = await stream('chat', '', weirdKey);
  t.equal(odd.status, 200);
  t.ok(odd.text!.includes('"content":"unterminated') && odd.text!.includes('event\u0000: \uFFFD'), 'the malformed lines reach the client unchanged');
  t.ok(odd.complete, 'and the stream ends normally');
  await allOk('after the malformed stream');

  // Rows: one per request that reached the core.
  await until('every row', async () => {
    await gateway.deps.recorder.flush();
    return (await store.listRequests(1000)).length === sent;
  });
  const oddRow = (await store.listRequests(1000)).find((r) => r.generation_id === 'gen-weird');
  t.same([oddRow?.outcome, oddRow?.output_tokens], ['ok', 2], 'the malformed stream\'s row: usage read past the bad lines');

  // No leak: upstream sockets all back in the pool, then gone with the router; timers and sockets at baseline.
  await until('no upstream socket in use', async () => gateway.upstreamSockets().active === 0);
  await sim.close();
  await until('the idle pool to empty once the router closed', async () => gateway.upstreamSockets().idle === 0);
  const pick = (r: Record<string, number>) => ({ TCPSocketWrap: r.TCPSocketWrap ?? 0, Timeout: r.Timeout ?? 0 });
  const settled = await until('sockets and timers back at baseline', async () => {
    const now = pick(resources());
    return now.TCPSocketWrap <= pick(baseline).TCPSocketWrap && now.Timeout <= pick(baseline).Timeout ? now : undefined;
  }, 10_000).catch(() => pick(resources()));
  t.same(settled, pick(baseline), `sockets and timers back at baseline (${JSON.stringify(pick(baseline))}) after ${sent} requests`);
});
