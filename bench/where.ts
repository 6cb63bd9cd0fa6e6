// `npm run bench:where [-- --only chat-2k] [--store sqlite|postgres] [--rate N] [--rounds N]
// [--profile DIR]`: where sluice's CPU per request goes, against its proxy core alone (http-proxy-3
// as sluice drives it, bench/floor-hp3.ts), under the same load in turns. For each, per thread
// (main, store thread, V8's helpers, the profiler's, the rest): user and system CPU per request from
// /proc/PID/task/*/stat, context switches, and, where `perf` can count syscall tracepoints, the
// syscalls each thread makes per request. Closed loop (32 connections, each at its own pace) by
// default; `--rate N` drives both at the same open-loop rate, so neither gains from batching more
// work into each event-loop turn. With `--profile DIR` both run under `node --cpu-prof`, and the
// report ends with what sluice's main thread spends per request beyond the core's, by source file
// and by function. Prints Markdown; docs/benchmarks.md ("Where the time goes") holds a run.

import { spawn, spawnSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileOf, label, readProfile, selfBy, type ProfileNode } from './cpuprofile.ts';
import type { LoadJob, LoadResult } from './load.ts';
import { cpuUs, threadKind, threadsCpu, type ThreadCpu } from './proc-cpu.ts';
import { Loader } from './procs.ts';
import { scenarios } from './scenarios.ts';
import { cleanup, startFloorHp3, startSim, startSluice, stop, type Server } from './servers.ts';
import { log, option, parseStores, PROFILE_DIR, UPSTREAM_KEY, WARMUP_SECONDS } from './settings.ts';

const SECONDS = Number(option('seconds') ?? 10);
const ROUNDS = Number(option('rounds') ?? 2);
const RATE = option('rate') === undefined ? undefined : Number(option('rate'));
const SYSCALLS = ['read', 'writev', 'write', 'epoll_pwait', 'futex', 'pwrite64', 'pread64', 'fdatasync', 'madvise', 'mmap', 'munmap', 'mprotect'];

const perfWorks = spawnSync('perf', ['stat', '-x', ',', '-e', 'syscalls:sys_enter_read', '--', 'true'], { encoding: 'utf8' }).status === 0;

