// Round trips to Redis on a request's path (issue 9): with RedisCounters, a proxied request that
// passes talks to Redis once (one script: the IP block, the key's and the end user's windows, and
// the budget spend read), and its spend goes to Redis after the answer, batched. Each
// write ioredis makes on its socket is one round trip; the test records them per request.

import t from 'tap';
import { openRedisCounters } from '../lib/counters.contract.ts';
import { startHarness } from '../helpers/gateway.ts';

t.test('one Redis round trip per proxied request; spend batched off the path', async (t) => {
  const counters = await openRedisCounters(t);
  const h = await startHarness(t, { counters });
  const key = await h.key('dev');
  const stream = (counters.client as unknown as { stream: { write: (...a: unknown[]) => boolean } }).stream;
  const writes: string[] = [];
  const write = stream.write.bind(stream);
  stream.write = (chunk: unknown, ...rest: unknown[]) => {
    writes.push(String(chunk));
    return write(chunk, ...rest);
  };
  t.teardown(() => void (stream.write = write));

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
  const perRequest: string[][] = [];
  for (let i = 0; i < 8; i++) {
    const from = writes.length;
    t.equal(await chat(`user-${i % 3}`), 200);
    perRequest.push(writes.slice(from));
  }
  // The check script names the request's windows (rl: keys) and reads the spend; a spend
  // increment (its own script, or a refresh of a spend read) names spend keys only, and no request waits for it.
  const spendOnly = (w: string) => w.includes(':spend:') && !w.includes(':rl:');
  for (const [i, ws] of perRequest.entries()) {
    const onPath = ws.filter((w) => !spendOnly(w));
    t.equal(onPath.length, 1, `request ${i + 1}: one round trip on its path`);
    t.match(onPath[0], /evalsha|\beval\b/i, 'the check script');
    t.match(onPath[0], /:rl:.*authfail.*:rl:.*rl:key:.*:rl:.*rl:user:.*:spend:day:.*:spend:month:/s, 'its windows and spend reads, in one write');
  }
  // Their spend reached Redis after the answers, in writes of their own (batching: tests/lib/spend-cache.test.ts).
  await h.gateway.deps.budget.flush();
  const incrWrites = writes.filter((w) => spendOnly(w) && /evalsha|\beval\b/i.test(w));
  t.ok(incrWrites.length >= 1, `spend increments in ${incrWrites.length} write(s)`);
});
