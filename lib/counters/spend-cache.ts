// Budget spend counters as the request path sees them: reads served from what this process last
// learned (a value read in the request's one counted step, see `observe`; else refreshed in the
// background once older than `readTtlMs`, awaited only the first time), increments added up in
// memory and sent together `flushMs` after the first of them (0: at the end of the event-loop
// turn; on Redis, one pipelined write for all of them), never on a request's path. What this
// process added counts at once in its own reads; what others add shows once they flush and this
// process reads again. Only the shared backing's answers set a counter's value: an answer from
// RedisCounters' in-memory fallback (given while it is degraded) is not the deployment's total.
// The flush timer and the clock are injectable, so tests decide when a flush runs.

import type { Counters } from './counters.ts';

interface Tally {
  /** The backing's value at the last read or increment answer (undefined: the counter does not exist). */
  value: number | undefined;
  /** The clock's reading at that answer (see `SpendCacheOptions.now`). */
  at: number;
  /** Whether any answer came yet (until then a read is awaited). */
  known: boolean;
  /** Added here, not sent yet. */
  pending: number;
  /** Sent, not answered yet: amount by the increment's sequence number. */
  flights: Map<number, number>;
  /**
   * Sent and answered by the backing's fallback, not by the shared backing (the increment timed out
   * or Redis was away): counted here until the shared backing next answers, whose value includes
   * each of them that reached it (a timed-out INCRBY may still have run).
   */
  unshared: number;
  /** Sequence number of the last increment sent, and of the one whose answer `value` is (or, for a read, the last sent). */
  sent: number;
  valueSeq: number;
  ttlS: number;
  reading?: Promise<void>;
}

/** What `now` answers for a counter this process has not read yet. */
export const UNREAD = Symbol('unread');

export interface SpendCacheOptions {
  /** How long a value read serves before it is refreshed behind the caller (ms, default 250). */
  readTtlMs?: number;
  /** How long after the first pending increment they are sent (ms, default 10; 0: at the end of the turn). */
  flushMs?: number;
  /** Runs `fn` after `ms` (0: at the end of the event-loop turn). Default: an unref'd setTimeout or setImmediate. */
  schedule?: (fn: () => void, ms: number) => void;
  /** The clock a value's age is measured on (ms). Default: performance.now. */
  now?: () => number;
}

function unrefTimer(fn: () => void, ms: number): void {
  if (ms > 0) setTimeout(fn, ms).unref();
  else setImmediate(fn).unref();
}

export class SpendCache {
  private readonly counters: Counters;
  private readonly tallies = new Map<string, Tally>();
  private readonly readTtlMs: number;
  private readonly flushMs: number;
  private readonly timer: (fn: () => void, ms: number) => void;
  private readonly clock: () => number;
  private scheduled = false;
  private flushing: Promise<void> = Promise.resolve();

  constructor(counters: Counters, opts: SpendCacheOptions = {}) {
    this.counters = counters;
    this.readTtlMs = opts.readTtlMs ?? 250;
    // 10 ms: under load the increments of ~50 responses travel together, one add per counter.
    // Flushed at the end of each event-loop turn instead, they cost 0.46 Redis commands per 2 KB
    // request (`npm run bench -- --store postgres`, Redis's commandstats): a turn rarely ends more
    // than one or two responses. Another process sees this spend 10 ms later at most, well inside
    // the 5 s within which a request's spend must count everywhere, and far less than a response takes.
    this.flushMs = opts.flushMs ?? 10;
    this.timer = opts.schedule ?? unrefTimer;
    this.clock = opts.now ?? (() => performance.now());
  }

  private tally(key: string): Tally {
    let t = this.tallies.get(key);
    if (!t) this.tallies.set(key, (t = { value: undefined, at: 0, known: false, pending: 0, flights: new Map(), unshared: 0, sent: 0, valueSeq: 0, ttlS: 0 }));
    return t;
  }

  /** The value plus what it does not include yet: pending, unshared, and increments sent after its own. */
  private total(t: Tally): number | undefined {
    let local = t.pending + t.unshared;
    for (const [seq, amount] of t.flights) if (seq > t.valueSeq) local += amount;
    return t.value === undefined ? (local > 0 ? local : undefined) : t.value + local;
  }

  private read(key: string, t: Tally): Promise<void> {
    t.reading ??= this.counters.get(key).then((v) => this.learn(t, v)).finally(() => (t.reading = undefined));
    return t.reading;
  }

