// The benchmark's processes (bench/run.ts): the sim, the three floors and sluice on either store,
// each started in its own process on the project's Node, through the one registry of children,
// temporary directories and undo steps (children.ts), which removes them all on error and on a signal.

import type { ChildProcess } from 'node:child_process';
import { onCleanup, spawnNode, tempDir } from './children.ts';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { benchConfig, freePort } from './procs.ts';
import { serveNodeFlags } from './unit-flags.ts';
import { PG_ADMIN_URL, PROFILE_DIR, REDIS_URL, UPSTREAM_KEY, type StoreKind } from './settings.ts';

export { cleanup, wasInterrupted } from './children.ts';

// ---------------------------------------------------------------------------------------------
// Processes

export interface Server {
  name: string;
  proc: ChildProcess;
  pid: number;
  origin: string;
  output: () => string;
}

function start(args: string[], env: NodeJS.ProcessEnv): { proc: ChildProcess; output: () => string } {
  return spawnNode(args, env);
}

/** Resolves with the first match of `re` in the process's output; rejects if it exits first. */
function waitForOutput(name: string, proc: ChildProcess, output: () => string, re: RegExp, timeoutMs = 20_000): Promise<RegExpExecArray> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => fail(new Error(`${name} did not start within ${timeoutMs} ms:\n${output()}`)), timeoutMs);
    const check = () => {
      const m = re.exec(output());
      if (m) {
        done();
        resolve(m);
      }
    };
    // 'close' rather than 'exit': by then its output has been read to the end, so the error shows.
    const onExit = (code: number | null) => fail(new Error(`${name} exited (${code}) before it was ready:\n${output()}`));
    function done() {
      clearTimeout(timer);
      proc.stdout!.off('data', check);
      proc.stderr!.off('data', check);
      proc.off('close', onExit);
    }
    function fail(err: Error) {
      done();
      reject(err);
    }
    proc.stdout!.on('data', check);
    proc.stderr!.on('data', check);
    proc.once('close', onExit);
    check();
  });
}

