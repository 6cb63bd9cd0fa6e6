// The embedded Store: one SQLite file through node:sqlite, in WAL mode so the CLI and a running
// server can share it. Its DDL is lib/store/sqlite-schema.sql, applied in versioned steps at open.
// Booleans are stored as 0/1 and timestamps as ISO text; rows leave here in the Store's types.
// Never holds a full client key, and never lets a raw SQLite row escape unconverted.

import { writeTransaction } from './sqlite-tx.ts';
import { mkdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { DatabaseSync, type SQLInputValue, type StatementSync } from 'node:sqlite';
import { parseMigrations, pendingMigrations } from './migrations.ts';
import { sqliteUpstream } from './sqlite-upstream.ts';
import { rollUpAuditSqlite, rollUpRequestsSqlite, sqliteBoard, sqliteRequestRow } from './sqlite-board.ts';
import { type AuditRow, KeyConflictError, type KeyRow, type NewKey, REQUEST_COLUMNS, type RequestRow, type Store } from './store.ts';

const MIGRATIONS = parseMigrations(readFileSync(new URL('./sqlite-schema.sql', import.meta.url), 'utf8'));

/** How long a writer waits for the other process's write lock before giving up. */
const BUSY_TIMEOUT_MS = 5000;
/** Rows returned by listAudit/listRequests when the caller gives no limit. */
const DEFAULT_LIMIT = 100;


type Raw = Record<string, unknown>;

function toKey(raw: Raw): KeyRow {
  return {
    id: Number(raw.id),
    key_hash: raw.key_hash as string,
    prefix: raw.prefix as string,
    profile: raw.profile as string,
    name: raw.name as string,
    ip_allow: raw.ip_allow as string,
    created_at: raw.created_at as string,
    expires_at: (raw.expires_at as string | null) ?? null,
    last_used_at: (raw.last_used_at as string | null) ?? null,
    revoked_at: (raw.revoked_at as string | null) ?? null,
    daily_usd: (raw.daily_usd as number | null) ?? null,
    monthly_usd: (raw.monthly_usd as number | null) ?? null,
  };
}

/** Positional parameters in REQUEST_COLUMNS order (cheaper to bind than a named object per row). */
function requestParams(row: RequestRow): SQLInputValue[] {
  return REQUEST_COLUMNS.map((column) =>
    column === 'stream' ? (row.stream ? 1 : 0) : column === 'tools' ? JSON.stringify(row.tools) : ((row[column] ?? null) as SQLInputValue));
}

/** True for the partial unique index on active (profile, name), not for other constraints. */
function isActiveNameConflict(err: unknown): boolean {
  const message = err instanceof Error ? err.message : '';
  return message.includes('UNIQUE constraint failed') && message.includes('keys.profile, keys.name');
}

/** Applies the steps this file lacks, each in its own write transaction (a CLI and a server may race). */
function migrateSqlite(db: DatabaseSync): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT');
  const applied = () => db.prepare('SELECT version FROM schema_migrations').all().map((r) => Number(r.version));
  for (const step of pendingMigrations(MIGRATIONS, applied())) {
    writeTransaction(db, () => {
      // Re-read under the write lock: another process may have applied it meanwhile.
      if (!applied().includes(step.version)) {
        db.exec(step.sql);
        db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(step.version, step.name, new Date().toISOString());
      }
    });
  }
}

