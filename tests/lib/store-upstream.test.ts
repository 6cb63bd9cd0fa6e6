// Ring 1's store methods (upstream_keys, usage_snapshots, reconciliation columns), on both
// backings: each case runs against SQLite and against its own Postgres database. Also migrates a
// 0.3.0 store (step 1 only, full of rows) to the current schema. Never touches a shared database.

import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { parseMigrations } from '../../lib/store/migrations.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow, Store, UsageSnapshot } from '../../lib/store/store.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

type Kind = 'sqlite' | 'postgres';

async function where(t: Test, kind: Kind): Promise<{ databaseUrl?: string; dataDir: string }> {
  return kind === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir: t.testdir() } : { dataDir: t.testdir() };
}

async function open(t: Test, kind: Kind, at?: { databaseUrl?: string; dataDir: string }): Promise<Store> {
  const store = await openStore(at ?? (await where(t, kind)));
  t.teardown(() => store.close());
  return store;
}

function row(over: Partial<RequestRow> = {}): RequestRow {
  return {
    id: randomUUID(), ts: '2025-03-01T12:00:00.000Z', endpoint: 'chat', profile: 'team', key_prefix: 'sk-sl-0001',
    end_user: null, session: null, run: null, tier: null, requested_model: null, model: null, stream: true,
    status: 200, outcome: 'client_disconnect', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0,
    cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.01, cost_source: 'estimate', provider: null,
    degradation: 'none', generation_id: 'gen-1', ttfb_ms: null, duration_ms: 500, overhead_ms: null, tools: [], key_id: 1, ...over,
  };
}