/** sluice logs nothing at start-up at level warn: ask /health until it answers (or the process dies). */
async function waitForHealth(name: string, proc: ChildProcess, output: () => string, origin: string, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  let exited = false;
  proc.once('close', () => (exited = true));
  while (Date.now() < until) {
    if (exited) throw new Error(`${name} exited before it was ready:\n${output()}`);
    try {
      const res = await fetch(`${origin}/health`);
      await res.arrayBuffer();
      if (res.ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name} did not answer /health within ${timeoutMs} ms:\n${output()}`);
}

export async function stop(s: Server, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 20_000): Promise<number | null> {
  if (s.proc.exitCode !== null || s.proc.signalCode !== null) return s.proc.exitCode;
  const exited = once(s.proc, 'exit');
  s.proc.kill(signal);
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), timeoutMs);
  const [code] = await exited;
  clearTimeout(timer);
  return code as number | null;
}

/** A server under measurement, as the load generator reaches it. */
export interface Target {
  name: string;
  label: string;
  server: Server;
  /** Path prefix for the route: '/api' for the sim, '' for the floor and sluice. */
  prefix: string;
  auth: string;
  sluice: boolean;
  /** Requests sent to it (warm-ups and checks included), for the row count. */
  sent: number;
  store?: StoreKind;
  stopAndCount?: () => Promise<{ rows: number; ok: number }>;
  peakRss?: number;
  /** Where bench/eld-probe.ts writes the event-loop delays (sluice only). */
  eldFile?: string;
  /** Headers its requests carry beyond the scenario's (the capped sluice's session). */
  headers?: Record<string, string>;
}

// ---------------------------------------------------------------------------------------------
// Starting the three kinds of server

export async function startSim(): Promise<Server> {
  const port = await freePort();
  const { proc, output } = start(['cli/sluice.ts', 'simulate', '--listen', `127.0.0.1:${port}`], { ...process.env, SLUICE_LOG_LEVEL: 'warn' });
  const m = await waitForOutput('sim', proc, output, /listening on (http:\/\/\S+)/);
  return { name: 'sim', proc, pid: proc.pid!, origin: m[1]!, output };
}

/** Node's flags to write a CPU profile of the server `name` into PROFILE_DIR (none without --profile). */
function profileArgs(name: string): string[] {
  return PROFILE_DIR ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR, '--cpu-prof-name', `${name}-${Date.now()}.cpuprofile`] : [];
}

export async function startFloorUndici(sim: Server): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor-undici'), 'bench/floor-undici.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], process.env);
  const m = await waitForOutput('floor-undici', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor-undici', proc, pid: proc.pid!, origin: m[1]!, output };
}

/** The proxy core alone in front of the sim (`npm run bench` and the `--streams` burst). */
export async function startFloorHp3(sim: Pick<Server, 'origin'>): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor-hp3'), 'bench/floor-hp3.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], process.env);
  const m = await waitForOutput('floor-hp3', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor-hp3', proc, pid: proc.pid!, origin: m[1]!, output };
}

/** The http floor carries the event-loop probe too: its delays under the same load are the machine's, not sluice's. */
export const FLOOR_ELD_FILE = join(tempDir('eld-floor'), 'eld.jsonl');

export async function startFloor(sim: Server): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor'), '--import', './bench/eld-probe.ts', 'bench/floor-proxy.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], { ...process.env, BENCH_ELD_FILE: FLOOR_ELD_FILE });
  const m = await waitForOutput('floor', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor', proc, pid: proc.pid!, origin: m[1]!, output };
}

function sluiceEnv(dataDir: string, databaseUrl?: string): NodeJS.ProcessEnv {
  // The load generators stand in for a fleet behind a front proxy on this host: loopback is trusted
  // (its X-Forwarded-For believed, its connections free of the per-address cap), as docs/configuration.md says to set it.
  const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_DATA_DIR: dataDir, SLUICE_UPSTREAM_KEY_BENCHMARK: UPSTREAM_KEY, SLUICE_LOG_LEVEL: 'warn', SLUICE_TRUSTED_PROXIES: '127.0.0.1' };
  delete env.SLUICE_DATABASE_URL;
  delete env.SLUICE_REDIS_URL;
  delete env.SLUICE_CONFIG_DIR;
  // Traces only where asked for (startSluice's traceTo): none inherited from the shell.
  for (const k of Object.keys(env)) if (k.startsWith('OTEL_')) delete env[k];
  if (databaseUrl) {
    env.SLUICE_DATABASE_URL = databaseUrl;
    env.SLUICE_REDIS_URL = REDIS_URL;
  }
  return env;
}


async function createKey(configDir: string, env: NodeJS.ProcessEnv, caps: string[] = []): Promise<string> {
  const { proc, output } = start(['cli/sluice.ts', 'keys', 'create', '--profile', 'benchmark', '--name', 'bench', '--config', configDir, ...caps], env);
  let out = '';
  proc.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  const [code] = await once(proc, 'exit');
  if (code !== 0) throw new Error(`keys create exited ${code}:\n${output()}`);
  const key = out.trim();
  if (!/^sluice_benchmark_[A-Za-z0-9]{32}$/.test(key)) throw new Error('keys create printed no key');
  return key;
}

/** Scalar admin queries on the machine's Postgres (a fresh database for the bench, dropped after). */
async function pgAdmin(q: string): Promise<void> {
  const { default: postgres } = await import('postgres');
  const sql = postgres(PG_ADMIN_URL, { max: 1, connect_timeout: 5, onnotice: () => {} });
  try {
    await sql.unsafe(q);
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/**
 * sluice's budget counters live in Redis under the profile's name (`sluice:spend:…:benchmark:…`),
 * shared with anything else using that Redis: note what is there now and put it back at the end.
 */
async function guardRedisSpend(): Promise<void> {
  const { Redis } = await import('ioredis');
  const MATCH = 'sluice:spend:*:benchmark:*';
  const withRedis = async <T>(fn: (r: InstanceType<typeof Redis>) => Promise<T>): Promise<T> => {
    const r = new Redis(REDIS_URL, { maxRetriesPerRequest: 1, connectTimeout: 3000, lazyConnect: true });
    await r.connect();
    try {
      return await fn(r);
    } finally {
      r.disconnect();
    }
  };
  const scan = async (r: InstanceType<typeof Redis>) => {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await r.scan(cursor, 'MATCH', MATCH, 'COUNT', 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== '0');
    return keys;
  };
  const before = await withRedis(async (r) => {
    const saved = new Map<string, { value: string; pttl: number }>();
    for (const k of await scan(r)) {
      const [value, pttl] = await Promise.all([r.get(k), r.pttl(k)]);
      if (value !== null) saved.set(k, { value, pttl });
    }
    return saved;
  });
  onCleanup(() => withRedis(async (r) => {
    for (const k of await scan(r)) {
      const old = before.get(k);
      if (!old) await r.del(k);
      else if (old.pttl > 0) await r.set(k, old.value, 'PX', old.pttl);
      else await r.set(k, old.value);
    }
  }));
}

/** `--trace`: the OTLP sink the traced sluice exports to (bench/otlp-sink.ts); `count()` reads what it took. */
export async function startOtlpSink(): Promise<Server & { count(): Promise<{ exports: number; bytes: number }> }> {
  const { proc, output } = start(['bench/otlp-sink.ts'], process.env);
  const m = await waitForOutput('otlp-sink', proc, output, /listening (http:\/\/\S+)/);
  const origin = m[1]!;
  return { name: 'otlp-sink', proc, pid: proc.pid!, origin, output, count: async () => (await fetch(`${origin}/count`)).json() as Promise<{ exports: number; bytes: number }> };
}

/**
 * sluice on `store`; with `traceTo`, its traces on at ratio 1, exported over OTLP http/protobuf to
 * that sink; with `caps`, its key capped per day and month and its profile capping each session
 * (caps never reached: every request counts and reads the key's and the session's spend too).
 */
export async function startSluice(sim: Server, store: StoreKind, o: { traceTo?: Server; caps?: boolean } = {}): Promise<Target> {
  const { traceTo, caps } = o;
  const configDir = benchConfig(sim.origin, 'agent', caps ? 1_000_000 : undefined);
  const dataDir = tempDir(`data-${store}`);
  let databaseUrl: string | undefined;
  if (store === 'postgres') {
    const name = `sluice_bench_${randomBytes(6).toString('hex')}`;
    await pgAdmin(`CREATE DATABASE ${name}`);
    onCleanup(() => pgAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    const url = new URL(PG_ADMIN_URL);
    url.pathname = `/${name}`;
    databaseUrl = url.toString();
    await guardRedisSpend();
  }
  const env = sluiceEnv(dataDir, databaseUrl);
  const key = await createKey(configDir, env, caps ? ['--daily-usd', '1000000', '--monthly-usd', '10000000'] : []);
  const port = await freePort();
  const name = `sluice-${store}${traceTo ? '-traced' : ''}${caps ? '-capped' : ''}`;
  if (traceTo) {
    Object.assign(env, { OTEL_EXPORTER_OTLP_ENDPOINT: traceTo.origin, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '1', OTEL_SERVICE_NAME: 'sluice-bench' });
    // BENCH_OTEL_X=v reaches the traced sluice as OTEL_X=v (the batch processor's settings, say): the bench's own OTEL_* never do.
    for (const [k, v] of Object.entries(process.env)) if (k.startsWith('BENCH_OTEL_') && v !== undefined) env[k.slice('BENCH_'.length)] = v;
  }
  // The event-loop delay probe rides along as a preload: sluice itself is unchanged.
  const eldFile = join(tempDir(`eld-${store}`), 'eld.jsonl');
  env.BENCH_ELD_FILE = eldFile;
  const { proc, output } = start([...profileArgs(name), ...serveNodeFlags(), '--import', './bench/eld-probe.ts', 'cli/sluice.ts', 'serve', '--config', configDir, '--listen', `127.0.0.1:${port}`], env);
  const origin = `http://127.0.0.1:${port}`;
  await waitForHealth(name, proc, output, origin);
  const server: Server = { name, proc, pid: proc.pid!, origin, output };
  const target: Target = {
    name, label: `${store === 'sqlite' ? 'sluice (SQLite)' : 'sluice (Postgres+Redis)'}${traceTo ? ' (traced)' : ''}${caps ? ' (capped)' : ''}`, server, prefix: '', auth: key, sluice: true, sent: 0, store, eldFile,
    ...(caps ? { headers: { 'x-sluice-session': 'bench-session' } } : {}),
  };
  target.stopAndCount = async () => {
    // SIGTERM lets sluice finish open streams and flush every row before it exits.
    const code = await stop(server);
    if (code !== 0) throw new Error(`${name} exited ${code} on SIGTERM:\n${output()}`);
    if (store === 'sqlite') {
      const db = new DatabaseSync(join(dataDir, 'sluice.db'), { readOnly: true });
      try {
        const r = db.prepare("SELECT count(*) AS n, coalesce(sum(outcome = 'ok'), 0) AS ok FROM requests").get() as { n: number; ok: number };
        return { rows: Number(r.n), ok: Number(r.ok) };
      } finally {
        db.close();
      }
    }
    const { default: postgres } = await import('postgres');
    const sql = postgres(databaseUrl!, { max: 1, connect_timeout: 5, onnotice: () => {} });
    try {
      const [r] = await sql<{ n: number; ok: number }[]>`SELECT count(*)::int AS n, count(*) FILTER (WHERE outcome = 'ok')::int AS ok FROM requests`;
      return { rows: r!.n, ok: r!.ok };
    } finally {
      await sql.end({ timeout: 5 });
    }
  };
  return target;
}

