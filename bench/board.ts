// `npm run bench:board [-- --rows 1000000,10000000 --store sqlite|postgres|both
// --shape spread|busy|both --order time|random --requests 20]`: seeds N request rows into a
// 0.3.0-shaped store (bulk SQL, several profiles, tiers, models, sessions, tools and runs; `spread`:
// over 35 days; `busy`: the same with a tenth of them in the last hour; `time`: written in time
// order, as a gateway writes them; `random`: in random time order, the worst case for a walk in
// time order), upgrades it and builds the rollups with the
// store's own backfill (the same aggregation the write path uses; its rows/s, slices alone, is
// reported), then times `GET /api/summary` (and `GET /` when the page is registered) on a real
// running gateway. Prints a Markdown table.
// Removes every temporary directory and database it made, on error too.

import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { Writable } from 'node:stream';
import postgres from 'postgres';
import { BACKFILL_SLICE } from '../lib/store/upkeep.ts';
import { loadConfig } from '../lib/config.ts';
import { MemoryCounters } from '../lib/counters/memory.ts';
import { createLogger } from '../lib/log.ts';
import { createGateway } from '../lib/server.ts';
import { readSettings } from '../lib/settings.ts';
import { parseMigrations } from '../lib/store/migrations.ts';
import { openStore } from '../lib/store/open.ts';

const PG_ADMIN_URL = process.env.BENCH_PG_URL ?? 'postgres://root@127.0.0.1:5432/postgres';
const ROOT = new URL('..', import.meta.url);

function option(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}
const ROWS = (option('rows') ?? '1000000').split(',').map((s) => Number(s.trim()));
const STORES = (option('store') ?? 'both') === 'both' ? ['sqlite', 'postgres'] : [option('store')!];
const REQUESTS = Number(option('requests') ?? 20);
type Shape = 'spread' | 'busy';
const SHAPES: Shape[] = (option('shape') ?? 'both') === 'both' ? ['spread', 'busy'] : [option('shape') as Shape];
type Order = 'time' | 'random';
const ORDER = (option('order') ?? 'time') as Order;
if (ROWS.some((n) => !Number.isInteger(n) || n < 1) || STORES.some((s) => s !== 'sqlite' && s !== 'postgres') || !(REQUESTS >= 1)
  || SHAPES.some((s) => s !== 'spread' && s !== 'busy') || (ORDER !== 'time' && ORDER !== 'random')) {
  console.error('usage: npm run bench:board -- [--rows N[,N…]] [--store sqlite|postgres|both] [--shape spread|busy|both] [--order time|random] [--requests K]');
  process.exit(2);
}

const DAY_MS = 86_400_000;
const COLUMNS = 'id, ts, endpoint, profile, key_prefix, end_user, session, run, tier, requested_model, model, stream, status, outcome, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, cost_usd, cost_source, provider, degradation, generation_id, ttfb_ms, duration_ms, overhead_ms, tools';

/** One generated row's columns from two random integers r and q (same expressions on both stores). */
function select(mod: (a: string, b: number) => string, cat: (...p: string[]) => string, tsExpr: string): string {
  const pick = (expr: string, values: string[]) => `CASE ${expr} ${values.map((v, i) => `WHEN ${i} THEN ${v}`).join(' ')} END`;
  const tier = pick(mod('(r / 20)', 10), ["'fast'", "'fast'", "'fast'", "'fast'", "'agent'", "'agent'", "'agent'", "'reasoning'", "'auto-decision'", "'fast'"]);
  return `${cat("'bench-'", 'i')}, ${tsExpr}, ${pick(mod('(r / 200)', 3), ["'chat'", "'messages'", "'chat'"])},
    ${pick(mod('r', 5), ["'dev'", "'assistant'", "'car'", "'ago'", "'benchmark'"])}, 'sluice_dev_…bnch',
    CASE WHEN ${mod('(r / 400)', 4)} = 0 THEN NULL ELSE ${cat("'user-'", mod('r', 20))} END,
    CASE WHEN ${mod('(r / 1000)', 3)} = 0 THEN NULL ELSE ${cat("'cc:s'", mod('r', 20), "'-'", `(${mod('q', 35 * DAY_MS)} / 21600000)`)} END,
    CASE WHEN ${mod('q', 40)} = 0 THEN ${cat("'run-'", mod('(q / 40)', 30))} ELSE NULL END,
    ${tier},
    CASE WHEN ${mod('(q / 37)', 10)} = 0 THEN 'sluice/auto' ELSE ${cat("'sluice/'", tier)} END,
    ${pick(mod('(r / 20)', 10), ["'google/gemini-2.5-flash'", "'google/gemini-2.5-flash'", "'google/gemini-2.5-flash'", "'openai/gpt-4.1-mini'", "'anthropic/claude-sonnet-4.5'", "'anthropic/claude-sonnet-4.5'", "'anthropic/claude-sonnet-4.5'", "'google/gemini-2.5-pro'", "'google/gemini-2.5-flash-lite'", "'google/gemini-2.5-flash'"])},
    STREAMBOOL,
    CASE WHEN ${mod('q', 100)} < 2 THEN 502 WHEN ${mod('q', 100)} < 3 THEN 429 ELSE 200 END,
    CASE WHEN ${mod('q', 100)} < 3 THEN 'upstream_error' ELSE 'ok' END,
    ${mod('(q / 100)', 5000)}, ${mod('(q / 7)', 1000)}, ${mod('(q / 11)', 4000)}, ${mod('(q / 13)', 200)}, ${mod('(q / 17)', 100)},
    ${mod('(q / 19)', 10000)} * 3.0 / 1000000, 'upstream',
    ${pick(mod('(r / 20)', 10), ["'Google'", "'Google'", "'Google'", "'OpenAI'", "'Anthropic'", "'Anthropic'", "'Amazon Bedrock'", "'Google'", "'Google'", "'Google Vertex'"])},
    CASE WHEN ${mod('(q / 41)', 50)} = 0 THEN 'fast-only' WHEN ${mod('(q / 41)', 50)} = 1 THEN 'max-tokens' ELSE 'none' END,
    NULL, 100 + ${mod('(q / 23)', 3000)}, 100 + ${mod('(q / 23)', 3000)} + ${mod('(q / 29)', 20000)}, ${mod('(q / 31)', 300)} / 100.0,
    CASE WHEN ${mod('q', 7)} = 0 THEN '["Bash","Read"]' WHEN ${mod('q', 7)} = 1 THEN '["get_weather"]' ELSE '[]' END`;
}