  /**
   * Takes a value read from the backing, unless an increment is in flight: the read may or may not
   * include it (the backing may have applied it and not answered yet), so taking it would count
   * that increment twice or lose it. The increment's own answer brings the total instead. One
   * connection answers in order, so with nothing in flight the value includes every increment sent.
   * A value the fallback answered (the backing is degraded) is this process's own count, not the
   * deployment's: it is taken only for a counter not known at all (then it is all there is).
   */
  private learn(t: Tally, v: number | undefined): void {
    if (t.flights.size > 0) return;
    if (t.known && this.counters.degraded) {
      t.at = this.clock(); // not re-read on every request while Redis is away
      return;
    }
    this.take(t, v, t.sent);
  }

  /** Takes the shared backing's value as of increment `seq`: every unshared increment was sent before it. */
  private take(t: Tally, v: number | undefined, seq: number): void {
    t.value = v;
    t.valueSeq = seq;
    t.unshared = 0;
    t.at = this.clock();
    t.known = true;
  }

  /**
   * What this process knows of the counter, at once: `UNREAD` when it never learned it (get()
   * must read it first). A stale value is answered too, and refreshed behind.
   */
  now(key: string): number | undefined | typeof UNREAD {
    const t = this.tally(key);
    if (!t.known) return UNREAD;
    if (this.clock() - t.at >= this.readTtlMs) this.read(key, t).catch(() => {});
    return this.total(t);
  }

  async get(key: string): Promise<number | undefined> {
    const v = this.now(key);
    if (v !== UNREAD) return v;
    const t = this.tally(key);
    while (!t.known) await this.read(key, t); // a read overlapping an increment is not taken
    return this.total(t);
  }

  /** A value read elsewhere, in the same round trip as other work (plugins/rate-limit.ts). */
  observe(key: string, value: number | undefined): void {
    this.learn(this.tally(key), value);
  }

  async seed(key: string, value: number, ttlS: number): Promise<number> {
    const t = this.tally(key);
    this.take(t, await this.counters.seed(key, value, ttlS), t.sent);
    return this.total(t)!;
  }

  /** Counts `amount` here at once (no promise); the backing gets it with the next flush. */
  incr(key: string, amount: number, ttlS: number): number {
    const t = this.tally(key);
    t.pending += amount;
    t.ttlS = ttlS;
    this.schedule();
    return this.total(t)!;
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    this.timer(() => void this.flush(), this.flushMs);
  }

  /** Sends every pending increment (all in one tick: on Redis they travel in one pipelined write). */
  flush(): Promise<void> {
    this.scheduled = false;
    const sends: Array<Promise<void>> = [];
    for (const [key, t] of this.tallies) {
      if (t.pending === 0) {
        // A window nobody reads or adds to any more (yesterday's) is forgotten.
        if (t.flights.size === 0 && !t.reading && t.known && t.unshared === 0 && this.clock() - t.at > 60_000) this.tallies.delete(key);
        continue;
      }
      const amount = t.pending;
      const seq = ++t.sent;
      t.pending = 0;
      t.flights.set(seq, amount);
      sends.push(this.counters.incr(key, amount, t.ttlS).then(
        (total) => {
          t.flights.delete(seq);
          // An answer older than the value's is not taken: the Counters interface does not promise
          // answers in order (RedisCounters gives them in order since its incr is one script; an
          // earlier version answered a counter's first add only after its EXPIRE, and lost spend).
          // The backing applied them in order, so an older answer is already inside a newer one,
          // and every increment sent before this one is inside this answer (total() stops adding them).
          if (seq < t.valueSeq) return;
          // Answered by the fallback (RedisCounters is degraded: the INCRBY timed out or Redis is
          // away): a total of this process's memory, not the shared counter's (a window seeded in
          // Redis at 30 USD would read as the 2 USD just added). Whether the INCRBY reached Redis
          // is unknown, so the amount counts here until Redis answers again, and is not sent again:
          // a second INCRBY would count twice whenever the first had run.
          if (this.counters.degraded) t.unshared += amount;
          else this.take(t, total, seq);
        },
        // Not counted: back to pending for the next flush (RedisCounters falls back to memory rather than fail).
        () => {
          t.flights.delete(seq);
          t.pending += amount;
          this.schedule();
        },
      ));
    }
    this.flushing = Promise.all([this.flushing, ...sends]).then(() => {});
    return this.flushing;
  }
}
