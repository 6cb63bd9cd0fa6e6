// Faults lose nothing: a real `sluice serve` process whose Redis or Postgres goes away behind a
// relay. Redis away: requests flow on in-process limits, the outage is logged once and shown in
// /health, and Redis is used again once back. Postgres away: known keys keep working, rows wait in
// memory and are all written once it returns; SIGTERM meanwhile spools them for the next start.

import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { hashKey } from '../../lib/keys.ts';
import { chat, startBackings, until, type GatewayProcess } from '../helpers/processes.ts';

const SMALL = `  small:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    rate_limits: { per_key_per_minute: 3, per_user_per_minute: 2 }
`;
const SMALL_ENV = { SLUICE_UPSTREAM_KEY_SMALL: 'sk-or-v1-smallsmallsmallsmallsmallsmallsmallsmallsmallsmallsmall03' };

const isMsg = (text: string) => (l: Record<string, any>) => l.msg === text;
const REDIS_DOWN = 'Redis unreachable: counting in process memory until it returns';
const REDIS_BACK = 'Redis is back: counters are shared again';

async function plainHealth(p: GatewayProcess): Promise<{ status: number; text: string }> {
  const res = await fetch(`${p.url}/health`);
  return { status: res.status, text: await res.text() };
}

/** Generation ids of the stored rows, sorted (one entry per row). */
async function storedGenerations(b: { store: { listRequests(limit?: number): Promise<Array<{ generation_id: string | null }>> } }): Promise<string[]> {
  return (await b.store.listRequests(10_000)).map((r) => r.generation_id ?? '').sort();
}

t.test('Redis unreachable: requests flow on in-process limits, logged once, and Redis returns', async (t) => {
  const b = await startBackings(t, { extraProfiles: SMALL });
  const A = await b.start({ env: SMALL_ENV });
  const key = await b.key('dev');
  t.equal((await chat(A.url, key)).status, 200);
  t.equal((await A.health()).counters.degraded, false, 'on Redis before the cut');

  const mark = A.lines.length;
  await b.redisRelay.cut();
  await A.waitForLine(isMsg(REDIS_DOWN), { from: mark });
  const during = [];
  for (let i = 0; i < 5; i++) during.push((await chat(A.url, key)).status);
  t.same(during, [200, 200, 200, 200, 200], 'requests keep flowing');

  // The in-process limits hold while Redis is away: a 3/min profile refuses the 4th.
  const small = await b.key('small');
  const smallAnswers = [];
  for (let i = 0; i < 4; i++) smallAnswers.push(await chat(A.url, small));
  t.same(smallAnswers.map((r) => r.status), [200, 200, 200, 429], 'the per-key limit is still enforced, in memory');
  t.equal(smallAnswers[3].headers.get('retry-after'), '5');

  const health = await A.health();
  t.equal(health.counters.degraded, true, '/api/health shows the counters degraded');
  t.equal(health.status, 'degraded');
  t.same(await plainHealth(A), { status: 200, text: 'ok' }, 'the plain /health still says ok');
  t.equal(A.lines.filter(isMsg(REDIS_DOWN)).length, 1, 'the outage is logged once, not per request');

  const back = A.lines.length;
  await b.redisRelay.restore();
  await A.waitForLine(isMsg(REDIS_BACK), { from: back, timeoutMs: 15_000 });
  t.equal((await A.health()).counters.degraded, false, 'back on Redis');
  const after = await b.key('dev');
  t.equal((await chat(A.url, after)).status, 200);
  const id = (await b.store.keyByHash(hashKey(after)))!.id;
  const keys = await b.redis.keys('sluice:rl:*');
  t.ok(keys.some((k) => k.endsWith(`:rl:key:${id}`)), 'a limit counted after the restore lives in Redis');
  t.equal(A.lines.filter(isMsg(REDIS_DOWN)).length, 1, 'still one outage line');
});

