// Migration step 6 (key caps, and the key id of each request row) on a store that already holds
// the steps before it, with keys and rows, on both backings: the old keys come out without caps,
// the old rows without a key (counted toward the profile's ledger, toward no key's), new rows and
// caps work, and migrating again changes nothing. Each case owns its database.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import postgres from 'postgres';
import t from 'tap';
import { parseMigrations } from '../../lib/store/migrations.ts';
import { openStore } from '../../lib/store/open.ts';
import { keyRow, spentRow } from '../helpers/budget-caps.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

const OLD_KEY = `INSERT INTO keys (key_hash, prefix, profile, name, ip_allow, created_at) VALUES ('${'a'.repeat(64)}', 'sluice_team_…abcd', 'team', 'old', '', '2025-03-01T00:00:00.000Z')`;
const OLD_ROW = `INSERT INTO requests (id, ts, endpoint, profile, key_prefix, stream, status, outcome, input_tokens, output_tokens,
  cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, cost_source, degradation, duration_ms)
  VALUES ('old-row', '2025-03-15T10:00:00.000Z', 'chat', 'team', 'sluice_team_…abcd', $1, 200, 'ok', 1, 1, 0, 0, 0, 0.5, 'upstream', 'none', 10)`;

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: a store at step 5 with keys and rows takes step 6`, async (t) => {
    const file = kind === 'sqlite' ? 'lib/store/sqlite-schema.sql' : 'schema.sql';
    const steps = parseMigrations(readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8'));
    t.equal(steps.at(-1)!.version, 6, 'step 6 is the newest');
    const before = steps.filter((s) => s.version <= 5);
    const at = kind === 'postgres' ? { databaseUrl: await freshPostgresUrl(t), dataDir: t.testdir() } : { dataDir: t.testdir() };
    if (kind === 'sqlite') {
      const db = new DatabaseSync(join(at.dataDir, 'sluice.db'));
      db.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT');
      for (const s of before) {
        db.exec(s.sql);
        db.prepare('INSERT INTO schema_migrations VALUES (?, ?, ?)').run(s.version, s.name, '2025-03-01T00:00:00.000Z');
      }
      db.exec(OLD_KEY);
      db.prepare(OLD_ROW.replace('$1', '?')).run(0);
      db.close();
    } else {
      const sql = postgres(at.databaseUrl!, { max: 1, onnotice: () => {} });
      await sql.unsafe('CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)');
      for (const s of before) {
        await sql.unsafe(s.sql);
        await sql`INSERT INTO schema_migrations VALUES (${s.version}, ${s.name}, now())`;
      }
      await sql.unsafe(OLD_KEY);
      await sql.unsafe(OLD_ROW, [false]);
      await sql.end();
    }

    const store = await openStore(at);
    t.teardown(() => store.close());
    const [old] = await store.listKeys('team');
    t.match(old, { name: 'old', daily_usd: null, monthly_usd: null }, 'an old key has no caps');
    t.equal((await store.listRequests()).find((r) => r.id === 'old-row')!.key_id, null, 'an old row has no key');
    // Read from the raw rows (a time that is not a midnight): the row written here bypassed the rollups.
    t.equal(await store.keyLedgerSpendSince(old!.id, '2025-03-15T00:00:00.001Z'), 0, 'and counts toward no key');
    t.equal(await store.spendSince('team', '2025-03-15T00:00:00.001Z'), 0.5, 'but toward its profile');

    t.match(await store.setKeyCaps('team', 'old', { daily_usd: 1 }), { daily_usd: 1, monthly_usd: null }, 'caps can be set on an old key');
    const key = keyRow(old!.id, 'old', 'team');
    await store.insertRequests([spentRow(key, 0.25, Date.parse('2025-03-15T11:00:00Z'))]);
    t.equal(await store.keyLedgerSpendSince(old!.id, '2025-03-15T00:00:00.000Z'), 0.25, 'a new row counts toward its key');

    await store.migrate();
    const again = await openStore(at);
    t.teardown(() => again.close());
    t.match((await again.listKeys('team'))[0], { daily_usd: 1 }, 'migrating again changes nothing');
    t.equal(await again.keyLedgerSpendSince(old!.id, '2025-03-15T00:00:00.000Z'), 0.25);
  });
}
