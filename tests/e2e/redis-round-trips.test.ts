// Round trips to Redis on a request's path: with RedisCounters, a proxied request that passes talks
// to Redis once (one script call: the IP block, the key's and the end user's windows, and the
// budget spend read: the profile's, and a capped key's and a capped session's too), and its spend
// goes to Redis after the answer, batched. Seen from outside the
// client: the commands through ioredis's documented diagnostics channel, the writes as the chunks
// a TCP relay in front of Redis receives (one per write on loopback, where ioredis disables Nagle).

import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import type { CommandTraceContext } from 'ioredis';
import t, { type Test } from 'tap';
import { insertKey, prepareKey } from '../../cli/keys.ts';
import { openRedisCounters, REDIS_URL } from '../lib/counters.contract.ts';
import { startHarness } from '../helpers/gateway.ts';

/** A relay to Redis that keeps every chunk its clients send, in order. */
async function recordingRelay(t: Test): Promise<{ url: string; chunks: string[] }> {
  const target = new URL(REDIS_URL);
  const chunks: string[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.on('data', (d: Buffer) => {
      chunks.push(d.toString());
      upstream.write(d);
    });
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    server.close();
  });
  return { url: `redis://127.0.0.1:${(server.address() as AddressInfo).port}`, chunks };
}

t.test('one Redis round trip per proxied request; spend batched off the path', async (t) => {
  const relay = await recordingRelay(t);
  const counters = await openRedisCounters(t, { url: relay.url });
  const h = await startHarness(t, { counters });
  const key = await h.key('dev');
  const scripts: string[] = [];
  const onCommand = (message: unknown) => {
    const { command, args } = message as CommandTraceContext;
    if (/^eval/i.test(command)) scripts.push(args.join(' '));
  };
  subscribe('tracing:ioredis:command:start', onCommand);
  t.teardown(() => void unsubscribe('tracing:ioredis:command:start', onCommand));

  const chat = async (user: string) => {
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sluice/fast', user, messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.arrayBuffer();
    return res.status;
  };
  // The first request of a profile reads (and seeds) its spend windows: one extra round trip, once.
  t.equal(await chat('warm'), 200);
  // The check script names the request's windows (rl: keys) and reads the spend; a spend
  // increment (its own script, or a refresh of a spend read) names spend keys only, and no request waits for it.
  const spendOnly = (w: string) => w.includes(':spend:') && !w.includes(':rl:');
  const path = /:rl:.*authfail.*:rl:.*rl:key:.*:rl:.*rl:user:.*:spend:day:.*:spend:month:/s;
  for (let i = 0; i < 8; i++) {
    const [fromChunk, fromScript] = [relay.chunks.length, scripts.length];
    t.equal(await chat(`user-${i % 3}`), 200);
    const writes = relay.chunks.slice(fromChunk).filter((w) => !spendOnly(w));
    const calls = scripts.slice(fromScript).filter((w) => !spendOnly(w));
    t.equal(writes.length, 1, `request ${i + 1}: one write on its path`);
    t.match(writes[0], /evalsha|\beval\b/i, 'the window script');
    t.match(writes[0], path, 'its windows and spend reads, in that one write');
    t.equal(calls.length, 1, `request ${i + 1}: one command on its path`);
    t.match(calls[0], path);
  }
  // Their spend reached Redis after the answers, in writes of their own (batching: tests/lib/spend-cache.test.ts).
  await h.gateway.deps.budget.flush();
  const incrWrites = relay.chunks.filter((w) => spendOnly(w) && /evalsha|\beval\b/i.test(w));
  t.ok(incrWrites.length >= 1, `spend increments in ${incrWrites.length} write(s)`);
});

t.test('a capped key in a session: its spend and the session\'s are read in the same one round trip', async (t) => {
  const relay = await recordingRelay(t);
  const counters = await openRedisCounters(t, { url: relay.url });
  const h = await startHarness(t, {
    counters,
    extraProfiles: '  capped:\n    default_tier: fast\n    router: sim\n    budget: { daily_usd: 5, monthly_usd: 60 }\n    session_daily_usd: 1\n',
    env: { SLUICE_UPSTREAM_KEY_CAPPED: 'sk-or-v1-capped' },
  });
  const key = await insertKey(h.store, prepareKey(h.config, { profile: 'capped', name: 'runaway', dailyUsd: '1', monthlyUsd: '10' }));
  const chat = async () => {
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sluice-session': 'loop' },
      body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }),
    });
    await res.arrayBuffer();
    return res.status;
  };
  // The first request reads (and seeds) the profile's and the key's windows: extra round trips, once.
  t.equal(await chat(), 200);
  const spendOnly = (w: string) => w.includes(':spend:') && !w.includes(':rl:');
  const path = /:rl:.*rl:key:.*:spend:day:capped:.*:spend:month:capped:.*:spend:key:day:.*:spend:key:month:.*:spend:session:day:capped:[0-9a-f]{24}:/s;
  for (let i = 0; i < 5; i++) {
    const from = relay.chunks.length;
    t.equal(await chat(), 200);
    const writes = relay.chunks.slice(from).filter((w) => !spendOnly(w));
    t.equal(writes.length, 1, `request ${i + 1}: one write on its path`);
    t.match(writes[0], path, 'the windows, the profile\'s, the key\'s and the session\'s spend, in that one write');
  }
});

t.test('requests arriving together share a write', async (t) => {
  const relay = await recordingRelay(t);
  const counters = await openRedisCounters(t, { url: relay.url });
  const h = await startHarness(t, { counters });
  const key = await h.key('dev');
  const body = JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] });
  const chat = () => fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body })
    .then(async (res) => (await res.arrayBuffer(), res.status));
  t.equal(await chat(), 200); // the profile's spend windows seeded

  // Each request's windows are named once per request in the writes; a write naming more than one
  // request's is a turn's call shared between them. Arrival in one turn is up to the kernel, so the
  // test asks only that it happens within a few bursts, not in each.
  let shared = 0;
  for (let burst = 0; burst < 10 && shared === 0; burst++) {
    const from = relay.chunks.length;
    t.same(await Promise.all(Array.from({ length: 16 }, chat)), Array(16).fill(200));
    const onPath = relay.chunks.slice(from).filter((w) => w.includes(':rl:'));
    const named = onPath.map((w) => w.split(':rl:key:').length - 1);
    t.equal(named.reduce((a, b) => a + b, 0), 16, 'every request checked once');
    shared = Math.max(...named) > 1 ? onPath.length : 0;
    if (shared) t.ok(onPath.length < 16, `16 requests checked in ${onPath.length} writes`);
  }
  t.ok(shared > 0, 'requests of one turn went in one write');
});