export function openSqliteStore(file: string): Store {
  mkdirSync(dirname(file), { recursive: true });
  const db = new DatabaseSync(file, { timeout: BUSY_TIMEOUT_MS });
  db.exec('PRAGMA journal_mode = WAL');
  db.exec(`PRAGMA busy_timeout = ${BUSY_TIMEOUT_MS}`);
  // WAL with NORMAL sync is durable against process crashes, which is what a gateway needs.
  db.exec('PRAGMA synchronous = NORMAL');
  // The tables must exist before statements can be prepared against them.
  migrateSqlite(db);

  const stmt = {
    createKey: db.prepare(
      `INSERT INTO keys (key_hash, prefix, profile, name, ip_allow, created_at, expires_at, daily_usd, monthly_usd)
       VALUES (:key_hash, :prefix, :profile, :name, :ip_allow, :created_at, :expires_at, :daily_usd, :monthly_usd) RETURNING *`,
    ),
    keyByHash: db.prepare('SELECT * FROM keys WHERE key_hash = ?'),
    touchKey: db.prepare('UPDATE keys SET last_used_at = ? WHERE id = ?'),
    listKeys: db.prepare('SELECT * FROM keys ORDER BY id'),
    listKeysOf: db.prepare('SELECT * FROM keys WHERE profile = ? ORDER BY id'),
    revokeKey: db.prepare(
      'UPDATE keys SET revoked_at = ? WHERE profile = ? AND name = ? AND revoked_at IS NULL RETURNING *',
    ),
    setKeyCaps: db.prepare(
      `UPDATE keys SET daily_usd = CASE WHEN :set_daily THEN :daily_usd ELSE daily_usd END,
         monthly_usd = CASE WHEN :set_monthly THEN :monthly_usd ELSE monthly_usd END
       WHERE profile = :profile AND name = :name AND revoked_at IS NULL RETURNING *`,
    ),
    insertAudit: db.prepare('INSERT INTO auth_audit (ts, ip, prefix, outcome) VALUES (?, ?, ?, ?)'),
    listAudit: db.prepare('SELECT id, ts, ip, prefix, outcome FROM auth_audit ORDER BY ts DESC, id DESC LIMIT ?'),
    insertRequest: db.prepare(
      `INSERT OR IGNORE INTO requests (${REQUEST_COLUMNS.join(', ')})
       VALUES (${REQUEST_COLUMNS.map(() => '?').join(', ')})`,
    ),
    listRequests: db.prepare(`SELECT ${REQUEST_COLUMNS.join(', ')} FROM requests ORDER BY ts DESC, id DESC LIMIT ?`),
    spendSince: db.prepare('SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests WHERE profile = ? AND ts >= ?'),
  } satisfies Record<string, StatementSync>;

  // The whole batch lands or none of it does (lib/store/sqlite-tx.ts).
  const inTransaction = (work: () => void): void => writeTransaction(db, work);

  return {
    kind: 'sqlite',
    ...sqliteUpstream(db),
    ...sqliteBoard(db),

    async migrate() {
      migrateSqlite(db);
    },

    async createKey(key: NewKey) {
      try {
        const raw = stmt.createKey.get({
          key_hash: key.key_hash,
          prefix: key.prefix,
          profile: key.profile,
          name: key.name,
          ip_allow: key.ip_allow,
          created_at: key.created_at,
          expires_at: key.expires_at ?? null,
          daily_usd: key.daily_usd ?? null,
          monthly_usd: key.monthly_usd ?? null,
        });
        return toKey(raw as Raw);
      } catch (err) {
        if (isActiveNameConflict(err)) throw new KeyConflictError(key.profile, key.name);
        throw err;
      }
    },

    async keyByHash(hash) {
      const raw = stmt.keyByHash.get(hash);
      return raw ? toKey(raw) : undefined;
    },

    async touchKey(id, at) {
      stmt.touchKey.run(at, id);
    },

    async listKeys(profile) {
      const rows = profile === undefined ? stmt.listKeys.all() : stmt.listKeysOf.all(profile);
      return rows.map(toKey);
    },

    async revokeKey(profile, name, at) {
      const raw = stmt.revokeKey.get(at, profile, name);
      return raw ? toKey(raw) : undefined;
    },

    async setKeyCaps(profile, name, caps) {
      const raw = stmt.setKeyCaps.get({
        set_daily: caps.daily_usd === undefined ? 0 : 1, daily_usd: caps.daily_usd ?? null,
        set_monthly: caps.monthly_usd === undefined ? 0 : 1, monthly_usd: caps.monthly_usd ?? null, profile, name,
      });
      return raw ? toKey(raw) : undefined;
    },

    async insertAudit(rows: AuditRow[]) {
      if (rows.length === 0) return;
      inTransaction(() => {
        for (const r of rows) stmt.insertAudit.run(r.ts, r.ip, r.prefix, r.outcome);
        rollUpAuditSqlite(db, rows);
      });
    },

    async listAudit(limit = DEFAULT_LIMIT) {
      return stmt.listAudit.all(limit).map((raw) => ({
        id: Number(raw.id),
        ts: raw.ts as string,
        ip: raw.ip as string,
        prefix: raw.prefix as string,
        outcome: raw.outcome as AuditRow['outcome'],
      }));
    },

    async insertRequests(rows: RequestRow[]) {
      if (rows.length === 0) return;
      inTransaction(() => {
        // Only rows actually inserted count toward the rollups (a replayed id is skipped)
        const inserted = rows.filter((row) => stmt.insertRequest.run(...requestParams(row)).changes > 0);
        rollUpRequestsSqlite(db, inserted);
      });
    },

    async listRequests(limit = DEFAULT_LIMIT) {
      return stmt.listRequests.all(limit).map(sqliteRequestRow);
    },

    async spendSince(profile, since) {
      const raw = stmt.spendSince.get(profile, since);
      return Number(raw?.spend ?? 0);
    },

    async close() {
      if (db.isOpen) db.close();
    },
  };
}
