// The Counters interface: short-lived shared numbers (rate-limit windows, the IP block, budget
// spend, auto-routing sessions). One interface, two backings: process memory (memory.ts) and
// Redis (redis.ts), held to one contract suite. Amounts are integers (spend in micro-USD):
// rate-limiter-flexible rejects fractional points, and integers add up exactly.

export interface Verdict {
  allowed: boolean;
  /** Points counted in the current window, this hit included. */
  count: number;
  /** Milliseconds until the window (or block) ends. */
  msLeft: number;
}

export interface Counters {
  readonly kind: 'memory' | 'redis';
  /** True while a shared backing is unreachable and this process counts on its own. */
  readonly degraded: boolean;
  /**
   * Counts `points` into the fixed window `bucket`. Allowed while the window's total stays
   * within `limit`; with `blockS`, going over blocks the bucket for that long.
   */
  consume(bucket: string, limit: number, windowS: number, opts?: { points?: number; blockS?: number }): Promise<Verdict>;
  /** The state of a window without counting (count 0 when none). */
  peek(bucket: string, limit: number, windowS: number, opts?: { blockS?: number }): Promise<Verdict>;
  /** Adds to an integer counter that expires `ttlS` after it was created; returns the new total. */
  incr(key: string, amount: number, ttlS: number): Promise<number>;
  /** The counter's value, or undefined when it does not exist. */
  get(key: string): Promise<number | undefined>;
  /** Sets a counter only when it does not exist yet (seeding from the store); returns the value now held. */
  seed(key: string, value: number, ttlS: number): Promise<number>;
  getText(key: string): Promise<string | undefined>;
  setText(key: string, value: string, ttlS: number): Promise<void>;
  close(): Promise<void>;
}
