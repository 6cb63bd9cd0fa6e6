// Ring 1 inside a running gateway, on both stores, against the simulated router: the usage refresh
// loop (snapshots, drift logged once per UTC day and profile, /api/health), cost
// reconciliation of a disconnected stream (the router's figure replaces the estimate and the budget
// is corrected by the difference), lookups that never succeed (abandoned, estimate kept), and
// router outages (logged once, requests still served, caught up afterwards).

import t, { type Test } from 'tap';
import { micro, windows } from '../../lib/budget.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { until } from '../helpers/processes.ts';
import { RECONCILE, retryDelayMs } from '../../lib/upstream/reconcile.ts';

const day = 86_400_000;

function ledgerRow(h: Harness, profile: string, cost: number, at = h.clock.now): RequestRow {
  return {
    id: `ledger-${Math.random()}`, ts: new Date(at).toISOString(), endpoint: 'chat', profile, key_prefix: 'sk-sl-x', end_user: null, session: null,
    run: null, tier: null, requested_model: null, model: null, stream: false, status: 200, outcome: 'ok', input_tokens: 1, output_tokens: 1,
    cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: cost, cost_source: 'upstream', provider: null,
    degradation: 'none', generation_id: null, ttfb_ms: null, duration_ms: 1, overhead_ms: null, tools: [],
  };
}

const health = async (h: Harness) => (await (await fetch(`${h.url}/api/health`)).json()) as any;
const lines = (h: Harness, msg: string) => [...h.logs].filter((l) => l.msg === msg);

/** A streamed chat request the client leaves after the first event: its row is an estimate with a generation id. */
async function disconnectedStream(h: Harness, key: string): Promise<RequestRow> {
  const before = h.rowCount();
  const ac = new AbortController();
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'chunks=40;chunk-delay-ms=25' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'count slowly' }] }),
  });
  const reader = res.body!.getReader();
  let text = '';
  while (!text.includes('"content":"') || text.split('data:').length < 5) text += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  await reader.read().catch(() => {});
  const rows = await h.rows(before + 1);
  const row = rows.find((r) => r.outcome === 'client_disconnect' && !r.id.startsWith('ledger-') && r.cost_source === 'estimate' && r.generation_id !== null);
  if (!row) throw new Error(`no estimated row: ${JSON.stringify(rows.slice(0, 3))}`);
  return row;
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: the refresh loop stores snapshots, logs a drift once per day and profile, and /health shows them`, async (t) => {
    const h = await startHarness(t, { store: kind, env: { SLUICE_USAGE_REFRESH_S: '0.2', SLUICE_DRIFT_PCT: '2', SLUICE_DRIFT_USD: '0.05' } });
    const loop = h.gateway.upstream.usageLoop!;
    const snaps = await until('a snapshot of each profile with a key', async () => {
      const s = await h.store.latestUsageSnapshots();
      return s.length === 3 ? s : undefined;
    });
    t.strictSame(snaps.map((s) => s.profile), ['assistant', 'dev', 'tiny'], 'nokey has no upstream key: no readout');
    t.ok(snaps.every((s) => !s.drifted && s.day === windows(h.clock.now).day));
    const readouts = h.sim.received.filter((r) => r.path === '/api/v1/key');
    t.ok(readouts.length >= 3);
    t.notOk(readouts.some((r) => r.headers.authorization?.includes('provisioning')), 'never the provisioning key');

    // Spend the router never saw: the ledger runs ahead of the router by $0.30 for dev.
    await h.store.insertRequests([ledgerRow(h, 'dev', 0.3)]);
    const drifted = await until('a drifted dev snapshot', async () => (await h.store.latestUsageSnapshots()).find((s) => s.profile === 'dev' && s.drifted));
    t.match(drifted, { ledger_day_usd: 0.3, drift_usd: 0.3 });
    const rounds = loop.rounds;
    await until('three more rounds', async () => loop.rounds >= rounds + 3);
    const warned = lines(h, "ledger and router disagree on today's spend (logged once per day and profile)");
    t.equal(warned.length, 1, 'logged once, however many rounds see it');
    t.match(warned[0], { level: 40, profile: 'dev', ledger_usd: 0.3, router_usd: 0, drift_usd: 0.3 });

    // A small difference is not a drift: under both thresholds.
    await h.store.insertRequests([ledgerRow(h, 'assistant', 0.01)]);
    await until('the assistant snapshot to see it', async () => (await h.store.latestUsageSnapshots()).find((s) => s.profile === 'assistant' && s.ledger_day_usd === 0.01));
    t.notOk((await h.store.latestUsageSnapshots()).find((s) => s.profile === 'assistant')!.drifted);

    // The next UTC day: dev drifts again (new spend) and is logged again, once.
    h.clock.now += day;
    await h.store.insertRequests([ledgerRow(h, 'dev', 0.2)]);
    await until('a second drift line', async () => lines(h, "ledger and router disagree on today's spend (logged once per day and profile)").length === 2);
    const next = lines(h, "ledger and router disagree on today's spend (logged once per day and profile)")[1];
    t.match(next, { profile: 'dev', day: windows(h.clock.now).day, ledger_usd: 0.2 });

    const d = await health(h);
    t.match(d.usage, { refresh_s: 0.2, last_snapshot_at: { dev: String, assistant: String, tiny: String, nokey: null } });
    t.strictSame(d.reconcile, { pending: 0, reconciled: 0, abandoned: 0 });
  });
}

for (const kind of ['sqlite', 'postgres'] as const) t.test(`${kind}: usage refresh during a router outage: logged once, requests still served, caught up afterwards`, async (t) => {
  const h = await startHarness(t, { store: kind, env: { SLUICE_USAGE_REFRESH_S: '0.1', SLUICE_MANAGEMENT_TIMEOUT_S: '0.5' } });
  const sim = h.sim as any;
  const loop = h.gateway.upstream.usageLoop!;
  await until('the first snapshots', async () => (await h.store.latestUsageSnapshots()).length === 3);
  const key = await h.key('dev');
  for (const fault of [{ status: 503 }, { hang: true }]) {
    sim.setFault('key', fault);
    const failing = () => lines(h, 'usage refresh: failing; retrying with backoff (logged once until it works again)');
    const before = failing().length;
    await until('the outage line', async () => failing().length === before + 1);
    const failures = loop.failures;
    await until('two more failed rounds', async () => loop.failures >= failures + 2, 15_000);
    t.equal(failing().length, before + 1, `${JSON.stringify(fault)}: one line for the whole outage`);
    const served = await fetch(`${h.url}/v1/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }) });
    t.equal(served.status, 200, 'requests are served meanwhile');
    sim.setFault('key', null);
    // The gateway's clock stands still: move it, so the next snapshots are told apart by time.
    const before2 = (await h.store.latestUsageSnapshots()).map((s) => s.ts);
    h.clock.now += 1000;
    // A round already under way when the fault was lifted may still fail (a hang runs to its timeout).
    await until('a round that works', () => loop.runOnce(), 15_000);
    const after = (await h.store.latestUsageSnapshots()).map((s) => s.ts);
    t.strictSame(after, after.map(() => new Date(h.clock.now).toISOString()), 'new snapshots, one per profile');
    t.notSame(after, before2);
  }
  t.equal(lines(h, 'usage refresh: working again').length, 2);
});

