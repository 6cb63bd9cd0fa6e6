// The board's store contract (tests/lib/store-board.contract.ts) on Postgres, one fresh database
// per test; a 0.3.0 database is built from migration 1 of schema.sql alone.

import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { parseMigrations } from '../../lib/store/migrations.ts';
import { openStore } from '../../lib/store/open.ts';
import { adjustRollupCostPostgres } from '../../lib/store/postgres-board.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';
import { rows, storeBoardContract } from './store-board.contract.ts';

const urls = new WeakMap<Test, string>();
async function urlOf(t: Test): Promise<string> {
  if (!urls.has(t)) urls.set(t, await freshPostgresUrl(t));
  return urls.get(t)!;
}
async function raw(t: Test): Promise<postgres.Sql> {
  const sql = postgres(await urlOf(t), { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 5 }));
  return sql;
}

storeBoardContract(t, {
  async open(t) {
    const store = await openStore({ databaseUrl: await urlOf(t), dataDir: tmpdir() });
    t.equal(store.kind, 'postgres');
    return store;
  },
  async open030(t, rows, audit) {
    const sql = await raw(t);
    await sql.unsafe(parseMigrations(readFileSync(new URL('../../schema.sql', import.meta.url), 'utf8'))[0].sql);
    const values = rows.map((r) => ({ ...r, tools: JSON.stringify(r.tools) }));
    await sql`INSERT INTO requests ${sql(values)}`;
    await sql`INSERT INTO auth_audit ${sql(audit.map((a) => ({ ...a })))}`;
  },
  async adjustCost(t, id, cost) {
    const sql = await raw(t);
    await sql.begin(async (tx) => {
      const [old] = await tx`SELECT cost_usd FROM requests WHERE id = ${id} FOR UPDATE`;
      await tx`UPDATE requests SET cost_usd = ${cost} WHERE id = ${id}`;
      await adjustRollupCostPostgres(tx, id, cost - Number(old?.cost_usd ?? 0));
    });
  },
  async rawIds(t) {
    return (await (await raw(t))`SELECT id FROM requests`).map((r) => r.id as string);
  },
});

t.test('the slice that ends a backfill gives the rollups their planner statistics', async (t) => {
  const old = rows(300, 7);
  const sql = await raw(t);
  await sql.unsafe(parseMigrations(readFileSync(new URL('../../schema.sql', import.meta.url), 'utf8'))[0].sql);
  await sql`INSERT INTO requests ${sql(old.map((r) => ({ ...r, tools: JSON.stringify(r.tools) })))}`;
  const store = await openStore({ databaseUrl: await urlOf(t), dataDir: tmpdir() });
  t.teardown(() => store.close());
  // reltuples is -1 until a table is first analyzed (or vacuumed).
  const reltuples = async () => Object.fromEntries((await sql`SELECT relname, reltuples::float8 AS n FROM pg_class
    WHERE relname IN ('board_rollup', 'board_hist')`).map((r) => [r.relname as string, Number(r.n)]));
  t.same(await reltuples(), { board_rollup: -1, board_hist: -1 }, 'no statistics before the backfill');
  let r = await store.backfillRollups(100);
  t.equal(r.done, false);
  t.same(await reltuples(), { board_rollup: -1, board_hist: -1 }, 'none while it runs');
  while (!r.done) r = await store.backfillRollups(100);
  const [counted] = await sql`SELECT (SELECT count(*) FROM board_rollup)::float8 AS rollup, (SELECT count(*) FROM board_hist)::float8 AS hist`;
  t.same(await reltuples(), { board_rollup: counted!.rollup, board_hist: counted!.hist }, 'analyzed by the slice that finished it');
});
