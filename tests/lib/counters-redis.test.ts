// Runs the Counters contract against RedisCounters on the machine's Redis (each run in its own
// random key namespace, deleted at teardown; an unreachable Redis fails the run), then what only
// a shared backing shows: two instances count jointly, the key prefix isolates, and while a TCP
// relay in front of Redis is cut the counters answer from memory promptly and say so (degraded),
// going back to Redis once it is restored; the window operations of one turn of the event loop
// leave in one script call (seen through ioredis's documented diagnostics channel). Never stops
// the shared Redis itself.

import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { Redis, type CommandTraceContext } from 'ioredis';
import t, { type Test } from 'tap';
import { RedisCounters } from '../../lib/counters/redis.ts';
import { createLogger } from '../../lib/log.ts';
import { countersContract, openRedisCounters, REDIS_URL, redisNamespace, unique, whenReady } from './counters.contract.ts';

countersContract(t, { kind: 'redis', open: (t) => openRedisCounters(t) });

t.test('two instances on one Redis count jointly', async (t) => {
  const ns = redisNamespace(t);
  const a = await openRedisCounters(t, { prefix: ns });
  const b = await openRedisCounters(t, { prefix: ns });
  const bucket = unique('joint');
  const seen = [];
  for (let i = 0; i < 6; i++) seen.push(await (i % 2 === 0 ? a : b).consume(bucket, 4, 60));
  t.same(seen.map((v) => v.allowed), [true, true, true, true, false, false], 'a limit of 4 holds across both');
  t.same(seen.slice(0, 4).map((v) => v.count), [1, 2, 3, 4]);
  t.match(await a.peek(bucket, 4, 60), { allowed: false }, 'a sees what b counted');

  const spend = unique('spend');
  t.equal(await a.incr(spend, 250, 600), 250);
  t.equal(await b.incr(spend, 100, 600), 350, 'b adds to the total a started');
  t.equal(await a.get(spend), 350);
  const seeded = unique('seeded');
  t.equal(await a.seed(seeded, 40, 600), 40);
  t.equal(await b.seed(seeded, 90, 600), 40, "b's seed finds a's value");
  const session = unique('session');
  await a.setText(session, 'reasoning', 600);
  t.equal(await b.getText(session), 'reasoning');
});

t.test('adds answer in the order they were sent, and the first gives the counter its lifetime', async (t) => {
  const prefix = `${redisNamespace(t)}order:`;
  const c = await openRedisCounters(t, { prefix });
  const key = unique('order');
  const answers: number[] = [];
  await Promise.all([1, 2, 4].map((n) => c.incr(key, n, 60).then((total) => answers.push(total))));
  t.same(answers, [1, 3, 7], 'the first add (which also sets the expiry) answers first');
  const ttl = await c.client.ttl(prefix + key);
  t.ok(ttl > 0 && ttl <= 60, `expires within its window (ttl ${ttl})`);
});

t.test('the window operations of one turn go to Redis in one script call; a later turn makes its own', async (t) => {
  const prefix = redisNamespace(t);
  const c = await openRedisCounters(t, { prefix });
  const calls: string[][] = [];
  const onCommand = (message: unknown) => {
    const { command, args } = message as CommandTraceContext;
    if (/^eval/i.test(command) && args.some((a) => a.startsWith(prefix))) calls.push(args);
  };
  subscribe('tracing:ioredis:command:start', onCommand);
  t.teardown(() => void unsubscribe('tracing:ioredis:command:start', onCommand));
  const a = unique('turn-a');
  const b = unique('turn-b');
  const spend = unique('turn-spend');
  const together = await Promise.all([
    c.check([{ bucket: a, limit: 5, windowS: 60 }, { bucket: b, limit: 5, windowS: 60 }], [spend]),
    c.consume(a, 5, 60),
    c.peek(b, 5, 60),
    c.check([{ bucket: b, limit: 5, windowS: 60 }]),
  ]);
  t.equal(calls.length, 1, 'four operations, one call');
  const keys = calls[0]!.filter((arg) => arg.startsWith(prefix)).map((k) => k.slice(prefix.length));
  t.same(keys, [`rl:5:60:0:${a}`, `rl:5:60:0:${b}`, `rl:5:60:0:${a}`, `rl:5:60:0:${b}`, `rl:5:60:0:${b}`, spend], "every operation's windows in order, then the reads");
  t.match(together, [{ verdicts: [{ count: 1 }, { count: 1 }] }, { count: 2 }, { count: 1 }, { verdicts: [{ count: 2 }] }]);
  await c.consume(a, 5, 60);
  await c.consume(a, 5, 60);
  t.equal(calls.length, 3, 'an operation awaited before the next is issued goes in a call of its own');
});

