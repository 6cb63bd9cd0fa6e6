// Picks the Store backing from configuration: Postgres when a database URL is given, else the
// embedded SQLite file <dataDir>/sluice.db. Either runs in a worker thread (thread.ts), so the
// store's work never blocks or burdens the event loop. Returns a migrated store, ready to use.
// Owns only that choice; never decides anything about schema or queries itself.

import { join } from 'node:path';
import { openThreadStore } from './thread.ts';
import type { Store } from './store.ts';

export async function openStore(opts: { databaseUrl?: string; dataDir: string }): Promise<Store> {
  const store = openThreadStore(opts.databaseUrl
    ? { kind: 'postgres', url: opts.databaseUrl }
    : { kind: 'sqlite', file: join(opts.dataDir, 'sluice.db') });
  try {
    await store.migrate();
  } catch (err) {
    // A store that cannot migrate is not handed out, so nothing else would close it.
    await store.close().catch(() => {});
    throw err;
  }
  return store;
}
