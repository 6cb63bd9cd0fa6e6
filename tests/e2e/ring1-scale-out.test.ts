// Cost reconciliation across two real `sluice serve` processes on one Postgres and one Redis: a
// client leaves a stream on A, the router holds the generation's record back for a few seconds,
// both processes look it up, and the row ends with the router's cost while the shared budget
// counter in Redis moves by the difference exactly once. Also: /api/health on both.

import t from 'tap';
import { micro, windows } from '../../lib/budget.ts';
import { startBackings, until } from '../helpers/processes.ts';

const b = await startBackings(t);
const sim = b.sim as any;
const env = { SLUICE_RECONCILE_POLL_S: '0.3', SLUICE_USAGE_REFRESH_S: '0' };
const [A, B] = await Promise.all([b.start({ env }), b.start({ env })]);

t.test('a disconnected stream is reconciled once across both processes', async (t) => {
  // The router holds every record back until the test lets it go (after a 404 was seen), so the
  // lookups' order is fixed whatever the machine's load: at least one 404, then the record.
  sim.setGenerationDelay(1e9);
  const lookupAt: number[] = [];
  b.sim.events.on('request', (r) => r.path.startsWith('/api/v1/generation') && lookupAt.push(Date.now()));
  const key = await b.key('dev');
  // Seed the shared day counter through a request on B (the budget check reads and seeds it).
  const warm = await fetch(`${B.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }) });
  t.equal(warm.status, 200);
  await warm.arrayBuffer();
  const counterKey = `sluice:spend:day:dev:${windows(Date.now()).day}`;
  await until('the warm-up spend in Redis', async () => Number(await b.redis.get(counterKey)) > 0);

  const ac = new AbortController();
  const res = await fetch(`${A.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'chunks=40;chunk-delay-ms=25' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'count slowly' }] }),
  });
  const reader = res.body!.getReader();
  let text = '';
  while (text.split('data:').length < 5) text += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  await reader.read().catch(() => {});

  const row = await until('the estimated row in Postgres', async () =>
    (await b.store.listRequests(100)).find((r) => r.outcome === 'client_disconnect' && r.generation_id !== null));
  t.equal(row.cost_source, 'estimate');
  const lookupsOf = () => b.sim.received.filter((r) => r.path === `/api/v1/generation?id=${encodeURIComponent(row.generation_id!)}`);
  await until('the generation record at the router', async () => sim.generation(row.generation_id));
  await until('a lookup answered 404', async () => lookupsOf().length >= 1, 30_000);
  t.ok(lookupAt[0] - Date.parse(row.ts) >= 3000, `the first lookup waited 3 s after the end (${lookupAt[0] - Date.parse(row.ts)} ms)`);
  t.equal((await b.store.listRequests(100)).find((r) => r.id === row.id)!.cost_source, 'estimate', 'a 404 changes nothing');
  sim.setGenerationDelay(0);
  const reconciled = await until('the row to carry the router\'s cost', async () =>
    (await b.store.listRequests(100)).find((r) => r.id === row.id && r.cost_source === 'upstream'), 60_000);
  // Both processes' clocks are the real one here: the row's own timestamps say when.
  const endToReconciled = Date.now() - Date.parse(row.ts);
  t.ok(endToReconciled < 60_000, `reconciled within a minute of the end (${endToReconciled} ms)`);
  const record = sim.generation(row.generation_id!)!;
  t.ok(record.total_cost > 0);
  t.equal(reconciled.cost_usd, record.total_cost);
  t.ok(lookupsOf().length >= 2, `404s while the router held it back, then the record (${lookupsOf().length} lookups)`);

  // Both processes keep polling; the counter must equal what the rows add up to, each counted in
  // whole micro-USD as the gateway counts it: the difference added once.
  const counted = async () => {
    const dayStart = windows(Date.now()).dayStart;
    return (await b.store.listRequests(1000)).filter((r) => r.profile === 'dev' && Date.parse(r.ts) >= dayStart)
      .reduce((sum, r) => sum + micro(r.cost_usd), 0);
  };
  await until('both processes to have seen the reconciled row', async () => {
    const [ha, hb] = await Promise.all([A.health(), B.health()]);
    return (ha as any).reconcile.reconciled === 1 && (hb as any).reconcile.reconciled === 1;
  }, 90_000); // the process that did not change the row re-reads its counts every 30 s
  const expected = await counted();
  t.ok(expected > 0);
  // The correcting process sends its increment at the end of its event-loop turn: wait for it, then hold.
  await until('the correction in Redis', async () => Number(await b.redis.get(counterKey)) === expected, 10_000)
    .catch(() => undefined);
  t.equal(Number(await b.redis.get(counterKey)), expected, 'Redis day counter = Σ micro(row cost): corrected exactly once');
  const passes = await Promise.all([A, B].map(async (p) => ((await p.health()) as any).reconcile));
  t.strictSame(passes, [{ pending: 0, reconciled: 1, abandoned: 0 }, { pending: 0, reconciled: 1, abandoned: 0 }]);
  t.equal(Number(await b.redis.get(counterKey)), expected, 'and still so');
  const corrected = A.lines.concat(B.lines).filter((l) => l.msg === 'cost reconciled with the router');
  t.ok(corrected.length <= 1, 'at most one process logs the correction (debug lines may be off)');
  const ha = (await A.health()) as any;
  t.match(ha.usage, { refresh_s: 0, last_snapshot_at: { dev: null } });
});
