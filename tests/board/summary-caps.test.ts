// The spend section's caps computed from real stores (SQLite and Postgres) on a fixed clock: each
// active key with caps of its own against them (the budget's standing; the rollups' when the
// counters cannot be read), keys without caps, revoked or expired left out; and today's sessions at
// their profile's cap per session, and only those.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { insertKey, prepareKey } from '../../cli/keys.ts';
import { Admission } from '../../lib/admission.ts';
import { computeSummary, type SummaryDeps } from '../../lib/board/summary.ts';
import { Budget } from '../../lib/budget.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { openStore } from '../../lib/store/open.ts';
import type { KeyRow, Store } from '../../lib/store/store.ts';
import { spentRow } from '../helpers/budget-caps.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

const NOW = Date.parse('2025-03-10T12:30:00.000Z');
const DAY_END = '2025-03-11T00:00:00.000Z';
const MONTH_END = '2025-04-01T00:00:00.000Z';
const CAPPED = `  capped:
    default_tier: fast
    router: sim
    budget: { daily_usd: 10, monthly_usd: 100 }
    session_daily_usd: 0.5
`;

async function setup(t: Test, kind: 'sqlite' | 'postgres') {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-summary-caps-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profilesYaml('http://127.0.0.1:9', CAPPED));
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
  const config = loadConfig(dir);
  const store: Store = await openStore(kind === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir: dir } : { dataDir: dir });
  t.teardown(() => store.close());
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const deps: SummaryDeps = {
    store, config, admission: new Admission({ counters, budget: { spendKeys: () => ['', ''], observe: () => {} } }),
    budget: new Budget({ counters, store, now: () => NOW }), catalog: { prices: () => undefined }, keyCacheSize: () => 0,
    health: () => ({
      status: 'ok', version: 't', uptime_s: 0, store: { kind, reachable: true, rows_written: 0, rows_pending: 0 }, counters: { kind: 'memory', degraded: false },
      catalog: {}, in_flight: 0, connections: { max: 0, max_per_address: 0, refused: { per_address: 0, global: 0 } },
    }),
    maintenance: () => ({ backfill_done: true, backfill_rows: 0, retention_days: null, retention_deleted: 0 }),
    now: () => NOW, startedAt: NOW, version: 't', driftUsd: 0.05,
  };
  const mint = async (profile: string, name: string, o: { dailyUsd?: string; monthlyUsd?: string; expires?: string } = {}): Promise<KeyRow> => {
    await insertKey(store, prepareKey(config, { profile, name, ...o }, NOW - 20 * 86_400_000));
    return (await store.listKeys(profile)).find((k) => k.name === name && k.revoked_at === null)!;
  };
  return { store, deps, mint };
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: keys against their own caps, sessions at their cap`, async (t) => {
    const { store, deps, mint } = await setup(t, kind);
    const alice = await mint('dev', 'alice', { dailyUsd: '1' });
    const carol = await mint('dev', 'carol', { monthlyUsd: '2' });
    const bob = await mint('dev', 'bob');
    const dave = await mint('dev', 'dave', { dailyUsd: '1' });
    await store.revokeKey('dev', 'dave', new Date(NOW - 3_600_000).toISOString());
    const erin = await mint('dev', 'erin', { dailyUsd: '1', expires: '2025-03-05' });
    const lo = await mint('capped', 'loop-owner');
    const hour = NOW - 3_600_000;
    await store.insertRequests([
      spentRow(alice, 0.75, hour), spentRow(carol, 1.5, Date.parse('2025-03-03T10:00:00.000Z')), spentRow(carol, 0.1, hour),
      spentRow(bob, 3, hour), spentRow(dave, 5, hour), spentRow(erin, 5, hour),
      // Sessions of the capped profile (0.5 a session a day): s1 over it in two requests, s2 under it,
      // s3 over it yesterday, and spend without a session; a session of dev (no cap) spending more.
      spentRow(lo, 0.3, hour, 's1'), spentRow(lo, 0.3, hour + 60_000, 's1'), spentRow(lo, 0.2, hour, 's2'),
      spentRow(lo, 0.9, NOW - 86_400_000, 's3'), spentRow(lo, 1, hour), spentRow(bob, 2, hour, 'dev-session'),
    ]);

    const s = await computeSummary(deps);
    const carolWant = {
      profile: 'dev', name: 'carol', daily_usd: null, monthly_usd: 2, day_usd: 0.1, month_usd: 1.6, day_percent: null, month_percent: 80,
      percent: 80, stage: 'fast-only', next_reset: MONTH_END,
    };
    const aliceWant = {
      profile: 'dev', name: 'alice', daily_usd: 1, monthly_usd: null, day_usd: 0.75, month_usd: 0.75, day_percent: 75, month_percent: null,
      percent: 75, stage: 'fast-only', next_reset: DAY_END,
    };
    t.strictSame(s.spend.keys, [carolWant, aliceWant], 'the capped active keys, most spent of its cap first; bob (no caps), dave (revoked), erin (expired) left out');
    t.strictSame(s.spend.sessions_stopped, [
      { profile: 'capped', session: 's1', end_user: null, cost_usd: 0.6, cap_usd: 0.5, requests: 2, last_seen: new Date(hour + 60_000).toISOString() },
    ], "only today's session at its profile's cap");
    t.equal(s.spend.profiles.find((p) => p.profile === 'capped')!.session_cap_usd, 0.5);
    t.equal(s.spend.profiles.find((p) => p.profile === 'dev')!.session_cap_usd, null);

    // Counters away: the same figures from the rollups.
    const away: SummaryDeps = { ...deps, budget: { state: deps.budget.state.bind(deps.budget), view: async () => { throw new Error('counters away'); } } };
    t.strictSame((await computeSummary(away)).spend.keys, [carolWant, aliceWant], 'from the rollups when the counters cannot be read');
  });
}
