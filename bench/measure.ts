// The benchmark's measurement (bench/run.ts): one scenario against every target, cut into slices
// taken in turn, with throughput, open-loop latency, CPU per request from /proc (the whole process
// and its main thread), the event-loop probe's marks and failures counted.

import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import type { LoadJob, LoadResult } from './load.ts';
import { cpuUs, threadsCpu } from './proc-cpu.ts';
import type { Loader } from './procs.ts';
import type { Scenario } from './scenarios.ts';
import type { Server, Target } from './servers.ts';
import { LATENCY_RATE, LATENCY_RATES, log, PIN, ROUNDS, SECONDS, WARMUP_SECONDS } from './settings.ts';

/** The load generator (bench/load.ts), a child process taking one job at a time. */
export type LoadClient = Loader<Omit<LoadJob, 'id'>, LoadResult>;

/** Peak resident set size (VmHWM) in MiB. */
export function peakRssMiB(pid: number): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** One mark of bench/eld-probe.ts: loop delay, main-thread GC pauses and V8 heap since the last mark. */
interface EldMark { p99_ms: number; max_ms: number; gc_max_ms: number; gc_major_ms: number; heap_mib: number }

/** With the probe loaded (sluice, the http floor): the delays since the last mark; the probe starts over. */
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
    headers: { ...s.headers, ...t.headers, authorization: `Bearer ${t.auth}` },
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

export interface Lat { p50: number; p90: number; p99: number; max: number; n: number }

export interface Measure {
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
  /** `cpu` by kind of thread: main, V8 helpers (GC, compiler), store thread, other. */
  cpuThreads: Map<string, number>;
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
export async function measureScenario(load: LoadClient, sim: Server, targets: Target[], s: Scenario): Promise<Map<string, Measure>> {
  const sliceMs = (SECONDS * 1000) / ROUNDS;
  const acc = new Map(targets.map((t) => [t.name, {
    rps: [] as number[], n: 0, user: 0, sys: 0, sim: 0, load: 0, failures: 0, threads: new Map<string, number>(),
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
      const th0 = threadsCpu(t.server.pid);
      const s0 = cpuUs(sim.pid);
      const l0 = cpuUs(load.pid);
      await eldMark(t);
      const r = await load.run({ ...jobFor(t, s), mode: 'closed', connections: s.connections, durationMs: sliceMs });
      a.eld.push(...(await eldMark(t)));
      const c1 = cpuUs(t.server.pid);
      for (const [k, v] of threadsCpu(t.server.pid)) {
        const b = th0.get(k);
        a.threads.set(k, (a.threads.get(k) ?? 0) + v.user + v.sys - (b ? b.user + b.sys : 0));
      }
      const s1 = cpuUs(sim.pid);
      const l1 = cpuUs(load.pid);
      tally(t, r, 'throughput');
      a.rps.push(r.rps);
      a.n += r.ok + r.non2xx;
      a.user += c1.user - c0.user;
      a.sys += c1.sys - c0.sys;
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
      cpu: (a.user + a.sys) / a.n, cpuSys: a.sys / a.n, simCpu: a.sim / a.n, loadCpu: a.load / a.n,
      cpuThreads: new Map([...a.threads].map(([k, v]) => [k, v / a.n])),
    };
    const lat = [...lats].map(([rate, l]) => `@${rate} p50 ${l.p50.toFixed(2)} p99 ${l.p99.toFixed(2)}`).join('  ');
    log(`${t.label.padEnd(24)} ${s.title.padEnd(18)} ${m.rps.toFixed(0).padStart(6)} req/s (slices ${a.rps.map((x) => x.toFixed(0)).join(' ')})  ${lat} ms  cpu ${m.cpu.toFixed(0)} µs/req${m.eld ? `  loop delay p99 ${m.eld.p99.toFixed(1)} max ${m.eld.max.toFixed(1)} ms, longest GC pause ${m.eld.gcMax.toFixed(1)} ms (major ${m.eld.gcMajor.toFixed(1)}), V8 heap ≤ ${m.eld.heap.toFixed(0)} MiB` : ''}`);
    out.set(t.name, m);
  }
  return out;
}