function snapshot(over: Partial<UsageSnapshot> = {}): UsageSnapshot {
  return {
    profile: 'team', ts: '2025-03-01T12:00:00.000Z', day: '2025-03-01', label: 'sluice:team', limit_usd: 5,
    limit_remaining: 4.5, limit_reset: 'daily', usage: 10, usage_daily: 0.5, usage_weekly: 2, usage_monthly: 8,
    ledger_day_usd: 0.6, drift_usd: 0.1, drifted: true, ...over,
  };
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: upstream keys are upserted per profile`, async (t) => {
    const store = await open(t, kind);
    t.strictSame(await store.upstreamKeys(), []);
    const a = { profile: 'team', hash: 'h1', name: 'sluice:team', label: 'sluice:team', limit_usd: 5, limit_reset: 'daily', created_at: '2025-03-01T10:00:00.000Z', updated_at: '2025-03-01T10:00:00.000Z' };
    await store.putUpstreamKey(a);
    await store.putUpstreamKey({ ...a, profile: 'alpha', hash: 'h0', name: 'sluice:alpha', label: null, limit_usd: null, limit_reset: null });
    await store.putUpstreamKey({ ...a, limit_usd: 7, updated_at: '2025-03-02T10:00:00.000Z' });
    const keys = await store.upstreamKeys();
    t.strictSame(keys.map((k) => k.profile), ['alpha', 'team']);
    t.strictSame(keys[1], { ...a, limit_usd: 7, updated_at: '2025-03-02T10:00:00.000Z' });
    t.equal(keys[0].label, null);
  });

  t.test(`${kind}: the newest snapshot per profile`, async (t) => {
    const store = await open(t, kind);
    t.strictSame(await store.latestUsageSnapshots(), []);
    await store.insertUsageSnapshot(snapshot());
    await store.insertUsageSnapshot(snapshot({ ts: '2025-03-01T12:05:00.000Z', usage_daily: 0.6, drift_usd: 0, drifted: false }));
    await store.insertUsageSnapshot(snapshot({ ts: '2025-03-01T11:00:00.000Z', usage_daily: 0.1 }));
    await store.insertUsageSnapshot(snapshot({ profile: 'alpha', limit_usd: null, limit_remaining: null, label: null, limit_reset: null }));
    // Equal timestamps (a clock that did not move): the later row is the newest.
    await store.insertUsageSnapshot(snapshot({ profile: 'alpha', usage: 1, limit_usd: null, limit_remaining: null, label: null, limit_reset: null }));
    await store.insertUsageSnapshot(snapshot({ profile: 'alpha', usage: 2, limit_usd: null, limit_remaining: null, label: null, limit_reset: null }));
    const latest = await store.latestUsageSnapshots();
    t.strictSame(latest, [
      snapshot({ profile: 'alpha', usage: 2, limit_usd: null, limit_remaining: null, label: null, limit_reset: null }),
      snapshot({ ts: '2025-03-01T12:05:00.000Z', usage_daily: 0.6, drift_usd: 0, drifted: false }),
    ]);
  });

  t.test(`${kind}: reconciliation bookkeeping`, async (t) => {
    const store = await open(t, kind);
    t.strictSame(await store.reconcileCounts(), { pending: 0, reconciled: 0, abandoned: 0 });
    t.equal(await store.hasPendingReconciles(), false);
    const a = row({ ts: '2025-03-01T12:00:00.000Z' });
    const b = row({ ts: '2025-03-01T12:00:01.000Z', generation_id: 'gen-2' });
    const old = row({ ts: '2025-03-01T11:00:00.000Z', generation_id: 'gen-0' });
    await store.insertRequests([
      a, b, old,
      row({ generation_id: null }), // nothing to look up
      row({ cost_source: 'upstream', cost_usd: 0.2 }), // already the router's figure
    ]);
    t.equal(await store.hasPendingReconciles(), true);
    t.strictSame(await store.reconcileCounts(), { pending: 3, reconciled: 0, abandoned: 0 });
    const due = await store.duePendingReconciles('2025-03-01T12:01:00.000Z', 10);
    t.strictSame(due.map((r) => r.id), [old.id, a.id, b.id], 'oldest first');
    t.strictSame(due[1], { id: a.id, profile: 'team', generation_id: 'gen-1', ts: a.ts, duration_ms: 500, cost_usd: 0.01, reconcile_attempts: 0 });
    t.equal((await store.duePendingReconciles('2025-03-01T12:01:00.000Z', 1)).length, 1, 'limit');

    t.equal(await store.abandonReconcilesBefore('2025-03-01T11:30:00.000Z'), 1);
    await store.deferReconcile(a.id, 1, '2025-03-01T12:02:00.000Z');
    t.strictSame((await store.duePendingReconciles('2025-03-01T12:01:00.000Z', 10)).map((r) => r.id), [b.id], 'deferred row waits');
    const later = await store.duePendingReconciles('2025-03-01T12:02:00.000Z', 10);
    t.strictSame(later.map((r) => [r.id, r.reconcile_attempts]), [[a.id, 1], [b.id, 0]], 'and is due at its time');
    await store.deferReconcile(b.id, 5, null);
    t.strictSame(await store.reconcileCounts(), { pending: 1, reconciled: 0, abandoned: 2 });

    const midnight = '2025-03-01T00:00:00.000Z';
    const rolled = await store.ledgerSpendSince('team', midnight);
    t.equal(rolled, await store.spendSince('team', midnight), 'the rollups hold the rows\' cost');
    t.equal(await store.applyReconciledCost(a.id, 0.03, '2025-03-01T12:02:01.000Z'), 0.01, 'the first caller gets the old cost');
    t.equal(Math.round((await store.ledgerSpendSince('team', midnight)) * 1e6), Math.round((rolled + 0.02) * 1e6), 'the rollups follow the reconciled cost (the budget seeds from them)');
    t.equal(Math.round((await store.ledgerSpendSince('team', midnight)) * 1e6), Math.round((await store.spendSince('team', midnight)) * 1e6));
    t.equal(await store.applyReconciledCost(a.id, 0.03, '2025-03-01T12:02:02.000Z'), undefined, 'a second caller gets nothing');
    t.equal(await store.applyReconciledCost('no-such-row', 0.03, '2025-03-01T12:02:02.000Z'), undefined);
    t.strictSame(await store.reconcileCounts(), { pending: 0, reconciled: 1, abandoned: 2 });
    const stored = (await store.listRequests()).find((r) => r.id === a.id)!;
    t.equal(stored.cost_usd, 0.03);
    t.equal(stored.cost_source, 'upstream');
    t.equal((await store.listRequests()).find((r) => r.id === b.id)!.cost_usd, 0.01, 'an abandoned row keeps its estimate');
    t.strictSame(Object.keys(stored).sort(), Object.keys(a).sort(), 'request rows keep their shape');
    t.equal(await store.hasPendingReconciles(), false);
  });

  t.test(`${kind}: concurrent applyReconciledCost from two connections: one winner`, async (t) => {
    const at = await where(t, kind);
    const one = await open(t, kind, at);
    const two = await open(t, kind, at);
    const rows = Array.from({ length: 20 }, (_, i) => row({ generation_id: `g${i}` }));
    await one.insertRequests(rows);
    const results = await Promise.all(rows.flatMap((r) => [one.applyReconciledCost(r.id, 0.5, r.ts), two.applyReconciledCost(r.id, 0.5, r.ts)]));
    t.equal(results.filter((r) => r !== undefined).length, rows.length, 'exactly one old cost per row');
    t.ok(results.filter((r) => r !== undefined).every((r) => r === 0.01));
  });

  t.test(`${kind}: a 0.3.0 store full of rows migrates`, async (t) => {
    const at = await where(t, kind);
    const file = kind === 'sqlite' ? 'lib/store/sqlite-schema.sql' : 'schema.sql';
    const step1 = parseMigrations(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8'))[0].sql;
    const rows = Array.from({ length: 300 }, (_, i) => row({ ts: new Date(Date.UTC(2025, 1, 1) + i * 1000).toISOString(), generation_id: i % 2 ? `g${i}` : null }));
    const insert = `INSERT INTO requests (id, ts, endpoint, profile, key_prefix, stream, status, outcome, input_tokens, output_tokens,
      cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, cost_source, degradation, generation_id, duration_ms)
      VALUES ($1, $2, 'chat', 'team', 'sk-sl-0001', $3, 200, 'ok', 1, 1, 0, 0, 0, $4, 'estimate', 'none', $5, 10)`;
    if (kind === 'sqlite') {
      const db = new DatabaseSync(join(at.dataDir, 'sluice.db'));
      db.exec(step1);
      const st = db.prepare(insert.replace(/\$\d/g, '?'));
      for (const r of rows) st.run(r.id, r.ts, 1, r.cost_usd, r.generation_id);
      db.close();
    } else {
      const sql = postgres(at.databaseUrl!, { max: 1, onnotice: () => {} });
      await sql.unsafe(step1);
      for (const r of rows) await sql.unsafe(insert, [r.id, r.ts, true, r.cost_usd, r.generation_id]);
      await sql.end();
    }
    const store = await open(t, kind, at);
    t.equal((await store.listRequests(1000)).length, 300, 'every 0.3.0 row is still there');
    t.strictSame(await store.reconcileCounts(), { pending: 150, reconciled: 0, abandoned: 0 });
    t.equal(await store.abandonReconcilesBefore('2025-03-01T00:00:00.000Z'), 150, 'old rows are abandoned without a lookup');
    t.strictSame(await store.reconcileCounts(), { pending: 0, reconciled: 0, abandoned: 150 });
    await store.migrate();
    const again = await open(t, kind, at);
    t.strictSame(await again.reconcileCounts(), { pending: 0, reconciled: 0, abandoned: 150 }, 'migrating again changes nothing');
  });
}
