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
CREATE TABLE IF NOT EXISTS upstream_keys (
  profile     text PRIMARY KEY,
  hash        text        NOT NULL,
  name        text        NOT NULL,
  label       text,
  limit_usd   double precision,
  limit_reset text,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL
);

CREATE TABLE IF NOT EXISTS usage_snapshots (
  id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  profile         text             NOT NULL,
  ts              timestamptz      NOT NULL,
  day             text             NOT NULL,
  label           text,
  limit_usd       double precision,
  limit_remaining double precision,
  limit_reset     text,
  usage           double precision NOT NULL,
  usage_daily     double precision NOT NULL,
  usage_weekly    double precision NOT NULL,
  usage_monthly   double precision NOT NULL,
  ledger_day_usd  double precision NOT NULL,
  drift_usd       double precision NOT NULL,
  drifted         boolean          NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_snapshots_profile_ts ON usage_snapshots (profile, ts);

-- Reconciliation state of a request row (pending = estimate + generation id + not abandoned).
-- Constant defaults: Postgres adds these columns without rewriting a table full of 0.3.0 rows.
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reconcile_attempts integer NOT NULL DEFAULT 0;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reconcile_next_at timestamptz;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reconcile_abandoned boolean NOT NULL DEFAULT false;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS reconciled_at timestamptz;
-- On ts: the loop reads pending rows oldest first and abandons those before a time; a partial index
-- on ts serves both without touching the millions of settled rows.
CREATE INDEX IF NOT EXISTS requests_reconcile_pending ON requests (ts)
  WHERE cost_source = 'estimate' AND generation_id IS NOT NULL AND NOT reconcile_abandoned;
CREATE INDEX IF NOT EXISTS requests_reconciled ON requests (reconciled_at) WHERE reconciled_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS requests_reconcile_abandoned ON requests (ts) WHERE reconcile_abandoned;

-- migration 3: board rollups
-- One row per (grain, dimension, bucket, key): sums of the requests (or audit rows) it covers.
-- grain 'h' = UTC hour ('YYYY-MM-DDTHH'), 'd' = UTC day, 'a' = all time (bucket ''); lib/store/rollups.ts.
CREATE TABLE IF NOT EXISTS board_rollup (
  grain              text             COLLATE "C" NOT NULL,
  dim                text             COLLATE "C" NOT NULL,
  bucket             text             COLLATE "C" NOT NULL,
  key                text             COLLATE "C" NOT NULL,
  requests           bigint           NOT NULL,
  errors             bigint           NOT NULL,
  input_tokens       bigint           NOT NULL,
  output_tokens      bigint           NOT NULL,
  cache_read_tokens  bigint           NOT NULL,
  cache_write_tokens bigint           NOT NULL,
  reasoning_tokens   bigint           NOT NULL,
  cost_usd           double precision NOT NULL,
  first_ts           text             COLLATE "C" NOT NULL,
  last_ts            text             COLLATE "C" NOT NULL,
  note               text             NOT NULL,
  PRIMARY KEY (grain, dim, bucket, key)
);
-- Log-scale latency histograms (metric o/t/d: overhead, ttfb, duration) of the same rows.
CREATE TABLE IF NOT EXISTS board_hist (
  grain  text    COLLATE "C" NOT NULL,
  dim    text    COLLATE "C" NOT NULL,
  bucket text    COLLATE "C" NOT NULL,
  key    text    COLLATE "C" NOT NULL,
  metric text    NOT NULL,
  idx    integer NOT NULL,
  n      bigint  NOT NULL,
  PRIMARY KEY (grain, dim, bucket, key, metric, idx)
);
-- Backfill marks: rows present before this step (a 0.3.0 store) are rolled up at start-up, in
-- slices ordered by (ts, id), from the cursor up to the mark taken here; later rows as written.
CREATE TABLE IF NOT EXISTS board_state (
  name  text PRIMARY KEY,
  value text NOT NULL
);
INSERT INTO board_state (name, value)
  SELECT 'requests_upto', COALESCE((SELECT json_build_array(ts, id)::text FROM requests ORDER BY ts DESC, id DESC LIMIT 1), '')
  ON CONFLICT (name) DO NOTHING;
INSERT INTO board_state (name, value) VALUES ('requests_cursor', '') ON CONFLICT (name) DO NOTHING;
INSERT INTO board_state (name, value) SELECT 'audit_upto', COALESCE(MAX(id), 0)::text FROM auth_audit ON CONFLICT (name) DO NOTHING;
INSERT INTO board_state (name, value) VALUES ('audit_cursor', '0') ON CONFLICT (name) DO NOTHING;

-- migration 4: the board's rollups by key
-- A key's buckets side by side: the session anomaly reads today's hours of the sessions active
-- this hour, and with the key last in the primary key that read walked the day's session rows
-- once per active session whenever the planner chose a nested loop (seconds at 1 M requests).
CREATE INDEX IF NOT EXISTS board_rollup_key ON board_rollup (grain, dim, key, bucket);

-- migration 5: no index of the rollups by key
-- The session anomaly now sums today's session hours by key in one range of the primary key
-- (lib/store/postgres-board.ts), so step 4's index served no read, and keeping it up cost the
-- backfill a fifth of its rate (31,886 against 39,760 rows/s at 1 M rows).
DROP INDEX IF EXISTS board_rollup_key;

-- migration 6: key caps, and the key of each request row
-- A key's own caps in USD per UTC day and month (NULL: none). A row's key by id: the display
-- prefix alone can be shared by two keys. Rows written before this step have none. A key's spend
-- is read from the daily rollups (dim 'key'), so no index on requests is needed for it.
ALTER TABLE keys ADD COLUMN IF NOT EXISTS daily_usd double precision;
ALTER TABLE keys ADD COLUMN IF NOT EXISTS monthly_usd double precision;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS key_id integer;