async function reconcileHarness(t: Test, kind: 'sqlite' | 'postgres') {
  const h = await startHarness(t, { store: kind, env: { SLUICE_RECONCILE_POLL_S: '0.1', SLUICE_MANAGEMENT_TIMEOUT_S: '1' } });
  const key = await h.key('dev');
  return { h, key, sim: h.sim as any };
}

/**
 * Moves the gateway's clock on by `stepMs` at a time until `done` holds (the reconciler's delays
 * are on that clock), letting a whole pass run on each new time before the next step, so what the
 * passes see does not depend on how fast this machine is.
 */
async function advanceUntil<T>(h: Harness, what: string, stepMs: number, done: () => Promise<T | undefined | false>): Promise<T> {
  const loop = h.gateway.upstream.reconcileLoop!;
  return until(what, async () => {
    const v = await done();
    if (v) return v;
    h.clock.now += stepMs;
    const r = loop.rounds;
    await until('a whole pass on the new time', async () => loop.rounds >= r + 2, 30_000);
    return undefined;
  }, 120_000);
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a disconnected stream's estimate is replaced by the router's cost, and the budget corrected once`, async (t) => {
    const { h, key, sim } = await reconcileHarness(t, kind);
    // The router holds the record back until the test lets it go; the gateway's clock moves only
    // when the test moves it. So the order is fixed: nothing before 3 s, a 404, the record.
    sim.setGenerationDelay(1e9);
    const row = await disconnectedStream(h, key);
    t.ok(row.cost_usd > 0, 'chat reports usage only at the end: the prompt is estimated from the body');
    const spentBefore = (await h.gateway.deps.budget.state(h.config.profiles.get('dev')!)).day_usd;
    // The budget counts in whole micro-USD; the store keeps the estimate exactly.
    t.equal(micro(spentBefore), micro(await h.store.spendSince('dev', new Date(windows(h.clock.now).dayStart).toISOString())));
    const loop = h.gateway.upstream.reconcileLoop!;
    const lookups = () => h.sim.received.filter((r) => r.path.startsWith('/api/v1/generation'));
    const attempts = async () => (await h.store.duePendingReconciles(new Date(h.clock.now + day).toISOString(), 10)).find((r) => r.id === row.id)?.reconcile_attempts;
    const end = Date.parse(row.ts);

    const rounds = loop.rounds;
    await until('three passes', async () => loop.rounds >= rounds + 3);
    t.equal(lookups().length, 0, 'no lookup before 3 s after the end');
    h.clock.now = end + RECONCILE.firstLookupMs;
    await until('a lookup answered 404, counted', async () => (await attempts()) === 1);
    t.equal(lookups().length, 1, 'one lookup, answered 404');
    await until('the generation record at the router', async () => sim.generation(row.generation_id!));
    sim.setGenerationDelay(0);
    const idle = loop.rounds;
    await until('three more passes', async () => loop.rounds >= idle + 3);
    t.equal(lookups().length, 1, 'none again before the backoff has passed');
    h.clock.now += retryDelayMs(1, h.clock.now - end);
    const reconciled = await until('the row to carry the router\'s cost', async () =>
      (await h.store.listRequests(100)).find((r) => r.id === row.id && r.cost_source === 'upstream'));
    const record = sim.generation(row.generation_id!)!;
    t.ok(record.total_cost > 0, 'the router charged the part that streamed');
    t.equal(reconciled.cost_usd, record.total_cost, "cost_usd is the router's figure");
    t.equal(lookups().length, 2, 'a 404 first, then the record');
    t.ok(lookups().every((r) => r.headers.authorization === `Bearer ${h.gateway.deps.upstreamKeys.get('dev')}`), "looked up with the profile's key");
    t.equal(h.clock.now - end, 5_000, 'reconciled 5 s after the end (gateway clock): within a minute');

    const state = await h.gateway.deps.budget.state(h.config.profiles.get('dev')!);
    t.equal(micro(state.day_usd), micro(spentBefore) + micro(record.total_cost) - micro(row.cost_usd), 'the budget moved by the difference');
    const passes = h.gateway.upstream.reconcileLoop!.rounds;
    await until('more passes', async () => h.gateway.upstream.reconcileLoop!.rounds >= passes + 3);
    t.equal((await h.gateway.deps.budget.state(h.config.profiles.get('dev')!)).day_usd, state.day_usd, 'and only once');
    await until('the health counts', async () => (await health(h)).reconcile.reconciled === 1);
    t.strictSame((await health(h)).reconcile, { pending: 0, reconciled: 1, abandoned: 0 });
  });

  t.test(`${kind}: lookups that never succeed end abandoned, keeping the estimate`, async (t) => {
    const { h, key, sim } = await reconcileHarness(t, kind);
    sim.setGenerationDelay(1e9);
    const row = await disconnectedStream(h, key);
    await advanceUntil(h, 'the row to be abandoned', 60_000, async () => (await h.store.reconcileCounts()).abandoned === 1);
    const kept = (await h.store.listRequests(100)).find((r) => r.id === row.id)!;
    t.match(kept, { cost_source: 'estimate', cost_usd: row.cost_usd });
    t.ok(h.clock.now - Date.parse(row.ts) >= 10 * 60_000, 'not before the give-up time');
    const n = h.sim.received.filter((r) => r.path.startsWith('/api/v1/generation')).length;
    t.equal(n, 10, 'one lookup per minute of the gateway clock (the backoff caps at 60 s), until the give-up time');
  });
}

for (const kind of ['sqlite', 'postgres'] as const) t.test(`${kind}: reconciliation during a router outage: logged once, nothing abandoned, caught up afterwards`, async (t) => {
  const { h, key, sim } = await reconcileHarness(t, kind);
  sim.setGenerationDelay(0);
  sim.setFault('generation', { status: 502 });
  const row = await disconnectedStream(h, key);
  const failing = () => lines(h, 'cost reconciliation: failing; retrying with backoff (logged once until it works again)');
  // Well past the give-up time on the gateway's clock: an outage never counts toward it.
  await advanceUntil(h, 'the outage line', 60_000, async () => failing().length === 1);
  h.clock.now += 20 * 60_000;
  const loop = h.gateway.upstream.reconcileLoop!;
  const f = loop.failures;
  await until('more failed passes', async () => loop.failures >= f + 2, 15_000);
  t.equal(failing().length, 1, 'one line for the outage');
  t.strictSame(await h.store.reconcileCounts(), { pending: 1, reconciled: 0, abandoned: 0 }, 'still pending');
  sim.setFault('generation', null);
  // A pass already under way when the fault was lifted may still see a 502.
  await until('a pass that works', () => loop.runOnce(), 15_000);
  const done = (await h.store.listRequests(100)).find((r) => r.id === row.id)!;
  t.equal(done.cost_source, 'upstream', 'caught up once the router is back');
  t.equal(lines(h, 'cost reconciliation: working again').length, 1);
});
