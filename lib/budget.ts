// Budget spend per profile and UTC window, and the degradation state it implies (spec "Budget
// degradation"). Spend lives in Counters as integer micro-USD, one counter per profile per UTC
// day and per UTC month, seeded from the store when missing (restarts, new instances) and
// reconciled with it periodically. The clock is injected so tests cross midnights and month ends.
// Reads and adds go through SpendCache: no spend round trip on a request's path, adds batched.

import type { Profile } from './config.ts';
import type { Counters } from './counters/counters.ts';
import { SpendCache, type SpendCacheOptions } from './counters/spend-cache.ts';
import { DEGRADATIONS, type Degradation, type Store } from './store/store.ts';

const DAY_TTL_S = 2 * 86_400;
const MONTH_TTL_S = 32 * 86_400;

export interface BudgetState {
  day_usd: number;
  month_usd: number;
  percent: number;
  degradation: Degradation;
  blocked: boolean;
  /** Seconds until the window that blocks resets (only meaningful when blocked). */
  retryAfterS: number;
  /** When the current day and month windows reset (ms since the epoch). */
  dayResetAt: number;
  monthResetAt: number;
}

/** The budget stages, mildest first: the degradations, then `blocked` (refused until a window resets). */
export const BUDGET_STAGES = [...DEGRADATIONS, 'blocked'] as const;
export type BudgetStage = (typeof BUDGET_STAGES)[number];
/** The percentage of a budget (the larger of day and month) from which each stage holds. */
export const STAGE_FROM = { 'fast-only': 70, 'max-tokens': 85, blocked: 100 } as const satisfies Record<Exclude<BudgetStage, 'none'>, number>;

/** The UTC day and month around `now`: their starts and ends (ms since the epoch) and their names. */
export function windows(now: number) {
  const d = new Date(now);
  const dayStart = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate());
  const monthStart = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  const dayEnd = dayStart + 86_400_000;
  const monthEnd = Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  const day = new Date(dayStart).toISOString().slice(0, 10);
  const month = day.slice(0, 7);
  return { dayStart, dayEnd, monthStart, monthEnd, day, month };
}

type Windows = ReturnType<typeof windows>;
/** A profile's counter names for the windows of one UTC day. */
interface WindowKeys { w: Windows; dayKey: string; monthKey: string }

export function micro(usd: number): number {
  return Math.round(usd * 1e6);
}

/** The stage a percentage of a budget puts a profile in. */
export function degradationFor(percent: number): BudgetStage {
  if (percent >= STAGE_FROM.blocked) return 'blocked';
  if (percent >= STAGE_FROM['max-tokens']) return 'max-tokens';
  if (percent >= STAGE_FROM['fast-only']) return 'fast-only';
  return 'none';
}

/** What a stage does: the degradation requests get, and whether they are refused (a blocked profile stays at max-tokens). */
export function stageEffects(stage: BudgetStage): { degradation: Degradation; blocked: boolean } {
  return stage === 'blocked' ? { degradation: 'max-tokens', blocked: true } : { degradation: stage, blocked: false };
}

/** When a blocked profile may spend again: the month's end once the month's budget is spent, else the day's end. */
export function blockingResetAt(w: Pick<Windows, 'dayEnd' | 'monthEnd'>, monthPercent: number): number {
  return monthPercent >= STAGE_FROM.blocked ? w.monthEnd : w.dayEnd;
}

/** The state of a profile with `day` and `month` micro-USD spent in the windows `w`. */
function stateOf(profile: Profile, day: number, month: number, w: Windows, now: number): BudgetState {
  // From the integer micro-USD amounts: one correctly rounded division, so spend exactly at a
  // threshold reads as that threshold (0.0595 / 0.07 * 100 would give 84.99999999999999).
  const dayPct = (day * 100) / micro(profile.budget.daily_usd);
  const monthPct = (month * 100) / micro(profile.budget.monthly_usd);
  const percent = Math.max(dayPct, monthPct);
  const { degradation, blocked } = stageEffects(degradationFor(percent));
  const resetAt = blockingResetAt(w, monthPct);
  return {
    day_usd: day / 1e6,
    month_usd: month / 1e6,
    percent,
    degradation,
    blocked,
    retryAfterS: Math.max(3600, Math.ceil((resetAt - now) / 1000)),
    dayResetAt: w.dayEnd,
    monthResetAt: w.monthEnd,
  };
}

export class Budget {
  /** Spend reads from memory (refreshed behind), increments batched off the request path. */
  private readonly counters: SpendCache;
  private readonly store: Store;
  /** The wall clock the UTC windows follow (the /metrics window gauges read it too). */
  readonly now: () => number;

  /** `now` is the wall clock the UTC windows follow; `cache` tunes (and in tests drives) the SpendCache. */
  constructor(opts: { counters: Counters; store: Store; now: () => number; cache?: SpendCacheOptions }) {
    this.counters = new SpendCache(opts.counters, opts.cache);
    this.store = opts.store;
    this.now = opts.now;
  }

  /** The windows of the current UTC day, recomputed only when the clock leaves that day. */
  private w = windows(0);
  /** Window keys this process has seeded (or found) in Counters: add() need not read them again. */
  private readonly seeded = new WeakSet<object>();
  private readonly names = new Map<string, WindowKeys>();

  private keys(profile: string, now: number): WindowKeys {
    if (now < this.w.dayStart || now >= this.w.dayEnd) {
      this.w = windows(now);
      this.names.clear();
    }
    let n = this.names.get(profile);
    if (!n) this.names.set(profile, (n = { w: this.w, dayKey: `spend:day:${profile}:${this.w.day}`, monthKey: `spend:month:${profile}:${this.w.month}` }));
    return n;
  }