t.test('the prefix namespaces every key; the default is sluice:', async (t) => {
  const a = await openRedisCounters(t);
  const b = await openRedisCounters(t);
  const key = unique('isolated');
  await a.incr(key, 5, 60);
  t.equal(await b.get(key), undefined, 'another prefix does not see it');
  await a.consume(key, 1, 60);
  t.match(await b.consume(key, 1, 60), { allowed: true, count: 1 }, 'nor its windows');

  const raw = new Redis(REDIS_URL, { lazyConnect: true });
  t.teardown(() => raw.disconnect());
  await raw.connect();
  const plain = new RedisCounters({ url: REDIS_URL, log: createLogger('silent') });
  t.teardown(() => plain.close());
  await whenReady(plain.client, 3000, { failFast: true });
  const name = unique('sluice-contract-default-prefix');
  t.teardown(() => raw.del(`sluice:${name}`));
  await plain.incr(name, 9, 60);
  t.equal(await raw.get(`sluice:${name}`), '9', 'stored under sluice:');
});

/** A TCP relay in front of Redis that a test can cut and restore on the same port, or stall and resume. */
async function startRelay(t: Test) {
  const target = new URL(REDIS_URL);
  const sockets = new Set<Socket>();
  let stalled = false;
  const held: Array<() => void> = [];
  const server: Server = createServer((client) => {
    const upstream = connect(Number(target.port || 6379), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {}); // a cut is expected: 'close' below tears down the pair
      s.on('close', () => {
        sockets.delete(s);
        client.destroy();
        upstream.destroy();
      });
    }
    // While stalled, commands are held (not lost): Redis sees them late, as after a long pause.
    client.on('data', (d: Buffer) => (stalled ? held.push(() => upstream.write(d)) : upstream.write(d)));
    upstream.on('data', (d: Buffer) => client.write(d));
  });
  const listen = (port: number) =>
    new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
  await listen(0);
  const port = (server.address() as AddressInfo).port;
  const cut = () =>
    new Promise<void>((resolve) => {
      server.close(() => resolve());
      for (const s of sockets) s.destroy();
    });
  t.teardown(() => (server.listening ? cut() : undefined));
  return {
    url: `redis://127.0.0.1:${port}`,
    cut,
    restore: () => listen(port),
    stall: () => void (stalled = true),
    resume() {
      stalled = false;
      for (const write of held.splice(0)) write();
    },
  };
}