t.test('Postgres unreachable: known keys keep working, rows wait in memory and are all written once', async (t) => {
  const b = await startBackings(t);
  const A = await b.start();
  const key = await b.key('dev');
  const unseen = await b.key('dev'); // never used before the cut: not in A's key cache
  const made: string[] = [];
  const first = await chat(A.url, key);
  t.equal(first.status, 200);
  made.push(first.body.id);
  await until('the first row to be written', async () => (await A.health()).store.rows_written >= 1);

  await b.pgRelay.cut();
  const cutAt = Date.now();
  // The cache TTL is 1 s: keep asking (each request takes ≥ 200 ms at the sim) until well past it.
  let lastStart = 0;
  while (Date.now() - cutAt < 1500) {
    lastStart = Date.now() - cutAt;
    const r = await chat(A.url, key, { sim: 'delay-ms=200' });
    t.equal(r.status, 200, 'the known key still works');
    made.push(r.body.id);
  }
  t.ok(lastStart >= 1000, `a request came after the cache TTL (${lastStart} ms after the cut)`);

  const health = await A.health();
  t.equal(health.store.rows_pending, made.length - 1, 'every row made during the outage waits in memory');
  t.equal(health.status, 'degraded');
  t.same(await plainHealth(A), { status: 200, text: 'ok' });

  // A key the process has never seen cannot be checked: 503 store_unavailable, not a 500.
  const unknown = await chat(A.url, unseen);
  t.equal(unknown.status, 503, 'an uncached key answers 503 while the store is away');
  t.equal(unknown.body.error?.code, 'store_unavailable');

  await b.pgRelay.restore();
  await until('the held rows to be written', async () => (await A.health()).store.rows_pending === 0, 15_000);
  t.same(await storedGenerations(b), [...made].sort(), 'exactly one row per request: none lost, none twice');
  t.equal(A.lines.filter(isMsg('store unreachable; request rows are held until it returns')).length, 1, 'the outage is logged once');
  t.ok(A.lines.some(isMsg('store reachable again; writing held request rows')));
});

t.test('Postgres and Redis both away: a known key keeps working and its rows are kept', async (t) => {
  const b = await startBackings(t);
  const A = await b.start();
  const key = await b.key('dev');
  const made: string[] = [];
  const first = await chat(A.url, key);
  made.push(first.body.id);
  await until('the first row to be written', async () => (await A.health()).store.rows_written >= 1);

  const mark = A.lines.length;
  await Promise.all([b.pgRelay.cut(), b.redisRelay.cut()]);
  await A.waitForLine(isMsg(REDIS_DOWN), { from: mark });
  // In-memory counters start empty, so the budget cannot be seeded from the store: it must not
  // stop the request (the spend is reconciled from the rows once Postgres is back).
  for (let i = 0; i < 3; i++) {
    const r = await chat(A.url, key);
    t.equal(r.status, 200, 'requests keep flowing', { body: r.body });
    if (r.status === 200) made.push(r.body.id);
  }

  await Promise.all([b.pgRelay.restore(), b.redisRelay.restore()]);
  await until('the held rows to be written', async () => (await A.health()).store.rows_pending === 0, 15_000);
  t.same(await storedGenerations(b), [...made].sort(), 'exactly one row per request');
});

t.test('SIGTERM during a Postgres outage spools the rows; the next process writes them once', async (t) => {
  const b = await startBackings(t);
  const dataDir = mkdtempSync(join(tmpdir(), 'sluice-data-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const A = await b.start({ dataDir });
  const key = await b.key('dev');
  const made: string[] = [];
  const first = await chat(A.url, key);
  made.push(first.body.id);
  await until('the first row to be written', async () => (await A.health()).store.rows_written >= 1);

  await b.pgRelay.cut();
  for (let i = 0; i < 4; i++) {
    const r = await chat(A.url, key);
    t.equal(r.status, 200);
    made.push(r.body.id);
  }
  t.equal((await A.health()).store.rows_pending, 4);

  const exit = await A.stop('SIGTERM');
  t.same(exit, { code: 0, signal: null }, 'the process exits 0');
  const spool = join(dataDir, 'requests-spool.jsonl');
  const spoolFiles = readdirSync(dataDir).filter((f) => f.startsWith('requests-spool.jsonl'));
  t.ok(spoolFiles.length >= 1, `the unwritten rows are spooled (${spoolFiles.join(', ')})`);
  const spooled = spoolFiles.flatMap((f) => readFileSync(join(dataDir, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).generation_id));
  t.same(spooled.sort(), made.slice(1).sort(), 'the spool holds exactly the rows made during the outage');
  t.ok(A.lines.some((l) => l.msg === 'request rows spooled to disk'));
  t.equal(A.lines.find(isMsg('stopped; every row written or spooled for the next start'))?.rows_spooled, 4, 'the last line says what was spooled');

  await b.pgRelay.restore();
  const B = await b.start({ dataDir });
  await B.waitForLine(isMsg('spooled request rows written'));
  await until('the spool files to be gone', async () => readdirSync(dataDir).every((f) => !f.startsWith('requests-spool.jsonl')));
  t.notOk(existsSync(spool), 'the spool file is gone');
  t.same(await storedGenerations(b), [...made].sort(), 'every row stored exactly once');
});
