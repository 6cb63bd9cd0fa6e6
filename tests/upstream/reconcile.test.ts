// The reconciler against a scripted router, on both stores, with the clock in the test's hand:
// lookups wait 3 s after the row's end, back off on 404, replace the estimate with the router's
// cost and correct the budget counter once; refusals count toward giving up, outages do not.

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { Budget, micro, windows } from '../../lib/budget.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { ManagementClient, ManagementError } from '../../lib/upstream/management.ts';
import { Reconciler, retryDelayMs } from '../../lib/upstream/reconcile.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

t.test('retry delays double from 2 s, at most 10 s for two minutes, then at most 60 s', async (t) => {
  t.strictSame([1, 2, 3, 4, 5].map((n) => retryDelayMs(n, 10_000)), [2000, 4000, 8000, 10_000, 10_000]);
  t.strictSame([5, 6, 7, 40].map((n) => retryDelayMs(n, 200_000)), [32_000, 60_000, 60_000, 60_000]);
});

async function setup(t: Test, kind: 'sqlite' | 'postgres') {
  const answers = new Map<string, { status: number; body?: unknown }>();
  const seen: Array<{ id: string; auth: string }> = [];
  const server = createServer((req, res) => {
    const id = new URL(req.url!, 'http://x').searchParams.get('id')!;
    seen.push({ id, auth: req.headers.authorization ?? '' });
    const a = answers.get(id) ?? { status: 404 };
    res.writeHead(a.status, { 'content-type': 'application/json' }).end(JSON.stringify(a.body ?? { error: { code: a.status, message: 'nope' } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => server.close());
  const dir = t.testdir({ 'profiles.yaml': profilesYaml(`http://127.0.0.1:${(server.address() as AddressInfo).port}`), 'tiers.yaml': TIERS_YAML });
  const config = loadConfig(dir);
  const store = await openStore(kind === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir: dir } : { dataDir: dir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const clock = { now: Date.UTC(2025, 2, 1, 12) };
  const now = () => clock.now;
  const budget = new Budget({ counters, store, now });
  const lines: Array<Record<string, any>> = [];
  const log = createLogger('debug', new Writable({ write(c, _e, cb) { for (const l of String(c).split('\n').filter(Boolean)) lines.push(JSON.parse(l)); cb(); } }));
  const upstreamKeys = new Map([['dev', 'sk-or-v1-dev-key'], ['assistant', 'sk-or-v1-asst-key']]);
  const reconciler = new Reconciler({ config, store, client: new ManagementClient({ timeoutMs: 1000 }), budget, upstreamKeys, log, now });
  const row = (over: Partial<RequestRow>): RequestRow => ({
    id: `r-${Math.random()}`, ts: new Date(clock.now).toISOString(), endpoint: 'chat', profile: 'dev', key_prefix: 'sk-sl-x', end_user: null, session: null,
    run: null, tier: null, requested_model: null, model: null, stream: true, status: 200, outcome: 'client_disconnect', input_tokens: 1, output_tokens: 1,
    cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.01, cost_source: 'estimate', provider: null,
    degradation: 'none', generation_id: 'gen-a', ttfb_ms: null, duration_ms: 100, overhead_ms: null, tools: [], ...over,
  });
  // The budget sends its increments at the end of the event-loop turn: flush them before reading the backing.
  const dayCounter = async () => {
    await budget.flush();
    return counters.get(`spend:day:dev:${windows(clock.now).day}`);
  };
  return { answers, seen, store, clock, budget, reconciler, row, lines, config, dayCounter, counters, now };
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: 404 then the record: the estimate is replaced and the budget corrected once`, async (t) => {
    const s = await setup(t, kind);
    const a = s.row({ generation_id: 'gen-a', cost_usd: 0.01 });
    const b = s.row({ generation_id: 'gen-b', cost_usd: 0.05, profile: 'assistant' });
    await s.store.insertRequests([a, b, s.row({ generation_id: 'gen-gone', profile: 'nokey' })]);
    await s.budget.state(s.config.profiles.get('dev')!); // seeds the day counter from the store
    t.equal(await s.dayCounter(), micro(0.01));

    t.strictSame(await s.reconciler.pass(), { reconciled: 0, deferred: 0, abandoned: 0 }, 'not before 3 s after the end');
    t.equal(s.seen.length, 0);
    s.clock.now += 3000;
    t.strictSame(await s.reconciler.pass(), { reconciled: 0, deferred: 3, abandoned: 0 }, '404s, and a profile with no key');
    t.strictSame(s.seen.map((x) => x.auth).sort(), ['Bearer sk-or-v1-asst-key', 'Bearer sk-or-v1-dev-key'], "each with its profile's key");
    t.ok(s.lines.some((l) => l.msg === 'cost reconciliation: the profile has no upstream key here; its estimated rows keep their estimate' && l.profile === 'nokey'));
    s.clock.now += 1000;
    t.strictSame(await s.reconciler.pass(), { reconciled: 0, deferred: 0, abandoned: 0 }, 'waits out the backoff');
    s.answers.set('gen-a', { status: 200, body: { data: { id: 'gen-a', total_cost: 0.025 } } });
    s.answers.set('gen-b', { status: 200, body: { data: { id: 'gen-b', total_cost: 0.02 } } });
    s.clock.now += 1000;
    t.strictSame(await s.reconciler.pass(), { reconciled: 2, deferred: 1, abandoned: 0 });
    const rows = await s.store.listRequests();
    t.match(rows.find((r) => r.id === a.id), { cost_usd: 0.025, cost_source: 'upstream' });
    t.match(rows.find((r) => r.id === b.id), { cost_usd: 0.02, cost_source: 'upstream' }, 'a lower figure too');
    t.equal(await s.dayCounter(), micro(0.025), 'dev spend rose by the difference');
    t.equal((await s.budget.state(s.config.profiles.get('dev')!)).day_usd, 0.025);
    t.strictSame(await s.store.reconcileCounts(), { pending: 1, reconciled: 2, abandoned: 0 });

    // The router refuses (401): counted as failed lookups, logged once, abandoned at the give-up time.
    s.answers.set('gen-c', { status: 401 });
    const c = s.row({ generation_id: 'gen-c' });
    await s.store.insertRequests([c]);
    for (let i = 0; i < 40 && (await s.store.reconcileCounts()).pending > 0; i++) {
      s.clock.now += 60_000;
      await s.reconciler.pass();
    }
    t.strictSame(await s.store.reconcileCounts(), { pending: 0, reconciled: 2, abandoned: 2 });
    t.equal(s.lines.filter((l) => l.msg === 'cost reconciliation: the router refuses generation lookups for this profile').length, 1);
    t.equal(await s.dayCounter(), micro(0.025), 'nothing corrected for them');
  });
}

t.test('an outage: the pass throws, attempts are not counted; rows from earlier days are not corrected', async (t) => {
  const s = await setup(t, 'sqlite');
  const a = s.row({ generation_id: 'gen-a' });
  await s.store.insertRequests([a]);
  s.answers.set('gen-a', { status: 503 });
  s.clock.now += 3000;
  const err = await s.reconciler.pass().catch((e) => e);
  t.type(err, ManagementError);
  t.equal(err.outage, true);
  const [due] = await s.store.duePendingReconciles(new Date(s.clock.now).toISOString(), 10);
  t.equal(due.reconcile_attempts, 0, 'not counted');
  // The router is back after midnight UTC: the row is reconciled; yesterday's windows are not touched.
  await s.budget.state(s.config.profiles.get('dev')!);
  s.clock.now += 13 * 3_600_000;
  await s.budget.state(s.config.profiles.get('dev')!);
  s.answers.set('gen-a', { status: 200, body: { data: { total_cost: 0.5 } } });
  t.strictSame(await s.reconciler.pass(), { reconciled: 1, deferred: 0, abandoned: 0 });
  t.equal(await s.dayCounter(), 0, "today's counter is untouched by yesterday's row");
  t.strictSame(await s.store.reconcileCounts(), { pending: 0, reconciled: 1, abandoned: 0 });
  // Old rows (a 0.3.0 store) are abandoned without a lookup.
  await s.store.insertRequests([s.row({ generation_id: 'gen-old', ts: new Date(s.clock.now - 2 * 86_400_000).toISOString() })]);
  const before = s.seen.length;
  t.strictSame(await s.reconciler.pass(), { reconciled: 0, deferred: 0, abandoned: 1 });
  t.equal(s.seen.length, before, 'no lookup');
});

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a counter missing, or seeded by another process meanwhile, never gets the difference twice`, async (t) => {
    for (const seededMeanwhile of [false, true]) {
      const s = await setup(t, kind);
      const dev = s.config.profiles.get('dev')!;
      await s.store.insertRequests([s.row({ generation_id: 'gen-a', cost_usd: 0.01 })]);
      s.answers.set('gen-a', { status: 200, body: { data: { total_cost: 0.0300004 } } });
      if (seededMeanwhile) {
        // Another process seeds the missing counter between this one's look and its update of the row.
        const other = new Budget({ counters: s.counters, store: s.store, now: s.now });
        const apply = s.store.applyReconciledCost.bind(s.store);
        s.store.applyReconciledCost = async (...args) => {
          const old = await apply(...args);
          await other.state(dev); // seeds from the store, which holds the new cost already
          return old;
        };
      }
      s.clock.now += 3000;
      t.strictSame(await s.reconciler.pass(), { reconciled: 1, deferred: 0, abandoned: 0 });
      if (!seededMeanwhile) t.equal(await s.dayCounter(), undefined, 'no counter was made up');
      t.equal((await s.budget.state(dev)).day_usd, 0.03, `${seededMeanwhile ? 'seeded meanwhile' : 'seeded afterwards'}: from the store (its rollups hold the new cost), the difference counted there only`);
      t.equal(await s.dayCounter(), micro(0.03));
    }
  });

  t.test(`${kind}: the difference is counted in whole micro-USD, as the rows were`, async (t) => {
    const s = await setup(t, kind);
    const dev = s.config.profiles.get('dev')!;
    await s.store.insertRequests([s.row({ generation_id: 'gen-a', cost_usd: 0.0000014 }), s.row({ generation_id: null, cost_usd: 0.0000014, cost_source: 'upstream' })]);
    await s.budget.state(dev);
    t.equal(await s.dayCounter(), micro(0.0000028), 'the seed: the rounded sum (3)');
    s.answers.set('gen-a', { status: 200, body: { data: { total_cost: 0.0000024 } } });
    s.clock.now += 3000;
    await s.reconciler.pass();
    t.equal(await s.dayCounter(), 3 + micro(0.0000024) - micro(0.0000014), 'moved by micro(new) - micro(old) = 1');
  });
}
