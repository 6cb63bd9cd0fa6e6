// Scale-out (docs/operation.md): two real `sluice serve` processes on one Postgres and one Redis act as
// one gateway. The key and (key, end user) rate limits, the IP block, the budget state and key
// revocation hold jointly across them, and both write their rows into the one database.
// Postgres without Redis starts a single instance and says so.

import { randomUUID } from 'node:crypto';
import t from 'tap';
import { chat, startBackings, until, type GatewayProcess } from '../helpers/processes.ts';

const b = await startBackings(t);
const [A, B] = await Promise.all([b.start(), b.start()]);

/** A fresh documentation-range address per use, so IP blocks never leak between subtests. */
let ipSeq = 0;
const freshIp = () => `203.0.113.${++ipSeq}`;

async function models(p: GatewayProcess, key: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${p.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
  return { status: res.status, body: await res.json() };
}

t.test('both processes run on the shared Postgres and Redis', async (t) => {
  for (const p of [A, B]) {
    const listening = p.lines.find((l) => l.msg === 'sluice ready')!;
    t.equal(listening.store, 'postgres');
    t.equal(listening.counters, 'redis');
    t.notOk(p.lines.some((l) => typeof l.msg === 'string' && l.msg.startsWith('Postgres without Redis')), 'no single-instance warning');
  }
  t.not(A.url, B.url);
});

t.test('the 60/min key limit is counted across both processes', async (t) => {
  const key = await b.key('dev');
  const first = await Promise.all([
    ...Array.from({ length: 30 }, () => chat(A.url, key)),
    ...Array.from({ length: 30 }, () => chat(B.url, key)),
  ]);
  t.same(first.map((r) => r.status), Array(60).fill(200), '30 through A and 30 through B all pass');
  for (const p of [A, B]) {
    const over = await chat(p.url, key);
    t.equal(over.status, 429, 'the 61st is refused, whichever process gets it');
    t.equal(over.headers.get('retry-after'), '5');
    t.equal(over.body.error.code, 'rate_limit_exceeded');
  }
});

t.test('the 10/min (key, end user) limit is counted across both processes', async (t) => {
  const key = await b.key('dev');
  const first = await Promise.all([
    ...Array.from({ length: 5 }, () => chat(A.url, key, { user: 'alice' })),
    ...Array.from({ length: 5 }, () => chat(B.url, key, { user: 'alice' })),
  ]);
  t.same(first.map((r) => r.status), Array(10).fill(200));
  for (const p of [A, B]) {
    const over = await chat(p.url, key, { user: 'alice' });
    t.equal(over.status, 429, 'the 11th for alice is refused on either process');
    t.equal(over.headers.get('retry-after'), '5');
    t.equal(over.body.error.code, 'rate_limit_exceeded');
  }
  t.equal((await chat(B.url, key, { user: 'bob' })).status, 200, 'another end user of the same key still passes');
});

t.test('20 auth failures split across both processes block the address on both', async (t) => {
  const key = await b.key('dev');
  const ip = freshIp();
  const bad = (p: GatewayProcess) => chat(p.url, 'sluice_dev_notarealkeynotarealkeynotarealkey', { ip });
  const failures = [];
  for (let i = 0; i < 10; i++) failures.push(await bad(A));
  for (let i = 0; i < 10; i++) failures.push(await bad(B));
  t.same(failures.map((r) => r.status), Array(20).fill(401), 'each of the 20 failures is answered 401 (not blocked yet)');
  for (const p of [A, B]) {
    const blocked = await chat(p.url, key, { ip });
    t.equal(blocked.status, 429, 'a valid key from that address is refused');
    t.equal(blocked.headers.get('retry-after'), '600');
    t.equal(blocked.body.error.code, 'ip_blocked');
  }
  t.equal((await chat(A.url, key, { ip: freshIp() })).status, 200, 'another address is not blocked');
});

t.test('the budget state is shared: spend through A degrades and then blocks B', async (t) => {
  const key = await b.key('tiny');
  // tiny's daily budget is $0.001; the sim charges $0.0000025 per completion token on the fast
  // model, so 300 reasoning tokens spend about 75 % in one request.
  const spend = await chat(A.url, key, { sim: 'reasoning=300' });
  t.equal(spend.status, 200);
  t.equal(spend.headers.get('x-sluice-degradation'), 'none');
  // B polls with the cheapest request (the fast tier, a one-token reply): each poll spends too,
  // and polls at the agent tier's prices could carry B past the next threshold on their own.
  await until('B to see the spend through A', async () => {
    const r = await chat(B.url, key, { reply: 'k' });
    return r.headers.get('x-sluice-degradation') === 'none' ? undefined : r;
  }, 5000);
  const degraded = await chat(B.url, key, { model: 'sluice/agent', reply: 'k' });
  t.equal(degraded.status, 200);
  t.equal(degraded.headers.get('x-sluice-degradation'), 'fast-only', 'B degrades on spend it never saw itself');
  t.equal(degraded.headers.get('x-sluice-tier'), 'fast', 'the agent tier asked for becomes the fast tier');

  t.equal((await chat(A.url, key, { sim: 'reasoning=150' })).status, 200);
  const blocked = await until('B to block on the spend through A', async () => {
    const r = await chat(B.url, key, { reply: 'k' });
    return r.status === 429 ? r : undefined;
  }, 5000);
  t.equal(blocked.body.error.code, 'budget_exhausted');
  t.equal(blocked.headers.get('x-should-retry'), 'false');
  t.ok(Number(blocked.headers.get('retry-after')) >= 3600, 'retry-after at least an hour');
  const onA = await chat(A.url, key, { reply: 'k' });
  t.equal(onA.status, 429, 'A is blocked too');
  t.equal(onA.body.error.code, 'budget_exhausted');
});

t.test('a key revoked with the CLI is refused by both processes within the cache TTL', async (t) => {
  const name = `revokee-${randomUUID().slice(0, 8)}`;
  const key = await b.key('dev', name);
  t.equal((await models(A, key)).status, 200);
  t.equal((await models(B, key)).status, 200);
  const revoked = await b.cli(['keys', 'revoke', '--profile', 'dev', '--name', name]);
  t.equal(revoked.code, 0, '`sluice keys revoke` succeeds', { stderr: revoked.stderr });
  const at = Date.now();
  for (const p of [A, B]) {
    const refused = await until(`pid ${p.pid} to refuse the revoked key`, async () => {
      const r = await models(p, key);
      return r.status === 401 ? r : undefined;
    });
    t.equal(refused.body.error.code, 'invalid_api_key');
  }
  // TTL 1 s in these processes (SLUICE_KEY_CACHE_TTL_S=1), counted from the CLI's exit (the
  // revocation committed before it); generous slack for a loaded machine.
  t.ok(Date.now() - at < 4000, `both refused within the TTL (took ${Date.now() - at} ms after the CLI exited)`);
});

t.test('rows from both processes land in the one database, each once', async (t) => {
  const key = await b.key('dev');
  const run = `scale-${randomUUID()}`;
  const answers = await Promise.all([
    ...Array.from({ length: 7 }, () => chat(A.url, key, { run })),
    ...Array.from({ length: 5 }, () => chat(B.url, key, { run })),
  ]);
  t.same(answers.map((r) => r.status), Array(12).fill(200));
  const rows = await until('12 rows of the run in Postgres', async () => {
    const rows = (await b.store.listRequests(10_000)).filter((r) => r.run === run);
    return rows.length >= 12 ? rows : undefined;
  });
  t.equal(rows.length, 12, 'one row per request');
  t.same(rows.map((r) => r.generation_id).sort(), answers.map((a) => a.body.id).sort(), 'every answer has its row, none twice');
});

t.test('Postgres without Redis: one process starts and warns that it must run alone', async (t) => {
  const C = await b.start({ redis: false });
  const listening = C.lines.find((l) => l.msg === 'sluice ready')!;
  t.equal(listening.store, 'postgres');
  t.equal(listening.counters, 'memory');
  const warning = await C.waitForLine((l) => typeof l.msg === 'string' && l.msg.startsWith('Postgres without Redis'));
  t.equal(warning.level, 40, 'logged as a warning');
  t.match(warning.msg, /single instance/);
  const health = await C.health();
  t.equal(health.counters.kind, 'memory');
  t.equal((await chat(C.url, await b.key('dev'))).status, 200);
});