/** Counts the syscalls of every thread of `pid` until stop() (thread group → syscall → count). */
function countSyscalls(pid: number): { stop(): Promise<Map<string, Map<string, number>>> } {
  if (!perfWorks) return { stop: async () => new Map() };
  const events = SYSCALLS.map((s) => `syscalls:sys_enter_${s}`).join(',');
  const perf = spawn('perf', ['stat', '--per-thread', '-x', ',', '-e', events, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
  let text = '';
  perf.stderr.on('data', (c: Buffer) => (text += c));
  return {
    async stop() {
      const exited = new Promise((r) => perf.once('exit', r));
      perf.kill('SIGINT');
      await exited;
      const out = new Map<string, Map<string, number>>();
      for (const line of text.split('\n')) {
        const f = line.split(',');
        if (f.length < 4 || !f[3]?.startsWith('syscalls:')) continue;
        const [, name, tid] = /^(.*)-(\d+)$/.exec(f[0]!) ?? [];
        const g = threadKind(pid, tid ?? '', name ?? f[0]!);
        const m = out.get(g) ?? new Map<string, number>();
        const call = f[3].replace('syscalls:sys_enter_', '');
        m.set(call, (m.get(call) ?? 0) + (Number(f[1]) || 0));
        out.set(g, m);
      }
      return out;
    },
  };
}

/** utime + stime of whole processes, µs (one that has ended counts 0: Postgres's backends come and go). */
function processUs(pids: number[]): number {
  let sum = 0;
  for (const pid of pids) {
    try {
      const c = cpuUs(pid);
      sum += c.user + c.sys;
    } catch {
      // ended
    }
  }
  return sum;
}

function pidsOf(command: string): number[] {
  const r = spawnSync('pgrep', ['-x', command], { encoding: 'utf8' });
  return r.status === 0 ? r.stdout.split('\n').filter(Boolean).map(Number) : [];
}

interface Target {
  label: string; server: Server; auth: string; body: string; requests: number; measured: number; cpu: Map<string, ThreadCpu>; calls: Map<string, Map<string, number>>;
  /** The other processes on the same CPUs during its measured slices, µs by name. */
  beside: Map<string, number>;
}

async function main(): Promise<void> {
  const [store] = parseStores();
  const name = option('only') ?? 'chat-2k';
  const s = scenarios().find((x) => x.name === name);
  if (!s) throw new Error(`--only names no scenario: ${name}`);
  log(`${s.title} on ${store}: ${ROUNDS} rounds of ${WARMUP_SECONDS} s warm-up and ${SECONDS} s measured per target, ${RATE ? `open loop at ${RATE} req/s` : 'closed loop, 32 connections'}${perfWorks ? '' : '; perf cannot count syscalls here'}`);
  const sim = await startSim();
  const floor = await startFloorHp3(sim);
  const sluice = await startSluice(sim, store!);
  const load = new Loader<Omit<LoadJob, 'id'>, LoadResult>('bench/load.ts');
  await load.ready;
  const targets: Target[] = [
    { label: 'http-proxy-3 floor', server: floor, auth: UPSTREAM_KEY, body: s.upstreamBody, requests: 0, measured: 0, cpu: new Map(), calls: new Map(), beside: new Map() },
    { label: sluice.label, server: sluice.server, auth: sluice.auth, body: s.sluiceBody, requests: 0, measured: 0, cpu: new Map(), calls: new Map(), beside: new Map() },
  ];
  // What shares the CPUs: the router, the load generator and, for Postgres + Redis, their servers.
  const beside: Array<[string, number[]]> = [['sim', [sim.pid]], ['load generator', [load.pid]]];
  if (store === 'postgres') beside.push(['Redis', pidsOf('redis-server')], ['Postgres (all its processes)', pidsOf('postgres')]);
  const path = s.dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages';
  for (let round = 0; round < ROUNDS; round++) {
    for (const t of round % 2 ? [...targets].reverse() : targets) {
      const job = { mode: 'closed' as const, origin: t.server.origin, path, headers: { ...s.headers, authorization: `Bearer ${t.auth}` }, body: t.body, connections: s.connections, durationMs: WARMUP_SECONDS * 1000 };
      t.requests += (await load.run(job)).sent;
      const calls = countSyscalls(t.server.pid);
      const before = threadsCpu(t.server.pid);
      const besideBefore = beside.map(([, pids]) => processUs(pids));
      const r = await load.run(RATE ? { ...job, mode: 'open', rate: RATE, connections: 512, durationMs: SECONDS * 1000 } : { ...job, durationMs: SECONDS * 1000 });
      const after = threadsCpu(t.server.pid);
      beside.forEach(([name, pids], i) => t.beside.set(name, (t.beside.get(name) ?? 0) + processUs(pids) - besideBefore[i]!));
      if (r.non2xx + r.errors > 0) throw new Error(`${t.label}: ${r.non2xx} non-2xx and ${r.errors} errors: ${r.firstFailure}`);
      t.requests += r.sent;
      t.measured += r.sent;
      for (const [g, a] of after) {
        const b = before.get(g) ?? { user: 0, sys: 0, voluntary: 0, involuntary: 0 };
        const sum = t.cpu.get(g) ?? { user: 0, sys: 0, voluntary: 0, involuntary: 0 };
        t.cpu.set(g, {
          user: sum.user + a.user - b.user, sys: sum.sys + a.sys - b.sys,
          voluntary: sum.voluntary + a.voluntary - b.voluntary, involuntary: sum.involuntary + a.involuntary - b.involuntary,
        });
      }
      for (const [g, m] of await calls.stop()) {
        const sum = t.calls.get(g) ?? new Map<string, number>();
        for (const [call, n] of m) sum.set(call, (sum.get(call) ?? 0) + n);
        t.calls.set(g, sum);
      }
      log(`${t.label}: ${Math.round(r.rps)} req/s`);
    }
  }
  load.close();
  await stop(floor);
  await stop(sluice.server);
  await stop(sim);
  report(s.title, store!, targets);
}

const us = (total: number, n: number) => (total / n).toFixed(1);

function report(title: string, store: string, targets: Target[]): void {
  const out: string[] = [`### Where the time goes: ${title}, ${store}, ${RATE ? `${RATE} req/s open loop` : 'closed loop'}`, ''];
  out.push('| target | thread | user µs/req | system µs/req | switches/req (voluntary / not) | syscalls per request |', '|---|---|---:|---:|---|---|');
  for (const t of targets) {
    let user = 0;
    let sys = 0;
    for (const g of ['main', 'store thread', 'V8 helpers', 'other', 'profiler']) {
      const c = t.cpu.get(g);
      if (!c || c.user + c.sys + c.voluntary + c.involuntary === 0) continue;
      user += c.user;
      sys += c.sys;
      const calls = [...(t.calls.get(g) ?? [])].filter(([, n]) => n / t.measured >= 0.01).sort((a, b) => b[1] - a[1]).map(([k, n]) => `${k} ${(n / t.measured).toFixed(2)}`).join(', ');
      out.push(`| ${t.label} | ${g} | ${us(c.user, t.measured)} | ${us(c.sys, t.measured)} | ${(c.voluntary / t.measured).toFixed(2)} / ${(c.involuntary / t.measured).toFixed(2)} | ${calls || (perfWorks ? '—' : 'perf unavailable')} |`);
    }
    out.push(`| ${t.label} | **all** | **${us(user, t.measured)}** | **${us(sys, t.measured)}** | | |`);
  }
  out.push('', 'Beside them on the same CPUs, per request of each (user + system µs):', '');
  for (const t of targets) out.push(`- ${t.label}: ${[...t.beside].map(([name, total]) => `${name} ${us(total, t.measured)}`).join(', ')}`);
  const [floor, sluice] = targets as [Target, Target];
  const total = (t: Target) => [...t.cpu.values()].reduce((a, c) => a + c.user + c.sys, 0) / t.measured;
  out.push('', `CPU per request, sluice / floor: ${(total(sluice) / total(floor)).toFixed(2)}× (${targets.map((t) => `${t.label} ${t.measured} requests measured`).join(', ')}).`);
  if (PROFILE_DIR) out.push('', ...profileDiff(floor, sluice));
  process.stdout.write(`\n${out.join('\n')}\n`);
}

/** sluice's main-thread self time per request minus the floor's, by file and by sluice's own functions. */
function profileDiff(floor: Target, sluice: Target): string[] {
  const files = readdirSync(PROFILE_DIR!);
  const find = (prefix: string) => {
    const f = files.filter((x) => x.startsWith(prefix) && x.endsWith('.cpuprofile')).sort().at(-1);
    if (!f) throw new Error(`no ${prefix}*.cpuprofile in ${PROFILE_DIR}`);
    return readProfile(join(PROFILE_DIR!, f));
  };
  const pf = find('floor-hp3-');
  const ps = find('sluice-');
  const lines: string[] = [`Main thread self time per request (µs; every request either served, warm-ups included: floor ${floor.requests}, sluice ${sluice.requests}), by file, largest difference first; idle excluded:`, ''];
  const diff = (a: Map<string, number>, b: Map<string, number>, keep: (k: string) => boolean, top: number) => {
    const rows = [...new Set([...a.keys(), ...b.keys()])].filter((k) => k !== '(idle)' && keep(k))
      .map((k) => ({ k, f: (a.get(k) ?? 0) / floor.requests, s: (b.get(k) ?? 0) / sluice.requests }))
      .sort((x, y) => (y.s - y.f) - (x.s - x.f));
    const sum = (xs: typeof rows) => xs.reduce((acc, r) => [acc[0]! + r.f, acc[1]! + r.s], [0, 0]);
    const [tf, ts] = sum(rows);
    return [
      '| where | floor | sluice | difference |', '|---|---:|---:|---:|',
      ...rows.slice(0, top).map((r) => `| \`${r.k}\` | ${r.f.toFixed(2)} | ${r.s.toFixed(2)} | ${(r.s - r.f).toFixed(2)} |`),
      `| all of the above and the rest | ${tf!.toFixed(1)} | ${ts!.toFixed(1)} | ${(ts! - tf!).toFixed(1)} |`,
    ];
  };
  // Native code by its own name (writev, JSON.parse), where fileOf puts it all under one.
  const byFile = (n: ProfileNode) => (n.callFrame.url || n.callFrame.functionName.startsWith('(') ? fileOf(n) : `${n.callFrame.functionName} (native)`);
  lines.push(...diff(selfBy(pf, byFile), selfBy(ps, byFile), () => true, 30));
  lines.push('', 'sluice\'s own functions (lib/, plugins/), self time per request:', '');
  lines.push(...diff(new Map(), selfBy(ps, label), (k) => / (lib|plugins)\//.test(k), 30));
  return lines;
}

main().catch((err) => {
  process.stderr.write(`${(err as Error).stack ?? err}\n`);
  process.exitCode = 1;
}).finally(() => cleanup());
