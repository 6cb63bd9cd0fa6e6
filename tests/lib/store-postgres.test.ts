// Runs the Store contract against the Postgres backing, one fresh database per test on the
// machine's server (tests/helpers/postgres.ts). Fails, never skips, when Postgres is down.
// Must never touch a database it did not create.

import { tmpdir } from 'node:os';
import t, { type Test } from 'tap';
import { openStore } from '../../lib/store/open.ts';
import type { Store } from '../../lib/store/store.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';
import { storeContract } from './store.contract.ts';

// One database per test: a later open(t) reconnects to the same database rather than a fresh one.
const urls = new WeakMap<Test, string>();

async function open(t: Test): Promise<Store> {
  let url = urls.get(t);
  if (!url) {
    url = await freshPostgresUrl(t);
    urls.set(t, url);
  }
  // dataDir is unused when a database URL is given.
  const store = await openStore({ databaseUrl: url, dataDir: tmpdir() });
  t.equal(store.kind, 'postgres');
  return store;
}

storeContract(t, open);
