// The board's store contract (tests/lib/store-board.contract.ts) on the embedded SQLite store, one
// temp directory per test; a 0.3.0 file is built from migration 1 of sqlite-schema.sql alone.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import t, { type Test } from 'tap';
import { parseMigrations } from '../../lib/store/migrations.ts';
import { openStore } from '../../lib/store/open.ts';
import { adjustRollupCostSqlite, rollUpRequestsSqlite } from '../../lib/store/sqlite-board.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { rows, storeBoardContract } from './store-board.contract.ts';

const dirs = new WeakMap<Test, string>();
const dirOf = (t: Test) => {
  if (!dirs.has(t)) dirs.set(t, t.testdir());
  return dirs.get(t)!;
};
/** A second connection to t's file, closed at teardown (what another process would hold). */
function raw(t: Test): DatabaseSync {
  const db = new DatabaseSync(join(dirOf(t), 'sluice.db'), { timeout: 5000 });
  t.teardown(() => db.close());
  return db;
}
const COLUMNS = ['id', 'ts', 'endpoint', 'profile', 'key_prefix', 'end_user', 'session', 'run', 'tier', 'requested_model', 'model', 'stream', 'status', 'outcome', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'reasoning_tokens', 'cost_usd', 'cost_source', 'provider', 'degradation', 'generation_id', 'ttfb_ms', 'duration_ms', 'overhead_ms', 'tools'] as const;

storeBoardContract(t, {
  async open(t) {
    const store = await openStore({ dataDir: dirOf(t) });
    t.equal(store.kind, 'sqlite');
    return store;
  },
  async open030(t, rows, audit) {
    const db = raw(t);
    db.exec(parseMigrations(readFileSync(new URL('../../lib/store/sqlite-schema.sql', import.meta.url), 'utf8'))[0].sql);
    const ins = db.prepare(`INSERT INTO requests (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})`);
    for (const r of rows) ins.run(...COLUMNS.map((c) => (c === 'stream' ? Number(r.stream) : c === 'tools' ? JSON.stringify(r.tools) : (r as any)[c] as RequestRow['id'])));
    for (const a of audit) db.prepare('INSERT INTO auth_audit (ts, ip, prefix, outcome) VALUES (?, ?, ?, ?)').run(a.ts, a.ip, a.prefix, a.outcome);
  },
  async adjustCost(t, id, cost) {
    const db = raw(t);
    db.exec('BEGIN IMMEDIATE');
    const old = db.prepare('SELECT cost_usd FROM requests WHERE id = ?').get(id);
    db.prepare('UPDATE requests SET cost_usd = ? WHERE id = ?').run(cost, id);
    adjustRollupCostSqlite(db, id, cost - Number(old?.cost_usd ?? 0));
    db.exec('COMMIT');
  },
  async rawIds(t) {
    return raw(t).prepare('SELECT id FROM requests').all().map((r) => r.id as string);
  },
});

t.test('a backfill an earlier version left half done (its rowid cursor) is finished in time order, counting no row twice', async (t) => {
  const old = rows(120, 21);
  const db = raw(t);
  db.exec(parseMigrations(readFileSync(new URL('../../lib/store/sqlite-schema.sql', import.meta.url), 'utf8'))[0].sql);
  const ins = db.prepare(`INSERT INTO requests (${COLUMNS.join(', ')}) VALUES (${COLUMNS.map(() => '?').join(', ')})`);
  for (const r of old) ins.run(...COLUMNS.map((c) => (c === 'stream' ? Number(r.stream) : c === 'tools' ? JSON.stringify(r.tools) : (r as any)[c] as RequestRow['id'])));
  const store = await openStore({ dataDir: dirOf(t) });
  t.teardown(() => store.close());
  // What 0.3.3 would have done before stopping: rows 1..50 in rowid order rolled up, its cursor at 50.
  const earlier = old.slice(0, 50);
  db.exec('BEGIN IMMEDIATE');
  rollUpRequestsSqlite(db, earlier);
  db.prepare("UPDATE board_state SET value = '50' WHERE name = 'requests_cursor'").run();
  db.exec('COMMIT');
  let read = 0;
  for (;;) {
    const r = await store.backfillRollups(16);
    read += r.rows;
    if (r.done) break;
  }
  t.equal(read, 70, 'only the rows after the old cursor are read');
  const all = await store.boardSums({ grain: 'a', dims: ['run'], from: '', to: '' });
  const day = await store.boardSums({ grain: 'd', dims: ['all'], from: '0000', to: '9999' });
  t.equal(day.reduce((n, r) => n + r.requests, 0), 120, 'every row counted once');
  t.ok(all.length > 0, 'run totals too');
  t.ok(Math.abs(day.reduce((n, r) => n + r.cost_usd, 0) - old.reduce((n, r) => n + r.cost_usd, 0)) < 1e-9, 'and every cost');
});
