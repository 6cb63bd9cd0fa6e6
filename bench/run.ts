// `npm run bench [-- --store sqlite|postgres|both] [--warmup S]`: the same load against the simulated
// router directly, three minimal proxies (bench/floor-proxy.ts: node:http + http.request, the floor
// the targets are judged against; bench/floor-undici.ts: node:http + undici Pool.stream;
// bench/floor-hp3.ts: the proxy core alone, http-proxy-3 as sluice drives it) and the real
// sluice (keys, records and the usage tap on), each in its own process, the load generator in
// another (bench/load.ts). Prints Markdown tables with the targets met, ready for the README.
// Every process it starts is killed and every temporary directory and database removed, on error too.

import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import { fileURLToPath } from 'node:url';
import type { LoadJob, LoadResult } from './load.ts';
import { benchConfig, Loader, serveNodeFlags } from './procs.ts';
import { scenarios, type Scenario } from './scenarios.ts';

/** The load generator (bench/load.ts), a child process taking one job at a time. */
type LoadClient = Loader<Omit<LoadJob, 'id'>, LoadResult>;

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const NODE = process.execPath;
const PG_ADMIN_URL = process.env.BENCH_PG_URL ?? 'postgres://root@127.0.0.1:5432/postgres';
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const UPSTREAM_KEY = `sk-or-v1-bench${randomBytes(25).toString('hex')}`;
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** Long enough for V8 to optimise the hot path (the first seconds after a start run ~2× slower). */
const WARMUP_SECONDS = Number(option('warmup') ?? process.env.BENCH_WARMUP_SECONDS ?? 5);
/** Each measurement is cut into this many slices, taken in turn across the targets. */
const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 5));
/** Open-loop rates of the latency measurement (req/s). */
const LATENCY_RATES = [200, 1000] as const;
const LATENCY_RATE = LATENCY_RATES[0];
const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

type StoreKind = 'sqlite' | 'postgres';

