// Picks the Store backing from configuration: Postgres when a database URL is given, else the
// embedded SQLite file <dataDir>/sluice.db, run in a worker thread (sqlite-thread.ts) so SQLite's
// synchronous calls never block the event loop. Returns a migrated store, ready to use.
// Owns only that choice; never decides anything about schema or queries itself.

import { join } from 'node:path';
import { openPostgresStore } from './postgres.ts';
import { openSqliteThreadStore } from './sqlite-thread.ts';
import type { Store } from './store.ts';

export async function openStore(opts: { databaseUrl?: string; dataDir: string }): Promise<Store> {
  const store = opts.databaseUrl
    ? openPostgresStore(opts.databaseUrl)
    : openSqliteThreadStore(join(opts.dataDir, 'sluice.db'));
  try {
    await store.migrate();
  } catch (err) {
    // A store that cannot migrate is not handed out, so nothing else would close it.
    await store.close().catch(() => {});
    throw err;
  }
  return store;
}