/**
 * How far back row i of n lies (ms): spread over 35 days, or (busy) a tenth of the rows in the last
 * hour. In time order row i is older than row i + 1, as a gateway appends them; in random order
 * each row's time is drawn at random (every tenth row in the last hour when busy).
 */
function agoExpr(shape: Shape, mod: (a: string, b: number) => string, n: number, order: Order): string {
  const SPAN = 35 * DAY_MS;
  const HOUR = 3_600_000;
  if (order === 'random') {
    const spread = mod('q', SPAN);
    return shape === 'spread' ? spread : `CASE WHEN ${mod('i', 10)} = 0 THEN ${mod('q', HOUR)} ELSE ${spread} END`;
  }
  if (shape === 'spread') return `CAST(${n} - i AS BIGINT) * ${SPAN} / ${n}`;
  const tenth = Math.max(1, Math.floor(n / 10));
  const older = n - tenth;
  return `CASE WHEN i > ${older} THEN CAST(${n} - i AS BIGINT) * ${HOUR} / ${tenth} ELSE ${HOUR} + CAST(${older} - i AS BIGINT) * ${SPAN - HOUR} / ${Math.max(1, older)} END`;
}

export async function seedSqlite(dir: string, n: number, now: number, shape: Shape = 'spread', order: Order = 'random'): Promise<void> {
  const db = new DatabaseSync(join(dir, 'sluice.db'));
  db.exec('PRAGMA journal_mode = WAL');
  db.exec(parseMigrations(readFileSync(new URL('lib/store/sqlite-schema.sql', ROOT), 'utf8'))[0].sql);
  const mod = (a: string, b: number) => `(${a} % ${b})`;
  const cat = (...p: string[]) => p.join(' || ');
  const ts = `strftime('%Y-%m-%dT%H:%M:%fZ', (${now} - ${agoExpr(shape, mod, n, order)}) / 1000.0, 'unixepoch')`;
  const chunk = 500_000;
  for (let from = 1; from <= n; from += chunk) {
    const to = Math.min(n, from + chunk - 1);
    db.exec(`INSERT INTO requests (${COLUMNS})
      WITH RECURSIVE c(i) AS (SELECT ${from} UNION ALL SELECT i + 1 FROM c WHERE i < ${to}),
      g AS MATERIALIZED (SELECT i, abs(random() % 1000000000000) AS r, abs(random() % 1000000000000) AS q FROM c)
      SELECT ${select(mod, cat, ts).replace('STREAMBOOL', '(q % 2)')} FROM g`);
  }
  db.close();
}