  /** Current spend in micro-USD for the day and month windows, seeding from the store when missing. */
  private async spend(profile: string, now: number): Promise<{ day: number; month: number; w: Windows }> {
    const { w, dayKey, monthKey } = this.keys(profile, now);
    // Both reads in flight at once: on Redis they travel in one pipelined round trip.
    const dayRead = this.counters.get(dayKey);
    const monthRead = this.counters.get(monthKey);
    const day = (await dayRead) ?? (await this.seed(dayKey, profile, w.dayStart, DAY_TTL_S));
    const month = (await monthRead) ?? (await this.seed(monthKey, profile, w.monthStart, MONTH_TTL_S));
    return { day, month, w };
  }

  /** Seeds a missing window from the store; while the store is away, counts from zero (unseeded,
   *  so a later call seeds it, and reconcile() raises a counter that started late). */
  private async seed(key: string, profile: string, since: number, ttlS: number): Promise<number> {
    let stored: number;
    try {
      stored = micro(await this.store.ledgerSpendSince(profile, new Date(since).toISOString())); // from the spend ledger
    } catch {
      return 0;
    }
    return this.counters.seed(key, stored, ttlS);
  }

  /**
   * The profile's budget state: at once when this process knows both windows' spend (every
   * request after the first), else a promise that reads (or seeds) them first.
   */
  state(profile: Profile): BudgetState | Promise<BudgetState> {
    const now = this.now();
    const { w, dayKey, monthKey } = this.keys(profile.name, now);
    const day = this.counters.now(dayKey);
    const month = this.counters.now(monthKey);
    if (typeof day === 'number' && typeof month === 'number') return stateOf(profile, day, month, w, now);
    return this.spend(profile.name, now).then((s) => stateOf(profile, s.day, s.month, s.w, now));
  }

  /**
   * Adds a recorded cost to both windows of the time it was spent: at once once this process has
   * seeded those windows, else a promise that seeds them first.
   */
  add(profile: string, usd: number, at: number): void | Promise<void> {
    const amount = micro(usd);
    if (amount <= 0) return;
    const k = this.keys(profile, at);
    if (this.seeded.has(k)) return this.incr(k, amount);
    return this.seedThenAdd(k, profile, at, amount);
  }

  /** Seeds the windows first, so the store's earlier spend is not lost; once per window and process is enough
   *  (a counter lost later, say a Redis flush, is raised again by reconcile()). */
  private async seedThenAdd(k: WindowKeys, profile: string, at: number, amount: number): Promise<void> {
    await this.spend(profile, at);
    this.seeded.add(k);
    this.incr(k, amount);
  }

  private incr(k: WindowKeys, amount: number): void {
    this.counters.incr(k.dayKey, amount, DAY_TTL_S);
    this.counters.incr(k.monthKey, amount, MONTH_TTL_S);
  }

  // Cost reconciliation (ring 1: lib/upstream/reconcile.ts).
  /**
   * Prepares the correction of spend already counted at `at` (a row whose estimate the router's
   * figure is about to replace). Call it BEFORE the row changes in the store, and apply the result
   * only if this process changed the row: the counters to touch are the windows of `at` that are
   * still current and exist now. A counter missing now is seeded later from the store, which then
   * holds the new cost, so adding the difference to it would count it twice; and one that exists
   * now cannot be seeded again, so the difference is counted exactly once. The difference is taken
   * in whole micro-USD, as add() counted the row (Σ micro(cost) stays the counter's value).
   */
  async correction(profile: string, at: number): Promise<(oldUsd: number, newUsd: number) => Promise<void>> {
    const now = windows(this.now());
    const then = windows(at);
    const targets: Array<[string, number]> = [];
    if (then.day === now.day) targets.push([`spend:day:${profile}:${now.day}`, DAY_TTL_S]);
    if (then.month === now.month) targets.push([`spend:month:${profile}:${now.month}`, MONTH_TTL_S]);
    const live: Array<[string, number]> = [];
    for (const [key, ttl] of targets) if ((await this.counters.get(key)) !== undefined) live.push([key, ttl]);
    return async (oldUsd, newUsd) => {
      const amount = micro(newUsd) - micro(oldUsd);
      if (amount !== 0) await Promise.all(live.map(([key, ttl]) => this.counters.incr(key, amount, ttl)));
    };
  }

  /** The profile's spend counters now (day, month): read with the request's other counters in one step. */
  spendKeys(profile: string): [string, string] {
    const k = this.keys(profile, this.now());
    return [k.dayKey, k.monthKey];
  }

  /** Spend read by that step (undefined: the counter is missing, and state() seeds it). */
  observe(key: string, value: number | undefined): void {
    this.counters.observe(key, value);
  }

  /** Sends the increments still held in memory (at shutdown; otherwise the SpendCache's timer does, 10 ms after the first). */
  flush(): Promise<void> {
    return this.counters.flush();
  }

  /** Raises the counters to the store's sums where they fell behind (a counter lost or reset). */
  async reconcile(profiles: Iterable<string>): Promise<void> {
    const now = this.now();
    for (const profile of profiles) {
      const { w, dayKey, monthKey } = this.keys(profile, now);
      const { day, month } = await this.spend(profile, now);
      const [storeDay, storeMonth] = await Promise.all([
        this.store.ledgerSpendSince(profile, new Date(w.dayStart).toISOString()), // the spend ledger
        this.store.ledgerSpendSince(profile, new Date(w.monthStart).toISOString()),
      ]);
      if (micro(storeDay) > day) await this.counters.incr(dayKey, micro(storeDay) - day, DAY_TTL_S);
      if (micro(storeMonth) > month) await this.counters.incr(monthKey, micro(storeMonth) - month, MONTH_TTL_S);
    }
  }
}