/** Resolves with the operation's value, or fails the test when it takes longer than `ms`. */
async function within<T>(ms: number, what: string, op: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([op, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} took more than ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

t.test('while Redis is cut: answers from memory, promptly, degraded; then back to Redis', async (t) => {
  const relay = await startRelay(t);
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const ns = redisNamespace(t);
  const c = await openRedisCounters(t, { url: relay.url, prefix: ns, log: createLogger('info', sink) });
  const direct = await openRedisCounters(t, { prefix: ns });
  const spend = unique('spend');
  const bucket = unique('bucket');
  const tight = unique('tight');

  t.equal(c.degraded, false);
  t.equal(await c.incr(spend, 100, 600), 100);
  t.match(await c.consume(bucket, 3, 60), { allowed: true, count: 1 });
  t.equal(await direct.get(spend), 100, 'through the relay, into Redis');

  const closed = new Promise((resolve) => c.client.once('close', resolve));
  await relay.cut();
  await closed;
  t.equal(c.degraded, true, 'degraded once the connection is gone');

  const bound = 1500;
  t.equal(await within(bound, 'incr', c.incr(spend, 5, 600)), 5, 'incr answers from memory (a fresh count)');
  t.equal(await within(bound, 'get', c.get(spend)), 5, 'get answers from memory');
  t.equal(await within(bound, 'get', c.get(unique('missing'))), undefined);
  t.match(await within(bound, 'consume', c.consume(bucket, 3, 60)), { allowed: true, count: 1 }, 'consume counts in memory');
  t.match(await within(bound, 'consume', c.consume(tight, 1, 60)), { allowed: true });
  t.match(await within(bound, 'consume', c.consume(tight, 1, 60)), { allowed: false }, 'limits still hold in memory');
  t.match(await within(bound, 'peek', c.peek(tight, 1, 60)), { allowed: false });
  // The IP block's two halves meet in memory too: failures counted by consume (with a block) are
  // what the request step's check peeks at.
  const blocked = unique('blocked');
  for (let i = 0; i < 3; i++) await within(bound, 'consume', c.consume(blocked, 2, 600, { blockS: 600 }));
  const seen = await within(bound, 'check', Promise.resolve(c.check([{ bucket: blocked, limit: 2, windowS: 600, blockS: 600, peek: true }])));
  t.match(seen.verdicts[0], { allowed: false, count: 3 }, "check's peek sees the block consume counted while Redis was away");
  t.equal(await within(bound, 'seed', c.seed(unique('seed'), 3, 600)), 3);
  await within(bound, 'setText', c.setText('text', 'fast', 600));
  t.equal(await within(bound, 'getText', c.getText('text')), 'fast');
  t.equal(c.degraded, true);
  t.equal(await direct.get(spend), 100, 'Redis itself was not touched');
  t.equal(lines.filter((l) => JSON.parse(l).msg.startsWith('Redis unreachable')).length, 1, 'the loss is logged once');

  const ready = whenReady(c.client, 5000);
  await relay.restore();
  await ready;
  t.equal(c.degraded, false, 'not degraded once Redis is back');
  t.equal(await c.get(spend), 100, 'get reads Redis again');
  t.equal(await c.incr(spend, 1, 600), 101, 'incr goes to Redis again');
  t.equal(await direct.get(spend), 101);
  t.match(await c.consume(bucket, 3, 60), { allowed: true, count: 2 }, "consume continues Redis's window");
  t.equal(await c.getText('text'), undefined, 'what was written to memory stays there');
  t.ok(lines.some((l) => JSON.parse(l).msg.startsWith('Redis is back')), 'the return is logged');
});

t.test('a command that times out marks degraded only until Redis answers again', async (t) => {
  const relay = await startRelay(t);
  const ns = redisNamespace(t);
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const c = await openRedisCounters(t, { url: relay.url, prefix: ns, log: createLogger('info', sink), commandTimeoutMs: 200 });
  const direct = await openRedisCounters(t, { prefix: ns });
  const spend = unique('spend');
  t.equal(await c.incr(spend, 100, 600), 100);

  relay.stall();
  t.equal(await within(1500, 'incr', c.incr(spend, 5, 600)), 5, 'a stalled Redis: memory answers after the command timeout');
  t.match(await within(1500, 'consume', c.consume(unique('bucket'), 3, 60)), { allowed: true, count: 1 });
  const tight = unique('tight');
  const checked = await within(1500, 'check', Promise.resolve(c.check([{ bucket: tight, limit: 0, windowS: 60 }], [spend])));
  t.match(checked.verdicts[0], { allowed: false, count: 1 }, "check's script timed out: memory's window answers");
  t.ok(c.refused(tight, 0, 60), 'the refusal it answered is remembered');
  t.equal(c.degraded, true, 'degraded while Redis does not answer');
  t.equal(c.client.status, 'ready', 'the connection itself never dropped');

  relay.resume();
  const total = await c.get(spend);
  t.equal(total, await direct.get(spend), 'the next command reads Redis');
  t.equal(c.degraded, false, 'and degraded clears with it, without a reconnect');
  t.equal(await c.incr(spend, 1, 600), total! + 1);
  t.equal(lines.filter((l) => JSON.parse(l).msg.startsWith('Redis unreachable')).length, 1, 'the loss is logged once');
  t.equal(lines.filter((l) => JSON.parse(l).msg.startsWith('Redis is back')).length, 1, 'and the return once');
});

t.test('closing the counters at shutdown is not logged as an outage', async (t) => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  });
  const c = new RedisCounters({ url: REDIS_URL, prefix: redisNamespace(t), log: createLogger('info', sink) });
  await whenReady(c.client, 5000);
  t.equal(await c.incr(unique('spend'), 1, 60), 1);
  const closed = new Promise((resolve) => c.client.once('end', resolve));
  await c.close();
  await closed;
  t.same(lines.filter((l) => JSON.parse(l).level >= 50), [], 'no error-level line');
});
