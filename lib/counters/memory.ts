// Counters in process memory: the embedded default, and what one process falls back to while
// Redis is away. Windows are fixed: one starts with its first point and lasts its length, as the
// window script counts them on Redis (redis.ts), and going over a window with a block holds the
// bucket refused for the block's length. Everything here answers at once: `check`, the
// one step a request takes, returns its result without a promise (the async methods only wrap the
// same synchronous work). Plain counters and windows live in Maps with lazy expiry and an unref'd sweep.
// `snapshot` and `absorb` carry the counts to another process (carry.ts moves them through the data
// directory); neither is on a request's path.

import type { Check, CheckResult, Counters, Verdict } from './counters.ts';
import { Refusals } from './refusals.ts';

interface Entry { value: number | string; expiresAt: number }
/** A window's count and when it (or its block) ends, ms since the epoch. */
interface Window { count: number; endsAt: number }

/**
 * Every live window ([id, count, endsAt]) and entry ([key, value, expiresAt]) of one process, in
 * ms since the epoch, so another process on the machine can read them. `pid` and `seq` name the
 * writer and its snapshot (filled in by carry.ts), `at` is when it was taken.
 */
export type CountersSnapshot = {
  v: 1;
  pid: number;
  seq: number;
  at: number;
  windows: Array<[string, number, number]>;
  entries: Array<[string, number | string, number]>;
};

/** How many of a snapshot's windows and entries changed this process's counts in an `absorb`. */
export interface Absorbed { windows: number; entries: number }

const OPEN: Verdict = Object.freeze({ allowed: true, count: 0, msLeft: 0 });

export class MemoryCounters implements Counters {
  readonly kind = 'memory' as const;
  readonly degraded = false;
  /** By Refusals.id (limit, length, block and bucket): windows of different limits never share a count. */
  private readonly windows = new Map<string, Window>();
  private readonly entries = new Map<string, Entry>();
  private readonly sweep: NodeJS.Timeout;
  private readonly refusals: Refusals;
  /** The clock, ms since the epoch (Date.now unless a test sets one). */
  private readonly now: () => number;

  constructor(opts: { now?: () => number } = {}) {
    this.now = opts.now ?? Date.now;
    this.refusals = new Refusals(this.now);
    this.sweep = setInterval(() => {
      const now = this.now();
      for (const [k, e] of this.entries) if (e.expiresAt <= now) this.entries.delete(k);
      for (const [k, w] of this.windows) if (w.endsAt <= now) this.windows.delete(k);
    }, 60_000).unref();
  }

  /**
   * Counts `points` into a window. Over the limit for the first time with a block: the bucket is
   * refused for `blockS` from now (its count kept), however much of the window was left.
   */
  private count(id: string, points: number, limit: number, windowS: number, blockS: number): Verdict {
    const now = this.now();
    let w = this.windows.get(id);
    if (w === undefined || w.endsAt <= now) this.windows.set(id, (w = { count: points, endsAt: now + windowS * 1000 }));
    else w.count += points;
    if (w.count <= limit) return { allowed: true, count: w.count, msLeft: w.endsAt - now };
    if (blockS > 0 && w.count <= limit + points) w.endsAt = now + blockS * 1000;
    return { allowed: false, count: w.count, msLeft: w.endsAt - now };
  }

  private look(id: string, limit: number): Verdict {
    const w = this.windows.get(id);
    const now = this.now();
    if (w === undefined || w.endsAt <= now) return OPEN;
    return { allowed: w.count <= limit, count: w.count, msLeft: w.endsAt - now };
  }

  private consumeNow(bucket: string, limit: number, windowS: number, points: number, blockS = 0): Verdict {
    const id = Refusals.id(bucket, limit, windowS, blockS);
    return this.refusals.note(id, limit, this.count(id, points, limit, windowS, blockS));
  }

  private peekNow(bucket: string, limit: number, windowS: number, blockS = 0): Verdict {
    const id = Refusals.id(bucket, limit, windowS, blockS);
    return this.refusals.note(id, limit, this.look(id, limit));
  }

  async consume(bucket: string, limit: number, windowS: number, opts: { points?: number; blockS?: number } = {}): Promise<Verdict> {
    return this.consumeNow(bucket, limit, windowS, opts.points ?? 1, opts.blockS);
  }

  async peek(bucket: string, limit: number, windowS: number, opts: { blockS?: number } = {}): Promise<Verdict> {
    return this.peekNow(bucket, limit, windowS, opts.blockS);
  }