export async function seedPostgres(url: string, n: number, now: number, shape: Shape = 'spread', order: Order = 'random'): Promise<void> {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(parseMigrations(readFileSync(new URL('schema.sql', ROOT), 'utf8'))[0].sql);
    const mod = (a: string, b: number) => `(${a} % ${b})`;
    const cat = (...p: string[]) => `(${p.join(' || ')})`;
    const ts = `to_timestamp((${now} - ${agoExpr(shape, mod, n, order)})::float8 / 1000)`;
    const chunk = 1_000_000;
    for (let from = 1; from <= n; from += chunk) {
      const to = Math.min(n, from + chunk - 1);
      await sql.unsafe(`INSERT INTO requests (${COLUMNS})
        SELECT ${select(mod, cat, ts).replace('STREAMBOOL', '(q % 2) = 1')}
        FROM (SELECT i, (random() * 1e12)::bigint AS r, (random() * 1e12)::bigint AS q FROM generate_series(${from}, ${to}) i) g`);
    }
    await sql.unsafe('ANALYZE requests');
  } finally {
    await sql.end({ timeout: 5 });
  }
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil(p * xs.length) - 1)];

async function time(url: string, k: number): Promise<{ p50: number; max: number; bytes: number }> {
  const runs: number[] = [];
  let bytes = 0;
  await (await fetch(url)).arrayBuffer(); // warm-up
  for (let i = 0; i < k; i++) {
    const t0 = performance.now();
    const res = await fetch(url);
    const body = await res.arrayBuffer();
    runs.push(performance.now() - t0);
    if (res.status !== 200) throw new Error(`${url} answered ${res.status}`);
    bytes = body.byteLength;
  }
  return { p50: pct(runs, 0.5), max: Math.max(...runs), bytes };
}

async function run(kind: string, n: number, shape: Shape): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-bench-board-'));
  const dbName = `sluice_bench_${process.pid}_${n}`;
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${dbName}`;
  try {
    const now = Date.now();
    let t0 = performance.now();
    if (kind === 'postgres') {
      await admin.unsafe(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
      await admin.unsafe(`CREATE DATABASE ${dbName}`);
      await seedPostgres(url.toString(), n, now, shape, ORDER);
    } else await seedSqlite(dir, n, now, shape, ORDER);
    const seedS = (performance.now() - t0) / 1000;
    // A running server checkpoints as it writes; the seed's bulk WAL is checkpointed once here so
    // the timings below measure the upgrade and the board, not a one-time fsync of gigabytes.
    if (kind === 'sqlite') {
      const db = new DatabaseSync(join(dir, 'sluice.db'));
      db.exec('PRAGMA wal_checkpoint(TRUNCATE)');
      db.close();
    }
    const store = await openStore(kind === 'postgres' ? { databaseUrl: url.toString(), dataDir: dir } : { dataDir: dir });
    // The backfill alone, slice by slice as the server runs it (the migrations are not counted).
    t0 = performance.now();
    let done = false;
    let backfilled = 0;
    while (!done) {
      const r = await store.backfillRollups(BACKFILL_SLICE);
      backfilled += r.rows;
      done = r.done;
    }
    const rollupS = (performance.now() - t0) / 1000;
    const counters = new MemoryCounters();
    const log = createLogger('error', new Writable({ write: (_c, _e, cb) => cb() }));
    const gateway = await createGateway({ config: loadConfig(new URL('config', ROOT).pathname), store, counters, log, settings: readSettings({}), dataDir: dir, loadCatalog: false });
    const addr = await gateway.listen('127.0.0.1', 0);
    try {
      const base = `http://127.0.0.1:${addr.port}`;
      const summary = await time(`${base}/api/summary`, REQUESTS);
      const page = (await fetch(`${base}/`)).status === 200 ? await time(`${base}/`, REQUESTS) : undefined;
      const f = (x: number) => x.toFixed(1);
      const rate = Math.round(backfilled / rollupS).toLocaleString('en');
      return `| ${kind} | ${n.toLocaleString('en')} | ${shape} | ${f(seedS)} s | ${f(rollupS)} s (${rate} rows/s) | ${f(summary.p50)} ms | ${f(summary.max)} ms | ${page ? `${f(page.p50)} ms | ${f(page.max)} ms` : '– | –'} |`;
    } finally {
      await gateway.close(1000);
      await counters.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
    if (kind === 'postgres') await admin.unsafe(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`).catch(() => {});
    await admin.end({ timeout: 5 });
  }
}

if (process.argv[1]?.endsWith('board.ts')) {
  const written = ORDER === 'time' ? 'rows written in time order, as a gateway appends them' : 'rows written in random time order (the worst case for the backfill\'s walk in time order)';
  console.log(`${REQUESTS} sequential requests each, after one warm-up; spread: rows over 35 days; busy: the same with a tenth of them in the last hour; ${written}.\n`);
  console.log('| store | request rows | shape | seed | rollups built (backfill) | /api/summary p50 | max | / p50 | max |');
  console.log('|---|---:|---|---:|---:|---:|---:|---:|---:|');
  for (const n of ROWS) for (const shape of SHAPES) for (const kind of STORES) console.log(await run(kind, n, shape));
}
