// Ring 1's server glue without a gateway: its settings read from the environment, a usage refresh where one
// profile's key is refused (logged once for that profile, the others still stored), and a store
// that cannot be read at start-up (warned, loops still start).

import { Writable } from 'node:stream';
import t from 'tap';
import { Budget } from '../../lib/budget.ts';
import { ConfigError } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import { openStore } from '../../lib/store/open.ts';
import { readSettings, readSettingsOf } from '../../lib/settings.ts';
import { createUpstreamLoops } from '../../lib/upstream/index.ts';
import { ManagementClient } from '../../lib/upstream/management.ts';
import { startSimWithConfig } from '../helpers/gateway.ts';

function capture() {
  const lines: Array<Record<string, any>> = [];
  const log = createLogger('debug', new Writable({ write(c, _e, cb) { for (const l of String(c).split('\n').filter(Boolean)) lines.push(JSON.parse(l)); cb(); } }));
  return { log, lines };
}

t.test('settings: defaults, fractions, and every bad value at once', async (t) => {
  const ring1 = ['usageRefreshMs', 'reconcilePollMs', 'managementTimeoutMs', 'driftPct', 'driftUsd'] as const;
  t.strictSame({ ...readSettingsOf({}, ring1) }, { usageRefreshMs: 300_000, reconcilePollMs: 2000, managementTimeoutMs: 15_000, driftPct: 2, driftUsd: 0.05 });
  t.match(readSettingsOf({ SLUICE_USAGE_REFRESH_S: '0', SLUICE_RECONCILE_POLL_S: '0.5', SLUICE_DRIFT_USD: ' ' }, ring1), { usageRefreshMs: 0, reconcilePollMs: 500, driftUsd: 0.05 });
  const err = t.throws(() => readSettings({ SLUICE_USAGE_REFRESH_S: '-1', SLUICE_MANAGEMENT_TIMEOUT_S: '0', SLUICE_DRIFT_PCT: 'x' })) as ConfigError;
  t.type(err, ConfigError);
  t.strictSame(err.problems, [
    'SLUICE_USAGE_REFRESH_S must be a number of seconds, 0 or more (0 turns it off), got "-1"',
    'SLUICE_MANAGEMENT_TIMEOUT_S must be a positive number of seconds, got "0"',
    'SLUICE_DRIFT_PCT must be a percentage, 0 or more, got "x"',
  ]);
});

t.test('one profile refused, the others stored; a store unreadable at start-up', async (t) => {
  const { sim, config, dataDir } = await startSimWithConfig(t);
  const store = await openStore({ dataDir });
  t.teardown(() => store.close());
  const mgmt = new ManagementClient({ timeoutMs: 1000 });
  const c = { router: new URL(sim.url), profile: 'x', bearer: 'sk-or-v1-provisioning' };
  const good = await mgmt.createKey(c, { name: 'good', limit: 5, limit_reset: 'daily' });
  const gone = await mgmt.createKey(c, { name: 'gone', limit: 5, limit_reset: 'daily' });
  await fetch(`${sim.url}/api/v1/keys/${gone.key.hash}`, { method: 'DELETE', headers: { authorization: 'Bearer sk-or-v1-provisioning' } });

  const { log, lines } = capture();
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const now = () => Date.UTC(2025, 2, 1, 12);
  // A store whose reads fail at start-up: warned, and the loops start anyway.
  const flaky = Object.create(store, { latestUsageSnapshots: { value: async () => { throw new Error('store away'); } } });
  const loops = createUpstreamLoops({
    config, store: flaky, budget: new Budget({ counters, store, now }), log, now,
    settings: readSettings({ SLUICE_USAGE_REFRESH_S: '3600', SLUICE_RECONCILE_POLL_S: '0' }),
    upstreamKeys: new Map([['dev', good.secret], ['assistant', gone.secret]]),
  });
  await loops.start();
  t.ok(lines.some((l) => l.msg === 'ring 1: the store could not be read at start-up; the loops read it later' && l.err?.message === 'store away' && typeof l.err.stack === 'string'));
  t.equal(loops.reconcileLoop, undefined, 'reconciliation off');
  t.equal(await loops.usageLoop!.runOnce(), true, 'one profile failing is not an outage of the loop');
  t.equal(await loops.usageLoop!.runOnce(), true);
  const failed = lines.filter((l) => l.msg === 'usage refresh: failed for this profile');
  t.equal(failed.length, 1, 'logged once for that profile');
  t.match(failed[0], { profile: 'assistant', err: { message: /^profile assistant: reading the usage of its upstream key \(GET \/api\/v1\/key\): the router answered 401/ } });
  t.notOk(JSON.stringify(lines).includes(gone.secret) || JSON.stringify(lines).includes(good.secret), 'no key in the log');
  const h = loops.health();
  t.match(h.usage.last_snapshot_at, { dev: '2025-03-01T12:00:00.000Z', assistant: null, tiny: null, nokey: null });
  t.strictSame((await store.latestUsageSnapshots()).map((s) => [s.profile, s.limit_usd]), [['dev', 5]]);
  await loops.stop();
});
