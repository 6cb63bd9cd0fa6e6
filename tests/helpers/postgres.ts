// Gives a test its own empty Postgres database on the machine's server, dropped at teardown.
// Postgres being unreachable is a failure, never a skip: this throws, and the test fails with it.
// Never touches any database it did not create.

import { randomBytes } from 'node:crypto';
import postgres from 'postgres';
import type { Test } from 'tap';

const BASE_URL = process.env.SLUICE_TEST_PG_URL ?? 'postgres://root@127.0.0.1:5432/postgres';

async function admin<T>(run: (sql: postgres.Sql) => Promise<T>): Promise<T> {
  const sql = postgres(BASE_URL, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    return await run(sql);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

export async function freshPostgresUrl(t: Test): Promise<string> {
  const name = `sluice_test_${randomBytes(6).toString('hex')}`;
  try {
    await admin((sql) => sql.unsafe(`CREATE DATABASE ${name}`));
  } catch (err) {
    throw new Error(`Postgres at ${BASE_URL} is not usable for tests (is it running?)`, { cause: err });
  }
  t.teardown(() => admin((sql) => sql.unsafe(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)));
  const url = new URL(BASE_URL);
  url.pathname = `/${name}`;
  return url.toString();
}
