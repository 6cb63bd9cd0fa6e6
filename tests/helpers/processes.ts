// Real `sluice serve` child processes on shared backings, for scale-out and fault tests: the
// simulated router in this process, one fresh Postgres database and one Redis logical database
// (claimed for this run, flushed at setup and teardown), each reached through a relay the test can
// cut. Every child's stdout JSON lines are kept parsed; tests wait on lines and HTTP answers,
// never on sleeps. Every process is killed at teardown (SIGKILL if SIGTERM does not end it).

import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import { Redis } from 'ioredis';
import type { Test } from 'tap';
import { createKey } from './keys.ts';
import { collectLogLines, type LogLine } from './log-lines.ts';
import type { Config } from '../../lib/config.ts';
import type { SimulatedRouter } from '../../lib/sim/index.ts';
import { openStore } from '../../lib/store/open.ts';
import type { Store } from '../../lib/store/store.ts';
import { startSimWithConfig, UPSTREAM_KEYS } from './gateway.ts';
import { freshPostgresUrl } from './postgres.ts';
import { startRelay, type Relay } from './relay.ts';

const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'cli/sluice.ts');

export interface CliRun { code: number | null; stdout: string; stderr: string }

/** Runs `sluice ARGS` to its exit in a child process, with exactly `env`; collects both streams. */
export function runCli(args: string[], env: NodeJS.ProcessEnv): Promise<CliRun> {
  return runProgram(process.execPath, [CLI, ...args], { cwd: ROOT, env });
}

/**
 * Runs a program (a real client: claude, codex) to its exit with exactly `env`, collecting both
 * streams; with `t`, the child is killed at teardown should the test end first.
 */
export async function runProgram(command: string, args: string[], o: { cwd: string; env: NodeJS.ProcessEnv; t?: Test }): Promise<CliRun> {
  const child = spawn(command, args, { cwd: o.cwd, env: o.env, stdio: ['ignore', 'pipe', 'pipe'] });
  o.t?.teardown(() => void child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  const [code] = (await once(child, 'exit')) as [number | null];
  return { code, stdout, stderr };
}
const REDIS = { host: '127.0.0.1', port: 6379 };

export type { LogLine };

export interface Health {
  status: 'ok' | 'degraded';
  store: { kind: string; rows_written: number; rows_pending: number };
  counters: { kind: string; degraded: boolean };
  [k: string]: unknown;
}

export interface GatewayProcess {
  url: string;
  pid: number;
  dataDir: string;
  /** Every stdout line, parsed (non-JSON lines are kept as { raw }). */
  lines: LogLine[];
  stderr(): string;
  /** The first line (from index `from`) matching `pred`, waiting for it when not there yet. */
  waitForLine(pred: (l: LogLine) => boolean, opts?: { from?: number; timeoutMs?: number }): Promise<LogLine>;
  /** The board's `GET /api/health` (the health details), parsed. */
  health(): Promise<Health>;
  /** Resolves with how the process ended. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** Sends `signal` (default SIGTERM) and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface Backings {
  sim: SimulatedRouter;
  config: Config;
  configDir: string;
  /** Relays the children reach Postgres and Redis through. */
  pgRelay: Relay;
  redisRelay: Relay;
  /** The test's own database URL (direct, unaffected by the relay). */
  databaseUrl: string;
  /** The same database through the Postgres relay (what the children use). */
  relayedDatabaseUrl: string;
  /** The claimed Redis logical database through the Redis relay (what the children use). */
  redisUrl: string;
  redisDb: number;
  /** A direct client on the claimed Redis database. */
  redis: Redis;
  /** A direct Store on the shared database. */
  store: Store;
  /** Mints a key through the code of `sluice keys create`. */
  key(profile?: string, name?: string): Promise<string>;
  /** Starts `sluice serve` on the shared backings and waits for 'sluice ready'. */
  start(opts?: { dataDir?: string; redis?: boolean; env?: Record<string, string> }): Promise<GatewayProcess>;
  /** Runs the admin CLI against the shared database (direct). */
  cli(args: string[]): Promise<CliRun>;
}

/** Claims a Redis logical database in 1..15 nobody else in this test run holds, in random order. */
async function claimRedisDb(t: Test): Promise<number> {
  const admin = new Redis({ ...REDIS, db: 0, lazyConnect: true, maxRetriesPerRequest: 1 });
  await admin.connect();
  const token = randomUUID();
  const dbs = Array.from({ length: 15 }, (_, i) => i + 1).sort(() => Math.random() - 0.5);
  for (const db of dbs) {
    if ((await admin.set(`sluice-test:db-claim:${db}`, token, 'EX', 900, 'NX')) === 'OK') {
      t.teardown(async () => {
        if ((await admin.get(`sluice-test:db-claim:${db}`)) === token) await admin.del(`sluice-test:db-claim:${db}`);
        admin.disconnect();
      });
      return db;
    }
  }
  admin.disconnect();
  throw new Error('every Redis logical database 1..15 is claimed by another test run');
}

/** Polls `fn` (each round awaits it, 50 ms apart) until it returns a value other than undefined/false. */
export async function until<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await pause(50);
  }
}

