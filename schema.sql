-- sluice's Postgres schema (CONTRACT §7), in numbered steps applied by lib/store/postgres.ts migrate()
-- (see lib/store/migrations.ts): each database records its applied steps in schema_migrations.
-- Never edit an applied step; append a new one. lib/store/sqlite-schema.sql mirrors these steps for
-- the embedded store, step for step and column for column: change both together.

-- migration 1: keys, auth_audit, requests (the 0.3.0 schema)
CREATE TABLE IF NOT EXISTS keys (
  id           integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  key_hash     text        NOT NULL,
  prefix       text        NOT NULL,
  profile      text        NOT NULL,
  name         text        NOT NULL,
  ip_allow     text        NOT NULL,
  created_at   timestamptz NOT NULL,
  expires_at   timestamptz,
  last_used_at timestamptz,
  revoked_at   timestamptz
);

CREATE UNIQUE INDEX IF NOT EXISTS keys_key_hash ON keys (key_hash);
-- At most one active key per (profile, name); postgres.ts maps a violation of this index to KeyConflictError.
CREATE UNIQUE INDEX IF NOT EXISTS keys_active_profile_name ON keys (profile, name) WHERE revoked_at IS NULL;

CREATE TABLE IF NOT EXISTS auth_audit (
  id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  ts      timestamptz NOT NULL,
  ip      text        NOT NULL,
  prefix  text        NOT NULL,
  outcome text        NOT NULL
);

CREATE INDEX IF NOT EXISTS auth_audit_ts ON auth_audit (ts);

CREATE TABLE IF NOT EXISTS requests (
  id                 text PRIMARY KEY,
  ts                 timestamptz      NOT NULL,
  endpoint           text             NOT NULL,
  profile            text             NOT NULL,
  key_prefix         text             NOT NULL,
  end_user           text,
  session            text,
  run                text,
  tier               text,
  requested_model    text,
  model              text,
  stream             boolean          NOT NULL,
  status             integer          NOT NULL,
  outcome            text             NOT NULL,
  input_tokens       bigint           NOT NULL,
  output_tokens      bigint           NOT NULL,
  cache_read_tokens  bigint           NOT NULL,
  cache_write_tokens bigint           NOT NULL,
  reasoning_tokens   bigint           NOT NULL,
  cost_usd           double precision NOT NULL,
  cost_source        text             NOT NULL,
  provider           text,
  degradation        text             NOT NULL,
  generation_id      text,
  ttfb_ms            integer,
  duration_ms        integer          NOT NULL,
  overhead_ms        double precision,
  tools              text             NOT NULL DEFAULT '[]'
);

CREATE INDEX IF NOT EXISTS requests_profile_ts ON requests (profile, ts);
CREATE INDEX IF NOT EXISTS requests_ts ON requests (ts);

-- migration 2: upstream keys, usage snapshots, cost reconciliation
SELECT 1; -- placeholder until ring 1 lands: replace, do not append

-- migration 3: board rollups
SELECT 1; -- placeholder until the board lands: replace, do not append
