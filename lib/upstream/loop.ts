// The one scheduler shape for background work that talks to the router (usage refresh, cost
// reconciliation, the model catalog refresh): start, stop, runOnce; an outage is logged once when
// it begins and once when it ends, and retries back off (doubling, capped) meanwhile. Timers are
// injectable and unref'd, so tests drive a loop without sleeping and a loop never holds the process
// open. A run never overlaps another, and stop() waits for the one in progress.

import type { Logger } from 'pino';

export interface Timers {
  setTimeout(fn: () => void, ms: number): unknown;
  clearTimeout(handle: unknown): void;
}

export const realTimers: Timers = {
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (h) => clearTimeout(h as NodeJS.Timeout),
};

/** Logs a problem once per key until that key is well again (then once more, saying so). */
export class OnceLog {
  private readonly down = new Map<string, number>();
  private readonly log: Logger;

  constructor(log: Logger) {
    this.log = log;
  }

  problem(key: string, msg: string, fields: Record<string, unknown>): void {
    const n = this.down.get(key);
    this.down.set(key, (n ?? 0) + 1);
    if (n === undefined) this.log.warn(fields, msg);
  }

  ok(key: string, msg: string, fields: Record<string, unknown> = {}): void {
    const n = this.down.get(key);
    if (n === undefined) return;
    this.down.delete(key);
    this.log.info({ ...fields, failures: n }, msg);
  }

  isDown(key: string): boolean {
    return this.down.has(key);
  }
}

export interface LoopOptions {
  /** Names the loop in its log lines ("usage refresh", "cost reconciliation"). */
  name: string;
  log: Logger;
  everyMs: number;
  /** Delay before the first run after start() (default everyMs). */
  firstMs?: number;
  /** Longest wait between retries while failing (default the larger of everyMs and 60 s). */
  maxBackoffMs?: number;
  /** One round of work; throwing marks the round failed. */
  run: () => Promise<void>;
  timers?: Timers;
}

export class Loop {
  private readonly o: LoopOptions;
  private readonly timers: Timers;
  private readonly outage: OnceLog;
  private timer: unknown;
  private running?: Promise<boolean>;
  private stopped = true;
  /** Failed rounds in a row. */
  failures = 0;
  /** Rounds completed (for /health and tests). */
  rounds = 0;

  constructor(o: LoopOptions) {
    this.o = o;
    this.timers = o.timers ?? realTimers;
    this.outage = new OnceLog(o.log);
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(this.o.firstMs ?? this.o.everyMs);
  }

  /** Runs a round now (or joins the one in progress); true when it succeeded. */
  runOnce(): Promise<boolean> {
    this.running ??= this.round().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** The wait before the next round: the period, or a doubling backoff while failing. */
  nextDelay(): number {
    if (this.failures === 0) return this.o.everyMs;
    const cap = this.o.maxBackoffMs ?? Math.max(this.o.everyMs, 60_000);
    return Math.min(cap, this.o.everyMs * 2 ** Math.min(this.failures, 30));
  }

  private async round(): Promise<boolean> {
    try {
      await this.o.run();
      this.failures = 0;
      this.outage.ok('round', `${this.o.name}: working again`, { loop: this.o.name });
      return true;
    } catch (err) {
      this.failures++;
      this.outage.problem('round', `${this.o.name}: failing; retrying with backoff (logged once until it works again)`, { loop: this.o.name, err });
      return false;
    } finally {
      this.rounds++;
    }
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = this.timers.setTimeout(() => {
      this.timer = undefined;
      void this.runOnce().then(() => this.schedule(this.nextDelay()));
    }, ms);
  }

  /** No further rounds; resolves once the round in progress (if any) has finished. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== undefined) this.timers.clearTimeout(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
