// The Counters interface: short-lived shared numbers (rate-limit windows, the IP block, budget
// spend, auto-routing sessions). One interface, two backings: process memory (memory.ts) and
// Redis (redis.ts), held to one contract suite (tests/lib/counters.contract.ts). Amounts are
// integers (spend in micro-USD): Redis's INCRBY takes integers only, and integers add up exactly.

export interface Verdict {
  allowed: boolean;
  /** Points counted in the current window, this hit included. */
  count: number;
  /** Milliseconds until the window (or block) ends. */
  msLeft: number;
}

/** One window of a `check`: a peek (the IP block) or a consume of one point. */
export interface Check {
  bucket: string;
  limit: number;
  windowS: number;
  blockS?: number;
  peek?: boolean;
}

export interface CheckResult {
  verdicts: Array<Verdict | undefined>;
  values: Array<number | undefined>;
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
  /**
   * Several windows in one step (on Redis one script, so one round trip): each check in order, a
   * peek or a consume of one point. After the first refusal nothing more is counted: the later
   * checks answer undefined. `reads` are plain counters read in the same step (as `get`).
   * The memory backing answers at once, without a promise: a caller awaits only a promise.
   */
  check(checks: readonly Check[], reads?: readonly string[]): CheckResult | Promise<CheckResult>;
  /**
   * Whether this process saw the window refusing (count over `limit`; with `next`, at it, so the
   * next point is refused) by consume, peek or check, and the window has not ended. No I/O. Exact
   * when it answers true: a fixed window's count never falls before it ends; what another process
   * counted shows only once this process reads the window.
   */
  refused(bucket: string, limit: number, windowS: number, opts?: { blockS?: number; next?: boolean }): boolean;
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
