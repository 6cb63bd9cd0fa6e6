// The processes of the stream and soak benchmarks: the simulated router, one `sluice serve` on the
// embedded store and a forked load generator, each in its own process on the project's Node, with
// /proc readings of a pid (RSS, open fds, CPU). Every child and temporary directory goes through
// the one registry (children.ts), removed on exit, on error and on a signal.

import { fork, type ChildProcess } from 'node:child_process';
import { ROOT, spawnNode, tempDir, track, type Spawned } from './children.ts';
import { serveNodeFlags } from './unit-flags.ts';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { DatabaseSync } from 'node:sqlite';

export const UPSTREAM_KEY = `sk-or-v1-bench${randomBytes(25).toString('hex')}`;
export { cleanup, log, ROOT, tempDir } from './children.ts';

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

export interface Proc extends Spawned {
  origin: string;
}

const run = spawnNode;

async function waitFor(name: string, p: Omit<Proc, 'origin'>, ready: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (p.proc.exitCode !== null) throw new Error(`${name} exited (${p.proc.exitCode}) before it was ready:\n${p.output()}`);
    if (await ready().catch(() => false)) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${name} was not ready within ${timeoutMs} ms:\n${p.output()}`);
}

export async function startSim(): Promise<Proc> {
  const port = await freePort();
  const p = run(['cli/sluice.ts', 'simulate', '--listen', `127.0.0.1:${port}`], { ...process.env, SLUICE_LOG_LEVEL: 'warn' });
  await waitFor('sim', p, async () => /listening on/.test(p.output()));
  return { ...p, origin: `http://127.0.0.1:${port}` };
}

export interface Sluice extends Proc {
  key: string;
  dataDir: string;
  configDir: string;
  /** SIGTERM (open streams finish, rows flushed); resolves with the exit code. */
  stop(): Promise<number | null>;
  /** Rows in its embedded store by `run` label (read after stop()). */
  rowsByRun(): Map<string, number>;
}

/** A config directory with one profile, `benchmark`, whose limits never bind, and the example tiers. */
/** `sessionDailyUsd`: the profile also caps each session per day (never reached either). */
export function benchConfig(routerUrl: string, defaultTier: string, sessionDailyUsd?: number): string {
  const dir = tempDir('config');
  writeFileSync(join(dir, 'profiles.yaml'), `# written by the benchmark: one profile whose limits never bind
routers:
  sim:
    url: ${routerUrl}
profiles:
  benchmark:
    default_tier: ${defaultTier}
    router: sim
    budget: { daily_usd: 1000000000, monthly_usd: 10000000000 }
    rate_limits: { per_key_per_minute: 100000000, per_user_per_minute: 100000000 }
${sessionDailyUsd === undefined ? '' : `    session_daily_usd: ${sessionDailyUsd}\n`}`);
  copyFileSync(join(ROOT, 'config/tiers.yaml'), join(dir, 'tiers.yaml'));
  return dir;
}


/** One profile whose limits never bind, pointing at the sim; `sluice serve` on the embedded store. */
export async function startSluice(sim: Proc, o: { nodeFlags?: string[]; env?: NodeJS.ProcessEnv; logLevel?: string; restartOf?: Sluice } = {}): Promise<Sluice> {
  const configDir = o.restartOf?.configDir ?? benchConfig(sim.origin, 'fast');
  const dataDir = o.restartOf?.dataDir ?? tempDir('data');
  // Loopback is the front proxy here (as docs/configuration.md says to set it behind one on the host).
  const env: NodeJS.ProcessEnv = { SLUICE_TRUSTED_PROXIES: '127.0.0.1', ...process.env, ...o.env, SLUICE_DATA_DIR: dataDir, SLUICE_UPSTREAM_KEY_BENCHMARK: UPSTREAM_KEY, SLUICE_LOG_LEVEL: o.logLevel ?? 'warn' };
  for (const k of ['SLUICE_DATABASE_URL', 'SLUICE_REDIS_URL', 'SLUICE_CONFIG_DIR']) delete env[k];
  const key = o.restartOf?.key ?? await mintKey(configDir, env);
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const p = run(['cli/sluice.ts', 'serve', '--config', configDir, '--listen', `127.0.0.1:${port}`], env, [...serveNodeFlags(), ...(o.nodeFlags ?? [])]);
  await waitFor('sluice', p, async () => (await fetch(`${origin}/health`)).ok);
  return {
    ...p, origin, key, dataDir, configDir,
    async stop() {
      if (p.proc.exitCode !== null) return p.proc.exitCode;
      const exited = once(p.proc, 'exit');
      p.proc.kill('SIGTERM');
      const [c] = await exited;
      return c as number | null;
    },
    rowsByRun() {
      const db = new DatabaseSync(join(dataDir, 'sluice.db'), { readOnly: true });
      try {
        const rows = db.prepare('SELECT coalesce(run, \'\') AS run, count(*) AS n FROM requests GROUP BY run').all() as Array<{ run: string; n: number }>;
        return new Map(rows.map((r) => [r.run, Number(r.n)]));
      } finally {
        db.close();
      }
    },
  };
}

