// The benchmarks' one registry of what they start: child processes, temporary directories and
// async undo steps (a Postgres database, Redis counters), each registered as it is created, and
// one cleanup that removes them all, on error, on exit and on a signal. Every bench (run.ts,
// streams.ts, soak.ts) starts its processes through spawnNode() or track(): nothing outlives a run.

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));

export function log(msg: string): void {
  process.stderr.write(`[bench] ${msg}\n`);
}

const children = new Set<ChildProcess>();
const temps: string[] = [];
const undo: Array<() => Promise<void>> = [];

/** Registers a child so cleanup() and exit kill it; it leaves the registry when it exits. */
export function track<T extends ChildProcess>(proc: T): T {
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  return proc;
}

/** An async step cleanup() runs, newest first (dropping a database, deleting counters). */
export function onCleanup(step: () => Promise<void>): void {
  undo.push(step);
}

export function tempDir(tag: string): string {
  const d = mkdtempSync(join(tmpdir(), `sluice-bench-${tag}-`));
  temps.push(d);
  return d;
}

function killAll(): void {
  for (const c of children) {
    if (c.exitCode !== null || c.signalCode !== null || c.pid === undefined) continue;
    try {
      process.kill(c.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  children.clear();
}

function removeTemp(): void {
  for (const d of temps.splice(0)) rmSync(d, { recursive: true, force: true });
}

let cleaning: Promise<void> | undefined;
/**
 * Kills every child at once (synchronously, before the first await), then runs the undo steps and
 * removes the temporary directories. Idempotent: a signal and the failure it causes share one.
 */
export function cleanup(): Promise<void> {
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
/** Whether a signal stopped the run (its failure is then not worth a stack trace). */
export function wasInterrupted(): boolean {
  return interrupted;
}
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    interrupted = true;
    log(`${sig}: stopping every process`);
    void cleanup().finally(() => process.exit(130));
  });
}

export interface Spawned {
  proc: ChildProcess;
  pid: number;
  /** The last 64 KB of stdout + stderr. */
  output(): string;
  /** Every stdout line that parsed as JSON (sluice's pino lines). */
  lines: Array<Record<string, any>>;
}

/** A Node script of the project in its own process, on the project's Node, registered. */
export function spawnNode(args: string[], env: NodeJS.ProcessEnv, nodeFlags: string[] = []): Spawned {
  const proc = track(spawn(process.execPath, [...nodeFlags, ...args], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] }));
  let tail = '';
  let rest = '';
  const lines: Array<Record<string, any>> = [];
  proc.stdout!.setEncoding('utf8').on('data', (c: string) => {
    tail = (tail + c).slice(-65536);
    const parts = (rest + c).split('\n');
    rest = parts.pop()!;
    for (const p of parts) {
      try {
        lines.push(JSON.parse(p));
      } catch {
        // not a log line
      }
    }
  });
  proc.stderr!.setEncoding('utf8').on('data', (c: string) => (tail = (tail + c).slice(-65536)));
  return { proc, pid: proc.pid!, output: () => tail, lines };
}
