// Carrying the embedded counters (MemoryCounters) across a restart and an overlapping upgrade,
// through one file, `carry/counters.json` in the data directory: a CountersSnapshot written whole
// (a temporary file, then a rename) by a process when its drain begins, once it has told every
// connection to close (lib/lifecycle/drain.ts), and once more when it exits.
// A process starting reads it before it takes traffic; from then on it watches that folder and
// merges each newer snapshot another process writes. It owns the bases of those merges: what
// each writer's counts already held here, so no point is added twice (see MemoryCounters.absorb).
// Nothing here throws into the process: a missing file is normal, a bad one or a failing watcher
// is logged (once) and ignored, a failed write is logged.

import { mkdirSync, readFileSync, statSync, watch as fsWatch, type BigIntStats } from 'node:fs';
import { mkdir, open, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { CountersSnapshot, MemoryCounters } from './memory.ts';

/**
 * The folder of the file, in the data directory. A folder of its own because a watcher wakes for
 * every change in its folder, and the data directory also holds SQLite's database and its WAL,
 * written with every batch of rows.
 */
export const CARRY_DIR = 'carry';
export const CARRY_FILE = 'counters.json';

/** What `watch` needs of a directory watcher (node:fs `watch` by default). */
export interface DirWatcher {
  close(): void;
  on(event: 'error', listener: (err: Error) => void): unknown;
}
export type WatchDir = (dir: string, onChange: (filename: string | null) => void) => DirWatcher;

const watchDir: WatchDir = (dir, onChange) => fsWatch(dir, { persistent: false }, (_event, filename) => onChange(filename));

function isFiniteNumber(x: unknown): x is number {
  return typeof x === 'number' && Number.isFinite(x);
}

/** The snapshot in `text`, or a reason it is not one. */
export function parseSnapshot(text: string): CountersSnapshot | string {
  let o: unknown;
  try {
    o = JSON.parse(text);
  } catch (err) {
    return `not JSON (${(err as Error).message})`;
  }
  if (typeof o !== 'object' || o === null) return 'not an object';
  const s = o as Record<string, unknown>;
  if (s.v !== 1) return `unknown version ${JSON.stringify(s.v)}`;
  if (!Number.isSafeInteger(s.pid) || !isFiniteNumber(s.seq) || !isFiniteNumber(s.at)) return 'pid, seq or at missing';
  if (!Array.isArray(s.windows) || !Array.isArray(s.entries)) return 'windows or entries missing';
  for (const w of s.windows) {
    if (!Array.isArray(w) || w.length !== 3 || typeof w[0] !== 'string' || !isFiniteNumber(w[1]) || !isFiniteNumber(w[2])) return 'a malformed window';
  }
  for (const e of s.entries) {
    if (!Array.isArray(e) || e.length !== 3 || typeof e[0] !== 'string' || !(isFiniteNumber(e[1]) || typeof e[1] === 'string') || !isFiniteNumber(e[2])) return 'a malformed entry';
  }
  return s as unknown as CountersSnapshot;
}

function sameFile(a: BigIntStats, b: BigIntStats | undefined): boolean {
  return b !== undefined && a.ino === b.ino && a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs;
}

export class CounterCarry {
  private readonly counters: MemoryCounters;
  private readonly file: string;
  private readonly dir: string;
  private readonly log: Logger;
  private readonly pid: number;
  private readonly watchDir: WatchDir;
  /** The snapshot read at start-up: the base for a writer not seen since (its counts started from it too). */
  private start: CountersSnapshot | undefined;
  /** The last snapshot absorbed from each other writer, by pid: the base of its next one. */
  private readonly last = new Map<number, CountersSnapshot>();
  /** The highest seq written or read: each write goes above it, so the file's seq only grows. */
  private seq = 0;
  private watcher: DirWatcher | undefined;
  private readonly warned = new Set<string>();
  /** The writes not yet on disk, one after another: each resolves when the file is renamed into place (or failed). */
  private writing: Promise<void> = Promise.resolve();
  private pendingWrites = 0;
  /** A change seen while this process was writing: polled once the write is done (it may be that write's own rename). */
  private pollWhenWritten = false;
  /** The file as this process last wrote or read it: an event for the same file (its own rename, a second event of one) reads nothing. */
  private seen: BigIntStats | undefined;

  /**
   * `pid` names this process's snapshots (default process.pid; tests play several processes in
   * one); `watch` replaces node:fs `watch`.
   */
  constructor(opts: { counters: MemoryCounters; dataDir: string; log: Logger; pid?: number; watch?: WatchDir }) {
    this.counters = opts.counters;
    this.dir = join(opts.dataDir, CARRY_DIR);
    this.file = join(this.dir, CARRY_FILE);
    this.log = opts.log;
    this.pid = opts.pid ?? process.pid;
    this.watchDir = opts.watch ?? watchDir;
  }

  /** At start-up, before traffic: takes the counts of the last snapshot written, if any. */
  load(): void {
    this.seen = this.stat();
    const snap = this.read();
    if (snap === undefined) {
      this.log.info({ windows: 0, entries: 0 }, 'no counters carried over from a previous process');
      return;
    }
    const absorbed = this.counters.absorb(snap);
    this.start = snap;
    this.last.set(snap.pid, snap);
    this.log.info({ from: snap.pid, seq: snap.seq, ...absorbed }, 'counters carried over from the previous process');
  }

  /** From now on, merges each newer snapshot another process writes (until `close`). */
  watch(): void {
    if (this.watcher) return;
    try {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      this.watcher = this.watchDir(this.dir, (filename) => {
        if (filename !== null && filename !== CARRY_FILE) return;
        try {
          this.poll();
        } catch (err) {
          this.warnOnce('poll', err, 'merging counters from another process failed');
        }
      });
      this.watcher.on('error', (err) => this.warnOnce('watch', err, 'watching for other processes\' counters failed'));
    } catch (err) {
      this.warnOnce('watch', err, 'watching for other processes\' counters failed');
    }
  }

  /**
   * Reads the file and merges it when another process wrote it and it is newer than the last
   * snapshot merged from that process: with that snapshot as base, or for a process not seen
   * since start-up, the snapshot read then (the other process's counts started from it too).
   */
  poll(): void {
    if (this.pendingWrites > 0) {
      this.pollWhenWritten = true;
      return;
    }
    const st = this.stat();
    if (st === undefined || sameFile(st, this.seen)) return;
    this.seen = st;
    const snap = this.read();
    if (snap === undefined || snap.pid === this.pid) return;
    const last = this.last.get(snap.pid);
    if (last !== undefined && snap.seq <= last.seq) return;
    const absorbed = this.counters.absorb(snap, last ?? this.start);
    this.last.set(snap.pid, snap);
    this.log.info({ from: snap.pid, seq: snap.seq, ...absorbed }, 'counters merged from the previous process');
  }

  /**
   * Writes this process's counts as they are now (the drain's start, the spread's end, the exit).
   * The snapshot is taken at once; the file is written, synced and renamed off the event loop, so
   * the responses still being sent do not wait for the disk. Resolves once it is in place, after
   * any earlier write; never rejects (a failure is logged).
   */
  write(): Promise<void> {
    let text: string;
    try {
      const snap = this.counters.snapshot();
      snap.pid = this.pid;
      snap.seq = this.seq = this.seq + 1;
      text = JSON.stringify(snap);
    } catch (err) {
      this.log.error({ err, file: this.file }, 'the counters could not be written for the next process');
      return this.writing;
    }
    this.pendingWrites++;
    this.writing = this.writing.then(() => this.writeFile(text)).finally(() => {
      if (--this.pendingWrites > 0 || !this.pollWhenWritten) return;
      this.pollWhenWritten = false;
      try {
        this.poll();
      } catch (err) {
        this.warnOnce('poll', err, 'merging counters from another process failed');
      }
    });
    return this.writing;
  }

  private async writeFile(text: string): Promise<void> {
    const tmp = `${this.file}.${this.pid}.tmp`;
    try {
      await mkdir(this.dir, { recursive: true, mode: 0o700 });
      await rm(tmp, { force: true });
      const fh = await open(tmp, 'wx', 0o600);
      try {
        await fh.writeFile(text);
        await fh.sync();
      } finally {
        await fh.close();
      }
      await rename(tmp, this.file);
      this.seen = this.stat();
    } catch (err) {
      this.log.error({ err, file: this.file }, 'the counters could not be written for the next process');
      await rm(tmp, { force: true }).catch(() => {
        // Nothing more to do: the next write removes it first.
      });
    }
  }

  close(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  /** The file's identity (inode, size, change time to the nanosecond); undefined when there is none. */
  private stat(): BigIntStats | undefined {
    try {
      return statSync(this.file, { bigint: true, throwIfNoEntry: false });
    } catch {
      return undefined; // read() says why, if it fails too
    }
  }

  /** The file's snapshot; undefined when there is none (normal) or it is unreadable (warned once). */
  private read(): CountersSnapshot | undefined {
    let text: string;
    try {
      text = readFileSync(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') this.warnOnce('read', err, 'the carried counters could not be read: ignored');
      return undefined;
    }
    const snap = parseSnapshot(text);
    if (typeof snap === 'string') {
      this.warnOnce('read', new Error(snap), 'the carried counters are malformed: ignored');
      return undefined;
    }
    this.seq = Math.max(this.seq, snap.seq);
    return snap;
  }

  private warnOnce(what: string, err: unknown, msg: string): void {
    if (this.warned.has(what)) return;
    this.warned.add(what);
    this.log.warn({ err, file: this.file }, msg);
  }
}