/** A key of the `benchmark` profile, minted by `sluice keys create`. */
async function mintKey(configDir: string, env: NodeJS.ProcessEnv): Promise<string> {
  const mint = run(['cli/sluice.ts', 'keys', 'create', '--profile', 'benchmark', '--name', 'bench', '--config', configDir], env);
  const [code] = await once(mint.proc, 'exit');
  const key = mint.output().split('\n').find((l) => /^sluice_benchmark_[A-Za-z0-9]{32}$/.test(l));
  if (code !== 0 || !key) throw new Error(`keys create failed (${code}):\n${mint.output()}`);
  return key;
}

/** A forked load generator (bench/stream-load.ts, or bench/load.ts for npm run bench) taking one job at a time over IPC. */
export class Loader<Job extends object, Result> {
  private readonly proc: ChildProcess;
  private next = 1;
  private readonly waiting = new Map<number, { resolve: (r: Result) => void; reject: (e: Error) => void }>();
  readonly ready: Promise<void>;

  constructor(script = 'bench/stream-load.ts') {
    this.proc = fork(join(ROOT, script), [], { cwd: ROOT, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    track(this.proc);
    let ready!: () => void;
    this.ready = new Promise((r) => (ready = r));
    this.proc.on('message', (m: any) => {
      if (m?.ready) return ready();
      const w = this.waiting.get(m.id);
      if (!w) return;
      this.waiting.delete(m.id);
      if (m.fatal) w.reject(new Error(`load generator: ${m.fatal}`));
      else w.resolve(m as Result);
    });
    this.proc.once('exit', (code) => {
      for (const w of this.waiting.values()) w.reject(new Error(`load generator exited (${code})`));
      this.waiting.clear();
    });
  }

  get pid(): number {
    return this.proc.pid!;
  }

  run(job: Job): Promise<Result> {
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.proc.send({ ...job, id });
    });
  }

  close(): void {
    if (this.proc.connected) this.proc.disconnect();
  }
}

/** Resident set size (VmRSS) of a process, MiB. */
export function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/**
 * RSS by kind of mapping (MiB), from /proc/<pid>/smaps: V8's heap pages (its 256 KiB anonymous
 * regions, every isolate's: the main thread's and the SQLite writer's), malloc's main heap
 * ([heap]), the other anonymous mappings (malloc's thread arenas and large blocks, thread stacks,
 * V8's large objects and code) and file-backed ones (the node binary, shared libraries).
 */
export function rssByKind(pid: number): { v8Pages: number; mallocHeap: number; otherAnon: number; file: number } {
  const out = { v8Pages: 0, mallocHeap: 0, otherAnon: 0, file: 0 };
  let kind: keyof typeof out = 'otherAnon';
  for (const line of readFileSync(`/proc/${pid}/smaps`, 'utf8').split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const name = head[3]!;
      const size = parseInt(head[2]!, 16) - parseInt(head[1]!, 16);
      kind = name === '[heap]' ? 'mallocHeap' : name === '' || name.startsWith('[anon') ? (size === 256 * 1024 ? 'v8Pages' : 'otherAnon') : name.startsWith('[') ? 'otherAnon' : 'file';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) out[kind] += Number(rss[1]) / 1024;
  }
  return out;
}

/** Open file descriptors of a process. */
export function openFds(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** Samples f() every `everyMs` until stopped; gives the samples. */
export function sampler(f: () => number, everyMs = 100): { stop(): number[] } {
  const samples: number[] = [f()];
  const timer = setInterval(() => {
    try {
      samples.push(f());
    } catch {
      // the process is gone
    }
  }, everyMs);
  return {
    stop() {
      clearInterval(timer);
      return samples;
    },
  };
}

/** Interrupts (Ctrl-C) end every process, then the benchmark. */
