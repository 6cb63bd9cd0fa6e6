// Windows a process has seen at or over their limit, until they end: what lets the early steps
// refuse an address or a key known to be over its limit without asking the backing (a fixed
// window's count never falls before it ends). Shared by both Counters backings; never consulted
// for an allowance (only a read of the window knows that).

import type { Verdict } from './counters.ts';

interface Seen { count: number; until: number }

export class Refusals {
  private readonly seen = new Map<string, Seen>();
  private readonly now: () => number;
  private sweepAt = 0;

  constructor(now: () => number = Date.now) {
    this.now = now;
  }

  static id(bucket: string, limit: number, windowS: number, blockS = 0): string {
    return `${limit}:${windowS}:${blockS}:${bucket}`;
  }

  /** Whether a verdict is worth remembering: its window reached the limit and has not ended. */
  static keeps(limit: number, v: Verdict): boolean {
    return v.count >= limit && v.msLeft > 0;
  }

  /** Remembers a window that reached its limit (below it nothing is worth keeping) and passes the verdict on. */
  note(id: string, limit: number, v: Verdict): Verdict {
    if (Refusals.keeps(limit, v)) {
      const now = this.now();
      const old = this.seen.get(id);
      this.seen.set(id, { count: Math.max(v.count, old && old.until > now ? old.count : 0), until: now + v.msLeft });
      // Expired entries go now and then, so the map holds only live windows.
      if (now >= this.sweepAt) {
        this.sweepAt = now + 60_000;
        for (const [k, s] of this.seen) if (s.until <= now) this.seen.delete(k);
      }
    }
    return v;
  }

  /**
   * Whether the window was seen over `limit` (with `next`: at it or over). While nothing is held
   * (the common case, asked once per request) no id is built.
   */
  refused(bucket: string, limit: number, windowS: number, blockS = 0, next = false): boolean {
    if (this.seen.size === 0) return false;
    const id = Refusals.id(bucket, limit, windowS, blockS);
    const s = this.seen.get(id);
    if (s === undefined) return false;
    if (s.until <= this.now()) {
      this.seen.delete(id);
      return false;
    }
    return next ? s.count >= limit : s.count > limit;
  }
}
