// Plays `sluice.socket` for tests and benchmarks: one listening TCP socket on 127.0.0.1 that
// outlives every process serving it, handed to each generation as fd 3 with LISTEN_FDS=1 and
// LISTEN_PID set to that generation's own pid, as systemd's socket activation does. Owns the
// holder process, the generations it starts (their stdout JSON lines parsed, readiness, exit) and
// their removal at close().
//
// Why a Python holder: the socket must be held open by a process that never calls accept(), or
// that process would take connections meant for sluice. Node cannot hold a listening socket
// without accepting on it (libuv accepts as soon as a net.Server listens, 'connection' handler or
// not), and Node cannot receive an fd from another process either. So a small python3 process
// (HOLD below) binds and listens, never selects on nor accepts that socket, and gives a copy of it
// over a unix control socket (SCM_RIGHTS) to whoever connects. Each generation starts as a python3
// trampoline (EXEC below), spawned by Node with piped stdout and stderr: it takes the copy, puts it
// on fd 3, sets LISTEN_FDS=1 and LISTEN_PID=its own pid, and execs the generation's command in the
// same process (same pid, same pipes), which is what `sh -c 'LISTEN_PID=$$ exec …'` does under a
// systemd-like holder. The holder leaves when its stdin closes and each generation is SIGKILLed
// when its parent dies (PR_SET_PDEATHSIG), so nothing outlives a test killed on a timeout.

import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter, once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { collectLogLines, type LogLine } from './log-lines.ts';

const HOLD = `
import json, os, select, socket, sys
backlog, control = int(sys.argv[1]), sys.argv[2]
lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lst.bind(('127.0.0.1', 0))
lst.listen(backlog)
ctl = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
ctl.bind(control)
ctl.listen(64)
print(json.dumps({'port': lst.getsockname()[1]}), flush=True)
# lst is never selected on nor accepted: its connections wait in its queue for a generation.
while True:
    ready, _, _ = select.select([ctl, sys.stdin], [], [])
    if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
        break
    if ctl in ready:
        c, _ = ctl.accept()
        socket.send_fds(c, [b'L'], [lst.fileno()])
        c.close()
`;

const EXEC = `
import ctypes, os, signal, socket, sys
# SIGKILL when the parent (the test or the bench) dies: no generation outlives the run.
ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG, kept across execve
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect(sys.argv[2])
_, fds, _, _ = socket.recv_fds(c, 1, 1)
c.close()
if fds[0] != 3:
    os.dup2(fds[0], 3)
    os.close(fds[0])
os.execve(sys.argv[3], sys.argv[3:], dict(os.environ, LISTEN_FDS='1', LISTEN_PID=str(os.getpid())))
`;

export type { LogLine };

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  /** performance.now() when it exited. */
  at: number;
}

export interface Generation {
  name: string;
  pid: number;
  /** Its process (a benchmark registers it for cleanup); signal it through term() and signal(). */
  child: ChildProcess;
  /** Every stdout line, parsed (non-JSON lines kept as { raw }). */
  lines: LogLine[];
  /** The last 64 KB of stderr. */
  stderr(): string;
  /** The ready line; rejects if the process exits first. */
  ready: Promise<LogLine>;
  /** The first line from index `from` matching `pred`, waiting for it; rejects on exit or after `timeoutMs`. */
  waitForLine(pred: (l: LogLine) => boolean, o?: { from?: number; timeoutMs?: number }): Promise<LogLine>;
  exited: Promise<Exit>;
  /** Whether it has exited. */
  readonly ended: boolean;
  /** Signals sent to it, in order (by term(), signal() or close()). */
  signals: NodeJS.Signals[];
  term(): void;
  signal(sig: NodeJS.Signals): void;
}

export interface SocketHolder {
  port: number;
  /** The holder process's pid. */
  pid: number;
  origin: string;
  generations: Generation[];
  /** Starts a generation of the holder's command on the shared socket, with exactly `env` (plus LISTEN_*). */
  spawnGeneration(env: NodeJS.ProcessEnv, name?: string): Generation;
  /** SIGKILLs any generation still running (noted in its `signals`), then ends the holder. */
  close(): Promise<void>;
}