function option(name: string): string | undefined {
  const eq = process.argv.find((a) => a.startsWith(`--${name}=`));
  if (eq) return eq.slice(name.length + 3);
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

/** `--profile DIR`: sluice and the floors run under `node --cpu-prof`, one .cpuprofile per process in DIR. */
const PROFILE_DIR = ((d) => (d ? resolve(d) : undefined))(option('profile') ?? process.env.BENCH_PROFILE_DIR);
/**
 * `--pin` (BENCH_PIN=1): the server being measured gets the last CPU to itself and every other
 * process (sim, load generator, idle servers) shares the rest, re-pinned before each slice with
 * `taskset -a`. Steadier figures on a small shared machine; off by default.
 */
const PIN = process.argv.includes('--pin') || process.env.BENCH_PIN === '1';
/** `--only chat-2k,stream-20`: a subset of the scenarios (for profiling one of them). */
const ONLY = (option('only') ?? process.env.BENCH_ONLY)?.split(',').filter(Boolean);

function parseStores(): StoreKind[] {
  const v = option('store') ?? process.env.BENCH_STORE ?? 'sqlite';
  if (v === 'sqlite' || v === 'embedded') return ['sqlite'];
  if (v === 'postgres') return ['postgres'];
  if (v === 'both') return ['sqlite', 'postgres'];
  process.stderr.write(`--store must be sqlite (embedded), postgres or both, got "${v}"\n`);
  process.exit(2);
}

function log(msg: string): void {
  process.stderr.write(`[bench] ${msg}\n`);
}

// ---------------------------------------------------------------------------------------------
// Cleanup: every child, temporary directory and async undo step is registered as it is created.

const children = new Set<ChildProcess>();
const tempDirs: string[] = [];
const undo: Array<() => Promise<void>> = [];

function killAll(): void {
  for (const c of children) {
    if (c.exitCode === null && c.signalCode === null && c.pid !== undefined) {
      try {
        process.kill(c.pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
  children.clear();
}

function removeTemp(): void {
  for (const d of tempDirs.splice(0)) rmSync(d, { recursive: true, force: true });
}

let cleaning: Promise<void> | undefined;
/** Idempotent: a signal and the failure it causes in main() share one cleanup and both wait for it. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    killAll();
    for (const step of undo.splice(0).reverse()) {
      await Promise.race([step(), new Promise<void>((r) => setTimeout(r, 10_000).unref())]).catch((err) => log(`cleanup step failed: ${(err as Error).message}`));
    }
    removeTemp();
  })();
  return cleaning;
}

process.on('exit', () => {
  killAll();
  removeTemp();
});
let interrupted = false;
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    interrupted = true;
    log(`${sig}: stopping every process`);
    void cleanup().finally(() => process.exit(130));
  });
}

function tempDir(tag: string): string {
  const d = mkdtempSync(join(tmpdir(), `sluice-bench-${tag}-`));
  tempDirs.push(d);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Processes

interface Server {
  name: string;
  proc: ChildProcess;
  pid: number;
  origin: string;
  output: () => string;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

function start(args: string[], env: NodeJS.ProcessEnv): { proc: ChildProcess; output: () => string } {
  const proc = spawn(NODE, args, { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  let tail = '';
  const keep = (c: Buffer) => {
    tail = (tail + c.toString()).slice(-4000);
  };
  proc.stdout!.on('data', keep);
  proc.stderr!.on('data', keep);
  return { proc, output: () => tail };
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

async function stop(s: Server, signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 20_000): Promise<number | null> {
  if (s.proc.exitCode !== null || s.proc.signalCode !== null) return s.proc.exitCode;
  const exited = once(s.proc, 'exit');
  s.proc.kill(signal);
  const timer = setTimeout(() => s.proc.kill('SIGKILL'), timeoutMs);
  const [code] = await exited;
  clearTimeout(timer);
  return code as number | null;
}

/**
 * utime and stime of a process (all its threads), in microseconds. With `thread`, of that thread
 * alone: the main thread (thread id = pid) is the event loop; the rest are V8's helpers (GC,
 * compiler) and sluice's SQLite worker.
 */
function cpuUs(pid: number, thread?: number): { user: number; sys: number } {
  const stat = readFileSync(thread === undefined ? `/proc/${pid}/stat` : `/proc/${pid}/task/${thread}/stat`, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields after the command name start at field 3 (state); utime is field 14, stime field 15.
  return { user: (Number(rest[11]) * 1e6) / CLK_TCK, sys: (Number(rest[12]) * 1e6) / CLK_TCK };
}

/** Peak resident set size (VmHWM) in MiB. */
function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

// ---------------------------------------------------------------------------------------------
// Targets

interface Target {
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
}

/** With the probe loaded (sluice): the event-loop delays since the last mark; the probe starts over. */
/** One mark of bench/eld-probe.ts: loop delay, main-thread GC pauses and V8 heap since the last mark. */
interface EldMark { p99_ms: number; max_ms: number; gc_max_ms: number; gc_major_ms: number; heap_mib: number }

async function eldMark(t: Target): Promise<EldMark[]> {
  if (!t.eldFile) return [];
  const read = () => {
    try {
      return readFileSync(t.eldFile!, 'utf8').split('\n').filter(Boolean);
    } catch {
      return [];
    }
  };
  const before = read().length;
  process.kill(t.server.pid, 'SIGUSR2');
  const until = Date.now() + 5000;
  for (;;) {
    const lines = read();
    if (lines.length > before) return [JSON.parse(lines[lines.length - 1]!)];
    if (Date.now() > until) return [];
    await new Promise((r) => setTimeout(r, 5));
  }
}

function routePath(s: Scenario): string {
  return s.dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages';
}

function jobFor(t: Target, s: Scenario): Pick<LoadJob, 'origin' | 'path' | 'headers' | 'body'> {
  return {
    origin: t.server.origin,
    path: t.prefix + routePath(s),
    headers: { ...s.headers, authorization: `Bearer ${t.auth}` },
    body: t.sluice ? s.sluiceBody : s.upstreamBody,
  };
}

/** One request read in full: the reply must be what a client of that dialect expects. */
async function check(t: Target, s: Scenario): Promise<void> {
  const j = jobFor(t, s);
  t.sent++;
  const res = await fetch(j.origin + j.path, { method: 'POST', headers: j.headers, body: j.body });
  const text = await res.text();
  const fail = (why: string) => {
    throw new Error(`${t.label}, ${s.title}: ${why} (status ${res.status}): ${text.slice(0, 300)}`);
  };
  if (res.status !== 200) fail('not 200');
  if (t.sluice && !res.headers.get('x-sluice-tier')) fail('no x-sluice-tier header');
  if (s.stream) {
    const data = text.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6));
    if (data[data.length - 1] !== '[DONE]') fail('stream does not end with [DONE]');
    const deltas = data.slice(0, -1).map((d) => JSON.parse(d)).filter((e) => typeof e.choices?.[0]?.delta?.content === 'string' && e.choices[0].delta.content !== '');
    if (deltas.length !== 20) fail(`${deltas.length} content chunks, expected 20`);
  } else if (s.dialect === 'chat') {
    const body = JSON.parse(text);
    if (typeof body.choices?.[0]?.message?.content !== 'string') fail('no choices[0].message.content');
  } else {
    const body = JSON.parse(text);
    if (body.type !== 'message' || !Array.isArray(body.content)) fail('not a message');
  }
}

interface Lat { p50: number; p90: number; p99: number; max: number; n: number }

interface Measure {
  /** Median req/s of the interleaved throughput slices. */
  rps: number;
  /** Response-time percentiles (ms) over all latency slices merged, at LATENCY_RATE. */
  lat: Lat;
  /** The same at each of LATENCY_RATES. */
  lats: Map<number, Lat>;
  /** Event-loop delay of the server during its slices (sluice only: bench/eld-probe.ts). */
  eld?: { p99: number; max: number; gcMax: number; gcMajor: number; heap: number };
  /** Non-2xx answers and transport errors, warm-up included. */
  failures: number;
  /** CPU µs per request of the target's own process during the throughput slices (user + system). */
  cpu: number;
  /** The system (kernel) part of `cpu`. */
  cpuSys: number;
  /** The main thread's (the event loop's) part of `cpu`. */
  cpuMain: number;
  /** CPU µs per request of the sim process during the same slices (the sim is behind every target). */
  simCpu: number;
  loadCpu: number;
}

/** With --pin: `measured` alone on the last CPU, every other pid on the others. */
function pin(measured: number, all: number[]): void {
  const n = cpus().length;
  if (!PIN || n < 2) return;
  const rest = n === 2 ? '0' : `0-${n - 2}`;
  for (const pid of new Set(all)) execFileSync('taskset', ['-apc', pid === measured ? String(n - 1) : rest, String(pid)], { stdio: 'ignore' });
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

/**
 * One scenario against every target. The measurements are cut into ROUNDS slices taken in turn
 * (sim, floor, sluice, sim, floor, sluice, …), so a burst of load from elsewhere on the machine
 * lands on every target alike instead of on whichever was being measured at the time.
 */
async function measureScenario(load: LoadClient, sim: Server, targets: Target[], s: Scenario): Promise<Map<string, Measure>> {
  const sliceMs = (SECONDS * 1000) / ROUNDS;
  const acc = new Map(targets.map((t) => [t.name, {
    rps: [] as number[], n: 0, user: 0, sys: 0, main: 0, sim: 0, load: 0, failures: 0,
    samples: new Map<number, number[]>(LATENCY_RATES.map((r) => [r, []])), eld: [] as EldMark[],
  }]));
  const tally = (t: Target, r: LoadResult, what: string) => {
    t.sent += r.sent;
    const bad = r.non2xx + r.errors;
    if (bad === 0) return;
    acc.get(t.name)!.failures += bad;
    log(`${t.label}, ${s.title} (${what}): ${r.non2xx} non-2xx, ${r.errors} errors ${JSON.stringify(r.failures)}; first: ${r.firstFailure}`);
    log(`${t.label} said, last:\n${t.server.output().slice(-1500)}`);
  };
  for (const t of targets) {
    await check(t, s);
    tally(t, await load.run({ ...jobFor(t, s), mode: 'closed', connections: s.connections, durationMs: WARMUP_SECONDS * 1000 }), 'warm-up');
  }
  for (let round = 0; round < ROUNDS; round++) {
    for (const t of targets) {
      pin(t.server.pid, [sim.pid, load.pid, ...targets.map((x) => x.server.pid)]);
      const a = acc.get(t.name)!;
      const c0 = cpuUs(t.server.pid);
      const m0 = cpuUs(t.server.pid, t.server.pid);
      const s0 = cpuUs(sim.pid);
      const l0 = cpuUs(load.pid);
      await eldMark(t);
      const r = await load.run({ ...jobFor(t, s), mode: 'closed', connections: s.connections, durationMs: sliceMs });
      a.eld.push(...(await eldMark(t)));
      const c1 = cpuUs(t.server.pid);
      const m1 = cpuUs(t.server.pid, t.server.pid);
      const s1 = cpuUs(sim.pid);
      const l1 = cpuUs(load.pid);
      tally(t, r, 'throughput');
      a.rps.push(r.rps);
      a.n += r.ok + r.non2xx;
      a.user += c1.user - c0.user;
      a.sys += c1.sys - c0.sys;
      a.main += m1.user + m1.sys - m0.user - m0.sys;
      a.sim += s1.user + s1.sys - s0.user - s0.sys;
      a.load += l1.user + l1.sys - l0.user - l0.sys;
    }
  }
  for (const rate of LATENCY_RATES) {
    for (let round = 0; round < ROUNDS; round++) {
      for (const t of targets) {
        pin(t.server.pid, [sim.pid, load.pid, ...targets.map((x) => x.server.pid)]);
        await eldMark(t);
        const r = await load.run({ ...jobFor(t, s), mode: 'open', connections: 256, rate, durationMs: sliceMs, keepSamples: true });
        const a = acc.get(t.name)!;
        a.eld.push(...(await eldMark(t)));
        tally(t, r, `latency at ${rate} req/s`);
        a.samples.get(rate)!.push(...r.samples!);
      }
    }
  }
  const out = new Map<string, Measure>();
  for (const t of targets) {
    const a = acc.get(t.name)!;
    const lats = new Map<number, Lat>();
    for (const [rate, samples] of a.samples) {
      const sorted = Float64Array.from(samples).sort();
      lats.set(rate, { p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] ?? NaN, n: sorted.length });
    }
    const m: Measure = {
      rps: median(a.rps),
      lat: lats.get(LATENCY_RATE)!,
      lats,
      // The worst slice's p99 and the largest single delay: a stall anywhere shows.
      eld: a.eld.length ? {
        p99: Math.max(...a.eld.map((e) => e.p99_ms)), max: Math.max(...a.eld.map((e) => e.max_ms)),
        gcMax: Math.max(...a.eld.map((e) => e.gc_max_ms)), gcMajor: Math.max(...a.eld.map((e) => e.gc_major_ms)), heap: Math.max(...a.eld.map((e) => e.heap_mib)),
      } : undefined,
      failures: a.failures,
      cpu: (a.user + a.sys) / a.n, cpuSys: a.sys / a.n, cpuMain: a.main / a.n, simCpu: a.sim / a.n, loadCpu: a.load / a.n,
    };
    const lat = [...lats].map(([rate, l]) => `@${rate} p50 ${l.p50.toFixed(2)} p99 ${l.p99.toFixed(2)}`).join('  ');
    log(`${t.label.padEnd(24)} ${s.title.padEnd(18)} ${m.rps.toFixed(0).padStart(6)} req/s (slices ${a.rps.map((x) => x.toFixed(0)).join(' ')})  ${lat} ms  cpu ${m.cpu.toFixed(0)} µs/req${m.eld ? `  loop delay p99 ${m.eld.p99.toFixed(1)} max ${m.eld.max.toFixed(1)} ms, longest GC pause ${m.eld.gcMax.toFixed(1)} ms (major ${m.eld.gcMajor.toFixed(1)}), V8 heap ≤ ${m.eld.heap.toFixed(0)} MiB` : ''}`);
    out.set(t.name, m);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Starting the three kinds of server

async function startSim(): Promise<Server> {
  const port = await freePort();
  const { proc, output } = start(['cli/sluice.ts', 'simulate', '--listen', `127.0.0.1:${port}`], { ...process.env, SLUICE_LOG_LEVEL: 'warn' });
  const m = await waitForOutput('sim', proc, output, /listening on (http:\/\/\S+)/);
  return { name: 'sim', proc, pid: proc.pid!, origin: m[1]!, output };
}

/** Node's flags to write a CPU profile of the server `name` into PROFILE_DIR (none without --profile). */
function profileArgs(name: string): string[] {
  return PROFILE_DIR ? ['--cpu-prof', '--cpu-prof-dir', PROFILE_DIR, '--cpu-prof-name', `${name}-${Date.now()}.cpuprofile`] : [];
}

async function startFloorUndici(sim: Server): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor-undici'), 'bench/floor-undici.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], process.env);
  const m = await waitForOutput('floor-undici', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor-undici', proc, pid: proc.pid!, origin: m[1]!, output };
}

async function startFloorHp3(sim: Server): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor-hp3'), 'bench/floor-hp3.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], process.env);
  const m = await waitForOutput('floor-hp3', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor-hp3', proc, pid: proc.pid!, origin: m[1]!, output };
}

/** The http floor carries the event-loop probe too: its delays under the same load are the machine's, not sluice's. */
const FLOOR_ELD_FILE = join(tempDir('eld-floor'), 'eld.jsonl');

async function startFloor(sim: Server): Promise<Server> {
  const { proc, output } = start([...profileArgs('floor'), '--import', './bench/eld-probe.ts', 'bench/floor-proxy.ts', '--listen', '127.0.0.1:0', '--target', `${sim.origin}/api`], { ...process.env, BENCH_ELD_FILE: FLOOR_ELD_FILE });
  const m = await waitForOutput('floor', proc, output, /listening (http:\/\/\S+)/);
  return { name: 'floor', proc, pid: proc.pid!, origin: m[1]!, output };
}

function sluiceEnv(dataDir: string, databaseUrl?: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, SLUICE_DATA_DIR: dataDir, SLUICE_UPSTREAM_KEY_BENCHMARK: UPSTREAM_KEY, SLUICE_LOG_LEVEL: 'warn' };
  delete env.SLUICE_DATABASE_URL;
  delete env.SLUICE_REDIS_URL;
  delete env.SLUICE_CONFIG_DIR;
  if (databaseUrl) {
    env.SLUICE_DATABASE_URL = databaseUrl;
    env.SLUICE_REDIS_URL = REDIS_URL;
  }
  return env;
}


async function createKey(configDir: string, env: NodeJS.ProcessEnv): Promise<string> {
  const { proc, output } = start(['cli/sluice.ts', 'keys', 'create', '--profile', 'benchmark', '--name', 'bench', '--config', configDir], env);
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
  undo.push(() => withRedis(async (r) => {
    for (const k of await scan(r)) {
      const old = before.get(k);
      if (!old) await r.del(k);
      else if (old.pttl > 0) await r.set(k, old.value, 'PX', old.pttl);
      else await r.set(k, old.value);
    }
  }));
}

async function startSluice(sim: Server, store: StoreKind): Promise<Target> {
  const configDir = benchConfig(sim.origin, 'agent');
  const dataDir = tempDir(`data-${store}`);
  let databaseUrl: string | undefined;
  if (store === 'postgres') {
    const name = `sluice_bench_${randomBytes(6).toString('hex')}`;
    await pgAdmin(`CREATE DATABASE ${name}`);
    undo.push(() => pgAdmin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    const url = new URL(PG_ADMIN_URL);
    url.pathname = `/${name}`;
    databaseUrl = url.toString();
    await guardRedisSpend();
  }
  const env = sluiceEnv(dataDir, databaseUrl);
  const key = await createKey(configDir, env);
  const port = await freePort();
  const name = `sluice-${store}`;
  // The event-loop delay probe rides along as a preload: sluice itself is unchanged.
  const eldFile = join(tempDir(`eld-${store}`), 'eld.jsonl');
  env.BENCH_ELD_FILE = eldFile;
  const { proc, output } = start([...profileArgs(name), ...serveNodeFlags(), '--import', './bench/eld-probe.ts', 'cli/sluice.ts', 'serve', '--config', configDir, '--listen', `127.0.0.1:${port}`], env);
  const origin = `http://127.0.0.1:${port}`;
  await waitForHealth(name, proc, output, origin);
  const server: Server = { name, proc, pid: proc.pid!, origin, output };
  const target: Target = {
    name, label: store === 'sqlite' ? 'sluice (SQLite)' : 'sluice (Postgres+Redis)', server, prefix: '', auth: key, sluice: true, sent: 0, store, eldFile,
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

// ---------------------------------------------------------------------------------------------
// Report

/** Issue 9's targets, judged against the http.request floor (bench/floor-proxy.ts) unless noted. */
const TARGETS = {
  chatVsFloor: 0.75,
  streamVsFloor: 0.8,
  bigVsFloor: 0.35,
  /** Added latency over the floor's own added latency (ms), at every rate. */
  addedP50: 0.2,
  addedP99: 1,
  /** sluice CPU per 2 KB request over the floor's. */
  cpuChat: 1.3,
  /** Longest event-loop stall of sluice under load (ms). */
  eldMax: 5,
  /** Postgres + Redis CPU per 2 KB request over the embedded store's. */
  pgVsSqlite: 1.25,
};

interface Verdict {
  what: string;
  ok: boolean;
  /** A correctness check (every answer 2xx, one row per request), not a performance target. */
  correctness?: boolean;
}

function mark(ok: boolean): string {
  return ok ? '✓' : '✗';
}

function fmt(n: number, digits = 0): string {
  return Number.isFinite(n) ? n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits }) : '—';
}

function ms(n: number): string {
  return Number.isFinite(n) ? `${n >= 0 ? '+' : '−'}${Math.abs(n).toFixed(2)}` : '—';
}

function report(
  store: StoreKind, list: Scenario[], results: Map<string, Map<string, Measure>>, sim: Target, floor: Target, floorU: Target, floorH: Target, sluice: Target,
  rows: { rows: number; ok: number }, nodeVersion: string, others: Array<{ label: string; rss: number }>,
): { text: string; verdicts: Verdict[] } {
  const verdicts: Verdict[] = [];
  const lines: string[] = [];
  const storeTitle = store === 'sqlite' ? 'embedded store (SQLite, counters in memory)' : 'Postgres + Redis';
  const get = (s: Scenario, t: Target) => results.get(s.name)!.get(t.name)!;
  lines.push(`### sluice benchmark: ${storeTitle}`, '');
  lines.push(`Node ${nodeVersion} on ${cpus().length} CPUs; sim, both floors, sluice and the load generator each in its own process. Warm-up: ${WARMUP_SECONDS} s per target and scenario before anything is measured (V8 optimises the hot path in the first seconds). Each figure: ${SECONDS} s cut into ${ROUNDS} slices taken in turn across the targets. Throughput: closed loop, 32 keep-alive connections (median slice). Latency: open loop at ${LATENCY_RATES.join(' and ')} req/s, request start to last byte; "added" is the target's p50/p99 minus the direct sim's. CPU: the server process's utime+stime (/proc) per request during the throughput slices. Floors: \`http.request\` (bench/floor-proxy.ts), undici \`Pool.stream\` (bench/floor-undici.ts) and the proxy core alone, http-proxy-3 as sluice drives it (bench/floor-hp3.ts).`, '');
  lines.push('| scenario | sim req/s | http floor | undici floor | http-proxy-3 floor | sluice req/s | / http floor | / undici floor | target (/ http floor) |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const ratioTarget: Record<string, number> = { 'chat-2k': TARGETS.chatVsFloor, 'stream-20': TARGETS.streamVsFloor, 'messages-300k': TARGETS.bigVsFloor };
  for (const s of list) {
    const [a, f, u, h, g] = [sim, floor, floorU, floorH, sluice].map((t) => get(s, t).rps) as [number, number, number, number, number];
    const want = ratioTarget[s.name]!;
    const ok = g / f >= want;
    verdicts.push({ what: `${s.title} ≥ ${want}× floor`, ok });
    lines.push(`| ${s.title} | ${fmt(a)} | ${fmt(f)} | ${fmt(u)} | ${fmt(h)} | ${fmt(g)} | ${(g / f).toFixed(2)}× | ${(g / u).toFixed(2)}× | ≥ ${want}× ${mark(ok)} |`);
  }
  lines.push('');
  lines.push('| scenario | rate | sim p50 / p99 (ms) | http floor added p50 / p99 | undici floor added | sluice added | target (vs http floor) |');
  lines.push('|---|---:|---:|---:|---:|---:|---|');
  for (const s of list) {
    for (const rate of LATENCY_RATES) {
      const [a, f, u, g] = [sim, floor, floorU, sluice].map((t) => get(s, t).lats.get(rate)!) as [Lat, Lat, Lat, Lat];
      const sat = (t: Target) => (get(s, t).rps < rate * 1.1 ? ' (saturated)' : '');
      const add = (l: Lat) => `${ms(l.p50 - a.p50)} / ${ms(l.p99 - a.p99)}`;
      let target = '—';
      if (s.name === 'chat-2k') {
        const ok50 = g.p50 - f.p50 <= TARGETS.addedP50;
        const ok99 = g.p99 - f.p99 <= TARGETS.addedP99;
        verdicts.push({ what: `p50 ≤ floor + ${TARGETS.addedP50} ms at ${rate} req/s`, ok: ok50 }, { what: `p99 ≤ floor + ${TARGETS.addedP99} ms at ${rate} req/s`, ok: ok99 });
        target = `p50 ≤ floor + ${TARGETS.addedP50} ${mark(ok50)}, p99 ≤ floor + ${TARGETS.addedP99} ${mark(ok99)}`;
      }
      lines.push(`| ${s.title} | ${rate} | ${a.p50.toFixed(2)} / ${a.p99.toFixed(2)} | ${add(f)}${sat(floor)} | ${add(u)}${sat(floorU)} | ${add(g)}${sat(sluice)} | ${target} |`);
    }
  }
  lines.push('');
  lines.push('| scenario | http floor CPU µs/req | undici floor | http-proxy-3 floor | sluice | sluice / http floor | sluice / undici floor | http-proxy-3 floor / http floor | target |');
  lines.push('|---|---:|---:|---:|---:|---:|---:|---:|---|');
  for (const s of list) {
    const [f, u, h, g] = [floor, floorU, floorH, sluice].map((t) => get(s, t).cpu) as [number, number, number, number];
    let target = '—';
    if (s.name === 'chat-2k') {
      const ok = g / f <= TARGETS.cpuChat;
      verdicts.push({ what: `CPU ≤ ${TARGETS.cpuChat}× floor per 2 KB request`, ok });
      target = `≤ ${TARGETS.cpuChat}× ${mark(ok)}`;
    }
    lines.push(`| ${s.title} | ${fmt(f)} | ${fmt(u)} | ${fmt(h)} | ${fmt(g)} | ${(g / f).toFixed(2)}× | ${(g / u).toFixed(2)}× | ${(h / f).toFixed(2)}× | ${target} |`);
  }
  lines.push('');
  const elds = list.map((s) => get(s, sluice).eld).filter((e) => e !== undefined);
  if (elds.length > 0) {
    const p99 = Math.max(...elds.map((e) => e.p99));
    const max = Math.max(...elds.map((e) => e.max));
    const ok = max <= TARGETS.eldMax;
    verdicts.push({ what: `no event-loop stall over ${TARGETS.eldMax} ms`, ok });
    lines.push(`Event-loop delay of sluice under load (monitorEventLoopDelay over all its slices, worst slice): p99 ${p99.toFixed(2)} ms, max ${max.toFixed(2)} ms: target max ≤ ${TARGETS.eldMax} ms ${mark(ok)}. Per scenario: ${list.map((s) => { const e = get(s, sluice).eld; return e ? `${s.title} p99 ${e.p99.toFixed(2)} / max ${e.max.toFixed(2)} (longest main-thread GC pause ${e.gcMax.toFixed(1)} ms, of a major GC ${e.gcMajor.toFixed(1)} ms; V8 heap ≤ ${e.heap.toFixed(0)} MiB)` : ''; }).filter(Boolean).join('; ')}.`, '');
    // The same probe in the http floor: on a machine where sim, load generator and server share the
    // CPUs, the kernel's descheduling shows as loop delay in any process, the floor included.
    const floorElds = list.map((s) => [s, get(s, floor).eld] as const).filter(([, e]) => e !== undefined);
    if (floorElds.length > 0) lines.push(`The http floor under the same load, same probe: ${floorElds.map(([s, e]) => `${s.title} p99 ${e!.p99.toFixed(2)} / max ${e!.max.toFixed(2)}`).join('; ')} (a stall there is the machine's, not the code's).`, '');
  }
  const rssOk = (sluice.peakRss ?? Infinity) <= (floorU.peakRss ?? 0);
  verdicts.push({ what: 'sluice peak RSS ≤ undici floor peak RSS', ok: rssOk });
  lines.push(`Peak RSS (VmHWM, MiB): ${[sluice, floor, floorU, floorH, sim].map((t) => `${t.label} ${fmt(t.peakRss ?? NaN, 1)}`).concat(others.map((o) => `${o.label} ${fmt(o.rss, 1)}`)).join(', ')}: target sluice ≤ undici floor ${mark(rssOk)}`, '');

  // Correctness: sluice answered everything 2xx and recorded one row per request. The sim and the
  // floors are references: their failures are shown (they must be 0 too) but judge nothing about sluice.
  const failuresOf = (t: Target) => list.reduce((n, s) => n + get(s, t).failures, 0);
  const [simFail, floorFail, floorUFail, floorHFail, sluiceFail] = [sim, floor, floorU, floorH, sluice].map(failuresOf);
  verdicts.push({ what: 'sluice answered every request 2xx', ok: sluiceFail === 0, correctness: true });
  const rowsOk = rows.rows === sluice.sent && rows.ok === sluice.sent;
  verdicts.push({ what: 'one row per request', ok: rowsOk, correctness: true });
  lines.push(`Non-2xx responses and transport errors (warm-ups included): sim ${simFail} ${mark(simFail === 0)}, http floor ${floorFail} ${mark(floorFail === 0)}, undici floor ${floorUFail} ${mark(floorUFail === 0)}, http-proxy-3 floor ${floorHFail} ${mark(floorHFail === 0)}, sluice ${sluiceFail} ${mark(sluiceFail === 0)}. Rows recorded by sluice: ${fmt(rows.rows)} (${fmt(rows.ok)} ok) for ${fmt(sluice.sent)} requests sent ${mark(rowsOk)}.`, '');
  lines.push('<details><summary>details</summary>', '');
  lines.push(`| scenario | target | req/s | ${LATENCY_RATES.map((r) => `p50 / p90 / p99 / max at ${r} req/s (ms)`).join(' | ')} | CPU µs/req (server: user + sys) | of which main thread | CPU µs/req (sim) | CPU µs/req (load gen) |`);
  lines.push(`|---|---|---:|${LATENCY_RATES.map(() => '---|').join('')}---:|---:|---:|---:|`);
  for (const s of list) {
    for (const t of [sim, floor, floorU, floorH, sluice]) {
      const m = get(s, t);
      const lat = LATENCY_RATES.map((r) => { const l = m.lats.get(r)!; return `${l.p50.toFixed(2)} / ${l.p90.toFixed(2)} / ${l.p99.toFixed(2)} / ${l.max.toFixed(2)}`; }).join(' | ');
      lines.push(`| ${s.title} | ${t.label} | ${fmt(m.rps)} | ${lat} | ${fmt(m.cpu - m.cpuSys)} + ${fmt(m.cpuSys)} | ${fmt(m.cpuMain)} | ${fmt(m.simCpu)} | ${fmt(m.loadCpu)} |`);
    }
  }
  lines.push('', '</details>', '');
  const met = verdicts.filter((v) => v.ok).length;
  const missed = verdicts.filter((v) => !v.ok).map((v) => v.what);
  lines.push(`**Targets met (${store}): ${met}/${verdicts.length}**${missed.length ? `; missed: ${missed.join('; ')}` : ''}`);
  return { text: lines.join('\n'), verdicts };
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) throw new Error(`the benchmark needs Node 24 (the project's pinned runtime), this is ${process.version}: run it through npm run bench`);
  const stores = parseStores();
  const list = scenarios().filter((s) => !ONLY || ONLY.includes(s.name));
  if (list.length === 0) throw new Error(`--only names no scenario; there are ${scenarios().map((s) => s.name).join(', ')}`);
  const total = list.length * (4 + stores.length) * (WARMUP_SECONDS + (1 + LATENCY_RATES.length) * SECONDS);
  log(`stores: ${stores.join(', ')}${PIN ? '; pinned: the measured server alone on the last CPU' : ''}; about ${Math.round(total + 10)} s`);

  const sim = await startSim();
  const floor = await startFloor(sim);
  const floorUndici = await startFloorUndici(sim);
  const floorHp3 = await startFloorHp3(sim);
  const simT: Target = { name: 'sim', label: 'sim (direct)', server: sim, prefix: '/api', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const floorT: Target = { name: 'floor', label: 'http floor', server: floor, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0, eldFile: FLOOR_ELD_FILE };
  const floorUT: Target = { name: 'floor-undici', label: 'undici floor', server: floorUndici, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const floorHT: Target = { name: 'floor-hp3', label: 'http-proxy-3 floor', server: floorHp3, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const sluices: Target[] = [];
  for (const store of stores) sluices.push(await startSluice(sim, store));
  const load: LoadClient = new Loader<Omit<LoadJob, 'id'>, LoadResult>('bench/load.ts');
  await load.ready;

  const targets = [simT, floorT, floorUT, floorHT, ...sluices];
  const results = new Map<string, Map<string, Measure>>();
  for (const s of list) results.set(s.name, await measureScenario(load, sim, targets, s));
  const loadRss = peakRssMiB(load.pid);
  load.close();

  for (const t of targets) t.peakRss = peakRssMiB(t.server.pid);
  const rows = new Map<string, { rows: number; ok: number }>();
  for (const t of sluices) rows.set(t.name, await t.stopAndCount!());
  await stop(floor);
  await stop(floorUndici);
  await stop(floorHp3);
  await stop(sim);

  const out: string[] = [];
  let allOk = true;
  let correct = true;
  const summary: string[] = [];
  for (const t of sluices) {
    const others = [...sluices.filter((x) => x !== t).map((x) => ({ label: x.label, rss: x.peakRss ?? NaN })), { label: 'load generator', rss: loadRss }];
    const { text, verdicts } = report(t.store!, list, results, simT, floorT, floorUT, floorHT, t, rows.get(t.name)!, process.versions.node, others);
    out.push(text);
    const met = verdicts.filter((v) => v.ok).length;
    if (verdicts.some((v) => v.correctness && !v.ok)) correct = false;
    const missed = verdicts.filter((v) => !v.ok).map((v) => v.what);
    summary.push(`${t.store} ${met}/${verdicts.length}${missed.length ? ` (missed: ${missed.join('; ')})` : ''}`);
    if (met !== verdicts.length) allOk = false;
  }
  const chat = results.get('chat-2k');
  if (chat && sluices.length === 2) {
    const [lite, pg] = sluices.map((t) => chat.get(t.name)!.cpu) as [number, number];
    const ok = pg / lite <= TARGETS.pgVsSqlite;
    if (!ok) allOk = false;
    summary.push(`Postgres + Redis CPU per 2 KB request ${(pg / lite).toFixed(2)}× the embedded store's (≤ ${TARGETS.pgVsSqlite}× ${mark(ok)})`);
  }
  process.stdout.write(`\n${out.join('\n\n')}\n\n${allOk ? '✓' : '✗'} targets met: ${summary.join('; ')}\n`);
  // Missed performance targets are a finding; wrong answers or lost rows are a failure.
  return correct ? 0 : 1;
}

// --streams and --soak MINUTES: the stream-scale and soak benchmarks (bench/streams.ts, bench/soak.ts),
// each with its own processes and report.
const other = process.argv.includes('--streams') ? './streams.ts' : process.argv.includes('--soak') ? './soak.ts' : undefined;
(other ? import(other).then((m: { main: () => Promise<number> }) => m.main()) : main())
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (err: Error) => {
    if (!interrupted) log(`failed: ${err.stack ?? err.message}`);
    await cleanup();
    process.exit(interrupted ? 130 : 1);
  });
