// The embedded store's one way to write atomically. BEGIN IMMEDIATE takes the write lock up
// front, so a concurrent writer (another process on the same file: the admin CLI, a second
// server) waits on busy_timeout instead of failing midway; the work lands whole or not at all.

import type { DatabaseSync } from 'node:sqlite';

export function writeTransaction<T>(db: DatabaseSync, work: () => T): T {
  db.exec('BEGIN IMMEDIATE');
  try {
    const out = work();
    db.exec('COMMIT');
    return out;
  } catch (err) {
    db.exec('ROLLBACK');
    throw err;
  }
}
