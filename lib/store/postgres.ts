// The Postgres Store, through a small porsager/postgres pool; for scale-out, where several gateways
// share one database. migrate() applies schema.sql's numbered steps (lib/store/migrations.ts);
// this file owns the queries and turns what the driver returns (Date, int8 strings) back into the Store's ISO strings and numbers.
// Never builds SQL by string concatenation of values, and never holds a full client key.

import { readFile } from 'node:fs/promises';
import postgres from 'postgres';
import { parseMigrations, pendingMigrations } from './migrations.ts';
import { iso, isoOrNull, numOrNull, type Raw } from './postgres-values.ts';
import { postgresUpstream } from './postgres-upstream.ts';
import { postgresBoard, rollUpAuditPostgres, rollUpRequestsPostgres } from './postgres-board.ts';
import { type AuditRow, KeyConflictError, type KeyRow, type NewKey, REQUEST_COLUMNS, type RequestRow, type Store } from './store.ts';

const SCHEMA_FILE = new URL('../../schema.sql', import.meta.url);
/** The partial unique index on active (profile, name) in schema.sql. */
const ACTIVE_NAME_INDEX = 'keys_active_profile_name';
/** Rows returned by listAudit/listRequests when the caller gives no limit. */
const DEFAULT_LIMIT = 100;


/**
 * A batch of rows goes as one JSON parameter that Postgres unpacks: a row's keys are its column
 * names, and `tools`, an array, lands as its JSON text. Binding 28 parameters per row cost the
 * event loop ~40 µs a row in the driver; JSON.stringify costs ~2. The parameter is typed text (as
 * json, the driver would encode the string once more). Columns not named keep their defaults.
 * One row comes back, not one per row: how many were inserted, and their ids only when that is
 * fewer than were sent (a replay), so the rollups skip the rows already there.
 */
const INSERT_REQUESTS = `WITH ins AS (INSERT INTO requests (${REQUEST_COLUMNS.join(', ')})
    SELECT ${REQUEST_COLUMNS.join(', ')} FROM json_populate_recordset(NULL::requests, $1::text::json)
    ON CONFLICT (id) DO NOTHING RETURNING id)
  SELECT count(*)::int AS n, CASE WHEN count(*) < $2 THEN array_agg(id) END AS ids FROM ins`;

/**
 * The batch as that JSON parameter. A NUL character, which Postgres text cannot hold, becomes
 * U+FFFD first: a client's `user` field with a NUL must not make its batch, and every row queued
 * behind it, unwritable (the rollups get the same safe rows). The check is one scan of the text.
 */
export function pgRows(rows: RequestRow[]): { rows: RequestRow[]; json: string } {
  const json = JSON.stringify(rows);
  if (!json.includes('\\u0000')) return { rows, json };
  const safe = rows.map(withoutNul);
  return { rows: safe, json: JSON.stringify(safe) };
}

function withoutNul(row: RequestRow): RequestRow {
  const out: Record<string, unknown> = { ...row, tools: row.tools.map((t) => t.replaceAll('\0', '\ufffd')) };
  for (const k in out) if (typeof out[k] === 'string') out[k] = (out[k] as string).replaceAll('\0', '\ufffd');
  return out as unknown as RequestRow;
}

function toKey(raw: Raw): KeyRow {
  return {
    id: Number(raw.id),
    key_hash: raw.key_hash as string,
    prefix: raw.prefix as string,
    profile: raw.profile as string,
    name: raw.name as string,
    ip_allow: raw.ip_allow as string,
    created_at: iso(raw.created_at),
    expires_at: isoOrNull(raw.expires_at),
    last_used_at: isoOrNull(raw.last_used_at),
    revoked_at: isoOrNull(raw.revoked_at),
    daily_usd: numOrNull(raw.daily_usd),
    monthly_usd: numOrNull(raw.monthly_usd),
  };
}

function toRequest(raw: Raw): RequestRow {
  return {
    id: raw.id as string,
    ts: iso(raw.ts),
    endpoint: raw.endpoint as RequestRow['endpoint'],
    profile: raw.profile as string,
    key_prefix: raw.key_prefix as string,
    end_user: raw.end_user as string | null,
    session: raw.session as string | null,
    run: raw.run as string | null,
    tier: raw.tier as string | null,
    requested_model: raw.requested_model as string | null,
    model: raw.model as string | null,
    stream: raw.stream as boolean,
    status: Number(raw.status),
    outcome: raw.outcome as RequestRow['outcome'],
    input_tokens: Number(raw.input_tokens),
    output_tokens: Number(raw.output_tokens),
    cache_read_tokens: Number(raw.cache_read_tokens),
    cache_write_tokens: Number(raw.cache_write_tokens),
    reasoning_tokens: Number(raw.reasoning_tokens),
    cost_usd: Number(raw.cost_usd),
    cost_source: raw.cost_source as RequestRow['cost_source'],
    provider: raw.provider as string | null,
    degradation: raw.degradation as RequestRow['degradation'],
    generation_id: raw.generation_id as string | null,
    ttfb_ms: numOrNull(raw.ttfb_ms),
    duration_ms: Number(raw.duration_ms),
    overhead_ms: numOrNull(raw.overhead_ms),
    tools: JSON.parse(raw.tools as string) as string[],
    key_id: numOrNull(raw.key_id),
  };
}

