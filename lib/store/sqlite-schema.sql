-- sluice's embedded SQLite schema, in numbered steps (lib/store/migrations.ts). It mirrors schema.sql
-- (Postgres) step for step and column for column: change both together, and only by appending a step.
-- STRICT tables make SQLite refuse a value of the wrong type instead of storing it silently.

-- migration 1: keys, auth_audit, requests (the 0.3.0 schema)
CREATE TABLE IF NOT EXISTS keys (
  id           INTEGER PRIMARY KEY AUTOINCREMENT,
  key_hash     TEXT NOT NULL,
  prefix       TEXT NOT NULL,
  profile      TEXT NOT NULL,
  name         TEXT NOT NULL,
  ip_allow     TEXT NOT NULL,
  created_at   TEXT NOT NULL,
  expires_at   TEXT,
  last_used_at TEXT,
  revoked_at   TEXT
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS keys_key_hash ON keys (key_hash);
CREATE UNIQUE INDEX IF NOT EXISTS keys_active_profile_name ON keys (profile, name) WHERE revoked_at IS NULL;

CREATE TABLE IF NOT EXISTS auth_audit (
  id      INTEGER PRIMARY KEY AUTOINCREMENT,
  ts      TEXT NOT NULL,
  ip      TEXT NOT NULL,
  prefix  TEXT NOT NULL,
  outcome TEXT NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS auth_audit_ts ON auth_audit (ts);

CREATE TABLE IF NOT EXISTS requests (
  id                 TEXT PRIMARY KEY,
  ts                 TEXT    NOT NULL,
  endpoint           TEXT    NOT NULL,
  profile            TEXT    NOT NULL,
  key_prefix         TEXT    NOT NULL,
  end_user           TEXT,
  session            TEXT,
  run                TEXT,
  tier               TEXT,
  requested_model    TEXT,
  model              TEXT,
  stream             INTEGER NOT NULL,
  status             INTEGER NOT NULL,
  outcome            TEXT    NOT NULL,
  input_tokens       INTEGER NOT NULL,
  output_tokens      INTEGER NOT NULL,
  cache_read_tokens  INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL,
  reasoning_tokens   INTEGER NOT NULL,
  cost_usd           REAL    NOT NULL,
  cost_source        TEXT    NOT NULL,
  provider           TEXT,
  degradation        TEXT    NOT NULL,
  generation_id      TEXT,
  ttfb_ms            INTEGER,
  duration_ms        INTEGER NOT NULL,
  overhead_ms        REAL,
  tools              TEXT    NOT NULL DEFAULT '[]'
) STRICT;
CREATE INDEX IF NOT EXISTS requests_profile_ts ON requests (profile, ts);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);

-- migration 2: upstream keys, usage snapshots, cost reconciliation
CREATE TABLE IF NOT EXISTS upstream_keys (
  profile     TEXT PRIMARY KEY,
  hash        TEXT NOT NULL,
  name        TEXT NOT NULL,
  label       TEXT,
  limit_usd   REAL,
  limit_reset TEXT,
  created_at  TEXT NOT NULL,
  updated_at  TEXT NOT NULL
) STRICT;

CREATE TABLE IF NOT EXISTS usage_snapshots (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  profile         TEXT    NOT NULL,
  ts              TEXT    NOT NULL,
  day             TEXT    NOT NULL,
  label           TEXT,
  limit_usd       REAL,
  limit_remaining REAL,
  limit_reset     TEXT,
  usage           REAL    NOT NULL,
  usage_daily     REAL    NOT NULL,
  usage_weekly    REAL    NOT NULL,
  usage_monthly   REAL    NOT NULL,
  ledger_day_usd  REAL    NOT NULL,
  drift_usd       REAL    NOT NULL,
  drifted         INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS usage_snapshots_profile_ts ON usage_snapshots (profile, ts);

-- Reconciliation state of a request row (pending = estimate + generation id + not abandoned).
ALTER TABLE requests ADD COLUMN reconcile_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN reconcile_next_at TEXT;
ALTER TABLE requests ADD COLUMN reconcile_abandoned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN reconciled_at TEXT;
-- On ts, and named by the queries (INDEXED BY): without statistics SQLite would pick requests_ts
-- for `ts < ?` / ORDER BY ts and scan every row (32 s at 10 M rows).
CREATE INDEX IF NOT EXISTS requests_reconcile_pending ON requests (ts)
  WHERE cost_source = 'estimate' AND generation_id IS NOT NULL AND reconcile_abandoned = 0;
CREATE INDEX IF NOT EXISTS requests_reconciled ON requests (reconciled_at) WHERE reconciled_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS requests_reconcile_abandoned ON requests (ts) WHERE reconcile_abandoned = 1;

-- migration 3: board rollups
-- One row per (grain, dimension, bucket, key): sums of the requests (or audit rows) it covers.
-- grain 'h' = UTC hour ('YYYY-MM-DDTHH'), 'd' = UTC day, 'a' = all time (bucket ''); lib/store/rollups.ts.
CREATE TABLE IF NOT EXISTS board_rollup (
  grain              TEXT    NOT NULL,
  dim                TEXT    NOT NULL,
  bucket             TEXT    NOT NULL,
  key                TEXT    NOT NULL,
  requests           INTEGER NOT NULL,
  errors             INTEGER NOT NULL,
  input_tokens       INTEGER NOT NULL,
  output_tokens      INTEGER NOT NULL,
  cache_read_tokens  INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL,
  reasoning_tokens   INTEGER NOT NULL,
  cost_usd           REAL    NOT NULL,
  first_ts           TEXT    NOT NULL,
  last_ts            TEXT    NOT NULL,
  note               TEXT    NOT NULL,
  PRIMARY KEY (grain, dim, bucket, key)
) STRICT, WITHOUT ROWID;
-- Log-scale latency histograms (metric o/t/d: overhead, ttfb, duration) of the same rows.
CREATE TABLE IF NOT EXISTS board_hist (
  grain  TEXT    NOT NULL,
  dim    TEXT    NOT NULL,
  bucket TEXT    NOT NULL,
  key    TEXT    NOT NULL,
  metric TEXT    NOT NULL,
  idx    INTEGER NOT NULL,
  n      INTEGER NOT NULL,
  PRIMARY KEY (grain, dim, bucket, key, metric, idx)
) STRICT, WITHOUT ROWID;
-- Backfill marks: rows present before this step (a 0.3.0 store) are rolled up at start-up, in
-- slices, from the cursor up to the mark taken here; rows written later are rolled up as written.
CREATE TABLE IF NOT EXISTS board_state (
  name  TEXT PRIMARY KEY,
  value TEXT NOT NULL
) STRICT;
INSERT OR IGNORE INTO board_state (name, value) SELECT 'requests_upto', CAST(COALESCE(MAX(rowid), 0) AS TEXT) FROM requests;
INSERT OR IGNORE INTO board_state (name, value) VALUES ('requests_cursor', '0');
INSERT OR IGNORE INTO board_state (name, value) SELECT 'audit_upto', CAST(COALESCE(MAX(id), 0) AS TEXT) FROM auth_audit;
INSERT OR IGNORE INTO board_state (name, value) VALUES ('audit_cursor', '0');

-- migration 4: the board's rollups by key
-- Nothing on SQLite: its planner reads the session anomaly's `key IN (subquery)` once into a
-- temporary index whatever it knows of the table, and a second index on board_rollup halved the
-- backfill's rate (schema.sql's step 4 gives Postgres the index its planner needs).
SELECT 1;

-- migration 5: no index of the rollups by key
-- Nothing on SQLite, which never had it (schema.sql's step 5 drops it on Postgres).
SELECT 1;

-- migration 6: key caps, and the key of each request row
-- A key's own caps in USD per UTC day and month (NULL: none). A row's key by id: the display
-- prefix alone can be shared by two keys. Rows written before this step have none. A key's spend
-- is read from the daily rollups (dim 'key'), so no index on requests is needed for it.
ALTER TABLE keys ADD COLUMN daily_usd REAL;
ALTER TABLE keys ADD COLUMN monthly_usd REAL;
ALTER TABLE requests ADD COLUMN key_id INTEGER;
