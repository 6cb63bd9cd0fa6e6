// CPU time from /proc, for bench/measure.ts (`npm run bench`) and bench/where.ts (`npm run
// bench:where`): a process's or a thread's utime and stime, and a process's threads summed by
// kind (main, V8 helpers, store thread, profiler, other) with their context switches.

import { readdirSync, readFileSync } from 'node:fs';
import { CLK_TCK } from './settings.ts';

/** The name, utime and stime (µs) in a /proc stat file (of a process, or of one of its threads). */
export function readStat(path: string): { name: string; user: number; sys: number } {
  const stat = readFileSync(path, 'utf8');
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields after the command name start at field 3 (state); utime is field 14, stime field 15.
  return { name: stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')')), user: (Number(rest[11]) * 1e6) / CLK_TCK, sys: (Number(rest[12]) * 1e6) / CLK_TCK };
}

/** utime and stime of a process (all its threads), in microseconds. */
export function cpuUs(pid: number): { user: number; sys: number } {
  return readStat(`/proc/${pid}/stat`);
}

/** Which part of the process a thread is, by its id and name (/proc/<pid>/task/<tid>/comm). */
export function threadKind(pid: number, tid: string, name: string): string {
  if (tid === String(pid)) return 'main';
  if (name.startsWith('V8') || name.startsWith('DelayedTask')) return 'V8 helpers';
  if (name === 'WorkerThread') return 'store thread';
  if (name.startsWith('v8:Prof')) return 'profiler'; // --cpu-prof's own thread
  return 'other';
}

export interface ThreadCpu { user: number; sys: number; voluntary: number; involuntary: number }

/**
 * CPU µs and context switches of each kind of thread (threadKind): the main thread (thread id =
 * pid, the event loop), V8 helpers (GC and compiler), the store thread (SQLite or Postgres), the
 * profiler's, other.
 */
export function threadsCpu(pid: number): Map<string, ThreadCpu> {
  const out = new Map<string, ThreadCpu>();
  let tids: string[] = [];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tids) {
    try {
      const t = readStat(`/proc/${pid}/task/${tid}/stat`);
      const status = readFileSync(`/proc/${pid}/task/${tid}/status`, 'utf8');
      const kind = threadKind(pid, tid, t.name);
      const sum = out.get(kind) ?? { user: 0, sys: 0, voluntary: 0, involuntary: 0 };
      sum.user += t.user;
      sum.sys += t.sys;
      sum.voluntary += Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      sum.involuntary += Number(/^nonvoluntary_ctxt_switches:\s+(\d+)/m.exec(status)?.[1] ?? 0);
      out.set(kind, sum);
    } catch {
      // the thread ended between the listing and the read
    }
  }
  return out;
}
