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
SELECT 1; -- placeholder until ring 1 lands: replace, do not append

-- migration 3: board rollups
SELECT 1; -- placeholder until the board lands: replace, do not append