export async function startBackings(t: Test, opts: { extraProfiles?: string } = {}): Promise<Backings> {
  const { sim, configDir, dataDir: scratch, config } = await startSimWithConfig(t, opts.extraProfiles);

  const databaseUrl = await freshPostgresUrl(t);
  const store = await openStore({ databaseUrl, dataDir: scratch });
  t.teardown(() => store.close());
  const pgTarget = new URL(databaseUrl);
  const pgRelay = await startRelay(t, { host: pgTarget.hostname, port: Number(pgTarget.port || 5432) });
  const relayed = new URL(databaseUrl);
  relayed.hostname = '127.0.0.1';
  relayed.port = String(pgRelay.port);

  const redisDb = await claimRedisDb(t);
  const redis = new Redis({ ...REDIS, db: redisDb, maxRetriesPerRequest: 1 });
  await redis.flushdb();
  t.teardown(async () => {
    await redis.flushdb();
    redis.disconnect();
  });
  const redisRelay = await startRelay(t, REDIS);

  let seq = 0;
  const env: Record<string, string> = {
    SLUICE_DATABASE_URL: relayed.toString(),
    SLUICE_LOG_LEVEL: 'info',
    SLUICE_KEY_CACHE_TTL_S: '1',
    // The tests play a front proxy on loopback: client addresses arrive as X-Forwarded-For.
    SLUICE_TRUSTED_PROXIES: '127.0.0.1',
    SLUICE_SHUTDOWN_GRACE_S: '2',
    // The warm-up is held by tests/cli/serve.test.ts; these tests start many processes.
    SLUICE_WARMUP_REQUESTS: '0',
    SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev,
    SLUICE_UPSTREAM_KEY_ASSISTANT: UPSTREAM_KEYS.assistant,
    SLUICE_UPSTREAM_KEY_TINY: UPSTREAM_KEYS.tiny,
  };
  const baseEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));

  return {
    sim, config, configDir, pgRelay, redisRelay, databaseUrl, relayedDatabaseUrl: relayed.toString(),
    redisUrl: `redis://127.0.0.1:${redisRelay.port}/${redisDb}`, redisDb, redis, store,
    key: (profile = 'dev', name = `k${++seq}`) => createKey(store, config, { profile, name }),
    async start(o = {}) {
      const dataDir = o.dataDir ?? mkdtempSync(join(tmpdir(), 'sluice-data-'));
      if (!o.dataDir) t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
      const childEnv: Record<string, string | undefined> = { ...baseEnv, ...env, SLUICE_DATA_DIR: dataDir, ...o.env };
      if (o.redis !== false) childEnv.SLUICE_REDIS_URL = `redis://127.0.0.1:${redisRelay.port}/${redisDb}`;
      const child = spawn(process.execPath, [CLI, 'serve', '--config', configDir, '--listen', '127.0.0.1:0'], {
        cwd: ROOT, env: childEnv, stdio: ['ignore', 'pipe', 'pipe'],
      });
      const proc = watch(child, dataDir);
      t.teardown(() => kill(child, proc.exited));
      const listening = await proc.waitForLine((l) => l.msg === 'sluice ready', { timeoutMs: 15_000 });
      proc.url = `http://${listening.listen}`;
      return proc;
    },
    cli(args) {
      return runCli([...args, '--config', configDir], { ...baseEnv, SLUICE_DATABASE_URL: databaseUrl, SLUICE_DATA_DIR: scratch });
    },
  };
}

function watch(child: ChildProcess, dataDir: string): GatewayProcess {
  const lines: LogLine[] = [];
  const events = new EventEmitter();
  let stderr = '';
  collectLogLines(child.stdout!, lines, () => events.emit('line'));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      events.emit('exit');
      resolve({ code, signal });
    });
  });
  let ended = false;
  void exited.then(() => (ended = true));

  const proc: GatewayProcess = {
    url: '',
    pid: child.pid!,
    dataDir,
    lines,
    stderr: () => stderr,
    async waitForLine(pred, o = {}) {
      const deadline = Date.now() + (o.timeoutMs ?? 10_000);
      let i = o.from ?? 0;
      for (;;) {
        for (; i < lines.length; i++) if (pred(lines[i])) return lines[i];
        if (ended) throw new Error(`sluice (pid ${child.pid}) exited before the awaited log line; stderr: ${stderr.slice(-2000)}`);
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`timed out waiting for a log line from pid ${child.pid}; last lines: ${JSON.stringify(lines.slice(-5))}; stderr: ${stderr.slice(-2000)}`);
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), left);
        await Promise.race([once(events, 'line', { signal: ac.signal }), once(events, 'exit', { signal: ac.signal })]).catch(() => {});
        ac.abort();
        clearTimeout(timer);
      }
    },
    async health() {
      const res = await fetch(`${proc.url}/api/health`);
      return (await res.json()) as Health;
    },
    exited,
    async stop(signal = 'SIGTERM') {
      if (!ended) child.kill(signal);
      return exited;
    },
  };
  return proc;
}

async function kill(child: ChildProcess, exited: Promise<unknown>): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
  await exited;
  clearTimeout(timer);
}

export interface ChatAnswer {
  status: number;
  headers: Headers;
  /** The parsed JSON body (a chat completion or an error body). */
  body: any;
}

/** One non-streamed chat request; `sim` is the simulated router's `x-sim` directives. */
export async function chat(url: string, key: string, o: { model?: string; user?: string; ip?: string; sim?: string; run?: string; reply?: string } = {}): Promise<ChatAnswer> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (o.ip) headers['x-forwarded-for'] = o.ip;
  if (o.sim) headers['x-sim'] = o.sim;
  if (o.run) headers['x-sluice-run'] = o.run;
  const body: Record<string, unknown> = { model: o.model ?? 'sluice/fast', messages: [{ role: 'user', content: o.reply === undefined ? 'hi' : `[[reply:${o.reply}]]` }] };
  if (o.user) body.user = o.user;
  const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
  return { status: res.status, headers: res.headers, body: await res.json() };
}
