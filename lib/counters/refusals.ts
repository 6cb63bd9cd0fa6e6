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

  /** Remembers a window that reached its limit (below it nothing is worth keeping) and passes the verdict on. */
  note(id: string, limit: number, v: Verdict): Verdict {
    if (v.count >= limit && v.msLeft > 0) {
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

  /** Nothing is held: a caller may skip building an id to ask about (the common case). */
  get empty(): boolean {
    return this.seen.size === 0;
  }

  /** Whether the window was seen over `limit` (with `next`: at it or over). */
  refused(id: string, limit: number, next = false): boolean {
    const s = this.seen.get(id);
    if (s === undefined) return false;
    if (s.until <= this.now()) {
      this.seen.delete(id);
      return false;
    }
    return next ? s.count >= limit : s.count > limit;
  }
}