export interface HolderOptions {
  /** Each generation's command: the program and its arguments. */
  argv: string[];
  cwd?: string;
  /** The `msg` of the stdout JSON line that means ready (default 'sluice ready'). */
  readyMsg?: string;
  backlog?: number;
}

function watchGeneration(child: ChildProcess, name: string, readyMsg: string): Generation {
  const lines: LogLine[] = [];
  const events = new EventEmitter();
  events.setMaxListeners(0);
  let stderr = '';
  let ended = false;
  collectLogLines(child.stdout!, lines, () => events.emit('line'));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-65536)));
  // 'close': stdout has been read to its end, so a line written just before the exit is seen.
  const exited = new Promise<Exit>((resolve) => {
    child.once('close', (code: number | null, signal: NodeJS.Signals | null) => {
      ended = true;
      resolve({ code, signal, at: performance.now() });
      events.emit('line');
    });
  });
  const signals: NodeJS.Signals[] = [];
  const g: Generation = {
    name,
    pid: child.pid!,
    child,
    lines,
    stderr: () => stderr,
    ready: undefined as unknown as Promise<LogLine>,
    async waitForLine(pred, o = {}) {
      const deadline = performance.now() + (o.timeoutMs ?? 60_000);
      let i = o.from ?? 0;
      for (;;) {
        for (; i < lines.length; i++) if (pred(lines[i]!)) return lines[i]!;
        if (ended) throw new Error(`${name} (pid ${child.pid}) exited before the awaited line; last lines ${JSON.stringify(lines.slice(-3))}; stderr: ${stderr.slice(-2000)}`);
        const left = deadline - performance.now();
        if (left <= 0) throw new Error(`${name} (pid ${child.pid}): timed out waiting for a log line; last lines ${JSON.stringify(lines.slice(-3))}; stderr: ${stderr.slice(-2000)}`);
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), left);
        await once(events, 'line', { signal: ac.signal }).catch(() => {});
        clearTimeout(timer);
      }
    },
    exited,
    get ended() {
      return ended;
    },
    signals,
    term() {
      g.signal('SIGTERM');
    },
    signal(sig) {
      signals.push(sig);
      if (!ended) child.kill(sig);
    },
  };
  g.ready = g.waitForLine((l) => l.msg === readyMsg);
  g.ready.catch(() => {}); // awaited by the caller; not an unhandled rejection meanwhile
  return g;
}

/** Starts the holder and waits until its socket listens. */
export async function startSocketHolder(o: HolderOptions): Promise<SocketHolder> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-socket-'));
  const control = join(dir, 'control');
  const holder = spawn('python3', ['-c', HOLD, String(o.backlog ?? 4096), control], { stdio: ['pipe', 'pipe', 'pipe'] });
  let holderErr = '';
  holder.stderr.setEncoding('utf8').on('data', (c: string) => (holderErr += c));
  const holderExit = once(holder, 'close');
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    holder.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
      const nl = out.indexOf('\n');
      if (nl >= 0) resolve(JSON.parse(out.slice(0, nl)).port);
    });
    holder.once('close', (code) => reject(new Error(`the socket holder exited (${code}) before listening: ${holderErr}`)));
    holder.once('error', reject);
  });
  const generations: Generation[] = [];
  return {
    port,
    pid: holder.pid!,
    origin: `http://127.0.0.1:${port}`,
    generations,
    spawnGeneration(env, name = `gen-${generations.length + 1}`) {
      const child = spawn('python3', ['-c', EXEC, String(process.pid), control, ...o.argv], { cwd: o.cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
      const g = watchGeneration(child, name, o.readyMsg ?? 'sluice ready');
      generations.push(g);
      return g;
    },
    async close() {
      for (const g of generations) if (!g.ended) g.signal('SIGKILL');
      await Promise.all(generations.map((g) => g.exited));
      if (holder.exitCode === null && holder.signalCode === null) {
        holder.stdin.end();
        await holderExit;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