  /** Answers at once (no promise): the embedded store's request path never waits a tick for its counters. */
  check(checks: readonly Check[], reads: readonly string[] = []): CheckResult {
    const verdicts: Array<Verdict | undefined> = [];
    let open = true;
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i]!;
      const v = !open ? undefined : c.peek ? this.peekNow(c.bucket, c.limit, c.windowS, c.blockS) : this.consumeNow(c.bucket, c.limit, c.windowS, 1, c.blockS);
      if (v && !v.allowed) open = false;
      verdicts.push(v);
    }
    const values: Array<number | undefined> = [];
    for (let i = 0; i < reads.length; i++) values.push(this.value(reads[i]!));
    return { verdicts, values };
  }

  refused(bucket: string, limit: number, windowS: number, opts: { blockS?: number; next?: boolean } = {}): boolean {
    return this.refusals.refused(bucket, limit, windowS, opts.blockS, opts.next);
  }

  private live(key: string): Entry | undefined {
    const e = this.entries.get(key);
    if (e && e.expiresAt <= this.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return e;
  }

  private value(key: string): number | undefined {
    const e = this.live(key);
    return e === undefined ? undefined : Number(e.value);
  }

  async incr(key: string, amount: number, ttlS: number): Promise<number> {
    const e = this.live(key);
    if (e) return (e.value = Number(e.value) + amount);
    this.entries.set(key, { value: amount, expiresAt: this.now() + ttlS * 1000 });
    return amount;
  }

  async get(key: string): Promise<number | undefined> {
    return this.value(key);
  }

  async seed(key: string, value: number, ttlS: number): Promise<number> {
    const e = this.live(key);
    if (e) return Number(e.value);
    this.entries.set(key, { value, expiresAt: this.now() + ttlS * 1000 });
    return value;
  }

  async getText(key: string): Promise<string | undefined> {
    const e = this.live(key);
    return e === undefined ? undefined : String(e.value);
  }

  async setText(key: string, value: string, ttlS: number): Promise<void> {
    this.entries.set(key, { value, expiresAt: this.now() + ttlS * 1000 });
  }

  /** Every live window and entry now; the expired ones are left out. */
  snapshot(): CountersSnapshot {
    const now = this.now();
    const windows: CountersSnapshot['windows'] = [];
    const entries: CountersSnapshot['entries'] = [];
    for (const [id, w] of this.windows) if (w.endsAt > now) windows.push([id, w.count, w.endsAt]);
    for (const [key, e] of this.entries) if (e.expiresAt > now) entries.push([key, e.value, e.expiresAt]);
    return { v: 1, pid: process.pid, seq: 0, at: now, windows, entries };
  }

  /**
   * Merges another process's counts into this one's, never lowering a count and never adding the
   * same points twice. `base` is the earlier snapshot of that process already absorbed here (or one
   * its counts started from): of a window (id and endsAt equal: the same window instance) or a
   * numeric entry (key and expiresAt equal) found in both, only the growth since `base` is added.
   * A window this process started on its own (same id, another endsAt) gets the other's points too
   * and the later end of the two, so a block carries. A numeric entry likewise. Held nowhere here,
   * a window or entry is taken whole (the larger of the growth and the whole: the true total is at
   * least the other's). A text entry is taken only when this process holds none for the key.
   * Expired windows and entries are skipped. What this process's Refusals remember needs no change:
   * the next read of a window notes its merged state.
   */
  absorb(snap: CountersSnapshot, base?: CountersSnapshot): Absorbed {
    const now = this.now();
    const done: Absorbed = { windows: 0, entries: 0 };
    const baseWindows = new Map<string, [number, number]>();
    const baseEntries = new Map<string, [number | string, number]>();
    if (base) {
      for (const [id, count, endsAt] of base.windows) baseWindows.set(id, [count, endsAt]);
      for (const [key, value, expiresAt] of base.entries) baseEntries.set(key, [value, expiresAt]);
    }
    for (const [id, count, endsAt] of snap.windows) {
      if (endsAt <= now) continue;
      const before = baseWindows.get(id);
      const amount = count - (before !== undefined && before[1] === endsAt ? before[0] : 0);
      if (amount <= 0) continue;
      const w = this.windows.get(id);
      if (w === undefined || w.endsAt <= now) this.windows.set(id, { count: Math.max(amount, count), endsAt });
      else {
        w.count += amount;
        if (endsAt > w.endsAt) w.endsAt = endsAt;
      }
      done.windows++;
    }
    for (const [key, value, expiresAt] of snap.entries) {
      if (expiresAt <= now) continue;
      const e = this.live(key);
      if (typeof value === 'string') {
        if (e !== undefined) continue;
        this.entries.set(key, { value, expiresAt });
      } else {
        const before = baseEntries.get(key);
        const amount = value - (before !== undefined && before[1] === expiresAt && typeof before[0] === 'number' ? before[0] : 0);
        if (amount <= 0) continue;
        if (e === undefined) this.entries.set(key, { value: Math.max(amount, value), expiresAt });
        else {
          e.value = Number(e.value) + amount;
          if (expiresAt > e.expiresAt) e.expiresAt = expiresAt;
        }
      }
      done.entries++;
    }
    return done;
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
  }
}