export function openPostgresStore(url: string): Store {
  // Small pool: the store's writes are batched off the request path, so few connections suffice.
  // onnotice is silenced because every IF NOT EXISTS on a second migrate() raises a NOTICE.
  // During an outage each queued query waits for a connection attempt of its own, and the
  // driver's default backoff grows to 20 s between attempts: a shutdown's last writes waited
  // minutes for connections that were refused at once. At most 1 s between attempts and 10 s to
  // connect: a store call fails fast, and its caller's fallback (the spool, a cached key) answers.
  const sql = postgres(url, { max: 4, onnotice: () => {}, connect_timeout: 10, backoff: (retries: number) => Math.min(0.05 * 2 ** retries, 1) });

  return {
    kind: 'postgres',
    ...postgresUpstream(sql),
    ...postgresBoard(sql),

    async migrate() {
      const steps = parseMigrations(await readFile(SCHEMA_FILE, 'utf8'));
      // Gateways and CLI commands starting together take turns under a transaction-scoped advisory
      // lock, and each re-reads what is applied once it holds the lock. No parameters in a step:
      // simple protocol, which is what lets a step's several statements run as one query.
      await sql.begin(async (tx) => {
        await tx.unsafe('SELECT pg_advisory_xact_lock(7301105)');
        await tx.unsafe('CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL)');
        const applied = (await tx.unsafe('SELECT version FROM schema_migrations')).map((r) => Number(r.version));
        for (const step of pendingMigrations(steps, applied)) {
          await tx.unsafe(step.sql);
          await tx`INSERT INTO schema_migrations (version, name, applied_at) VALUES (${step.version}, ${step.name}, now())`;
        }
      });
    },

    async createKey(key: NewKey) {
      try {
        const [raw] = await sql`
          INSERT INTO keys (key_hash, prefix, profile, name, ip_allow, created_at, expires_at, daily_usd, monthly_usd)
          VALUES (${key.key_hash}, ${key.prefix}, ${key.profile}, ${key.name}, ${key.ip_allow},
                  ${key.created_at}, ${key.expires_at ?? null}, ${key.daily_usd ?? null}, ${key.monthly_usd ?? null})
          RETURNING *`;
        return toKey(raw as Raw);
      } catch (err) {
        if (
          err instanceof postgres.PostgresError &&
          err.code === '23505' &&
          err.constraint_name === ACTIVE_NAME_INDEX
        ) {
          throw new KeyConflictError(key.profile, key.name);
        }
        throw err;
      }
    },

    async keyByHash(hash) {
      const [raw] = await sql`SELECT * FROM keys WHERE key_hash = ${hash}`;
      return raw ? toKey(raw) : undefined;
    },

    async touchKey(id, at) {
      await sql`UPDATE keys SET last_used_at = ${at} WHERE id = ${id}`;
    },

    async listKeys(profile) {
      const rows =
        profile === undefined
          ? await sql`SELECT * FROM keys ORDER BY id`
          : await sql`SELECT * FROM keys WHERE profile = ${profile} ORDER BY id`;
      return rows.map(toKey);
    },

    async revokeKey(profile, name, at) {
      const [raw] = await sql`
        UPDATE keys SET revoked_at = ${at}
        WHERE profile = ${profile} AND name = ${name} AND revoked_at IS NULL
        RETURNING *`;
      return raw ? toKey(raw) : undefined;
    },

    async setKeyCaps(profile, name, caps) {
      const [raw] = await sql`
        UPDATE keys SET
          daily_usd = CASE WHEN ${caps.daily_usd !== undefined} THEN ${caps.daily_usd ?? null}::double precision ELSE daily_usd END,
          monthly_usd = CASE WHEN ${caps.monthly_usd !== undefined} THEN ${caps.monthly_usd ?? null}::double precision ELSE monthly_usd END
        WHERE profile = ${profile} AND name = ${name} AND revoked_at IS NULL
        RETURNING *`;
      return raw ? toKey(raw) : undefined;
    },

    async insertAudit(rows: AuditRow[]) {
      if (rows.length === 0) return;
      const values = rows.map((r) => ({ ts: r.ts, ip: r.ip, prefix: r.prefix, outcome: r.outcome }));
      await sql.begin(async (tx) => {
        await tx`INSERT INTO auth_audit ${tx(values, 'ts', 'ip', 'prefix', 'outcome')}`;
        await rollUpAuditPostgres(tx, rows);
      });
    },

    async listAudit(limit = DEFAULT_LIMIT) {
      const rows = await sql`
        SELECT id, ts, ip, prefix, outcome FROM auth_audit ORDER BY ts DESC, id DESC LIMIT ${limit}`;
      return rows.map((raw) => ({
        id: Number(raw.id),
        ts: iso(raw.ts),
        ip: raw.ip as string,
        prefix: raw.prefix as string,
        outcome: raw.outcome as AuditRow['outcome'],
      }));
    },

    async insertRequests(rows: RequestRow[]) {
      if (rows.length === 0) return;
      const safe = pgRows(rows);
      // The rows land together with their rollups or not at all.
      await sql.begin(async (tx) => {
        const [{ n, ids }] = await tx.unsafe(INSERT_REQUESTS, [safe.json, safe.rows.length]);
        // Only rows actually inserted count toward the rollups (a replayed id is skipped)
        let inserted = safe.rows;
        if (n < safe.rows.length) {
          const fresh = new Set<string>(ids ?? []);
          inserted = safe.rows.filter((r) => fresh.has(r.id));
        }
        await rollUpRequestsPostgres(tx, inserted, sql);
      });
    },

    async listRequests(limit = DEFAULT_LIMIT) {
      const rows = await sql`SELECT * FROM requests ORDER BY ts DESC, id DESC LIMIT ${limit}`;
      return rows.map(toRequest);
    },

    async spendSince(profile, since) {
      const [raw] = await sql`
        SELECT COALESCE(SUM(cost_usd), 0) AS spend FROM requests
        WHERE profile = ${profile} AND ts >= ${since}`;
      return Number(raw?.spend ?? 0);
    },

    async close() {
      await sql.end({ timeout: 5 });
    },
  };
}
