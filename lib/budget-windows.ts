// The day and month spend counters of one kind of spender (a profile, a key): their names in
// Counters for each UTC window, their seeding from the store's ledger when missing (restarts, new
// instances), adds, and the raising of counters that fell behind the ledger. lib/budget.ts holds
// one of these per kind and turns their spend into stages. Spend is integer micro-USD, read and
// added through one SpendCache shared by every kind (so one flush carries all their increments).

import type { SpendCache } from './counters/spend-cache.ts';

export const DAY_TTL_S = 2 * 86_400;
export const MONTH_TTL_S = 32 * 86_400;

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

export type Windows = ReturnType<typeof windows>;

/** One spender's counter names for the windows of one UTC day. */
export interface WindowKeys { w: Windows; dayKey: string; monthKey: string }

export function micro(usd: number): number {
  return Math.round(usd * 1e6);
}

/** What sets one kind of spender apart: its counters' names and where the store keeps its spend. */
export interface SpenderKind<Id> {
  /** The counter names of the spender's day and month windows. */
  names(id: Id, w: Windows): { dayKey: string; monthKey: string };
  /** The spender's spend in USD since `since` (ISO), from the store's ledger. */
  ledger(id: Id, since: string): Promise<number>;
}

export class SpendWindows<Id extends string | number> {
  private readonly cache: SpendCache;
  private readonly kind: SpenderKind<Id>;
  /** The windows of the current UTC day, recomputed only when the clock leaves that day. */
  private w = windows(0);
  /** Window keys this process has seeded (or found) in Counters: add() need not read them again. */
  private readonly seeded = new WeakSet<object>();
  private readonly names = new Map<Id, WindowKeys>();

  constructor(cache: SpendCache, kind: SpenderKind<Id>) {
    this.cache = cache;
    this.kind = kind;
  }

  /** The spender's counter names for the day of `now` (one object per spender and day). */
  keys(id: Id, now: number): WindowKeys {
    if (now < this.w.dayStart || now >= this.w.dayEnd) {
      this.w = windows(now);
      this.names.clear();
    }
    let n = this.names.get(id);
    if (!n) this.names.set(id, (n = { w: this.w, ...this.kind.names(id, this.w) }));
    return n;
  }

  /** Current spend in micro-USD for the day and month windows, seeding from the store when missing. */
  async spend(id: Id, now: number): Promise<{ day: number; month: number; w: Windows }> {
    const { w, dayKey, monthKey } = this.keys(id, now);
    // Both reads in flight at once: on Redis they travel in one pipelined round trip.
    const dayRead = this.cache.get(dayKey);
    const monthRead = this.cache.get(monthKey);
    const day = (await dayRead) ?? (await this.seed(dayKey, id, w.dayStart, DAY_TTL_S));
    const month = (await monthRead) ?? (await this.seed(monthKey, id, w.monthStart, MONTH_TTL_S));
    return { day, month, w };
  }

  /** Seeds a missing window from the store; while the store is away, counts from zero (unseeded,
   *  so a later call seeds it, and reconcile() raises a counter that started late). */
  private async seed(key: string, id: Id, since: number, ttlS: number): Promise<number> {
    let stored: number;
    try {
      stored = micro(await this.kind.ledger(id, new Date(since).toISOString()));
    } catch {
      return 0;
    }
    return this.cache.seed(key, stored, ttlS);
  }

  /**
   * Adds `amount` micro-USD to both windows of the time `at` it was spent: at once once this
   * process has seeded those windows, else a promise that seeds them first.
   */
  add(id: Id, amount: number, at: number): void | Promise<void> {
    const k = this.keys(id, at);
    if (this.seeded.has(k)) return this.incr(k, amount);
    return this.seedThenAdd(k, id, at, amount);
  }

  /** Seeds the windows first, so the store's earlier spend is not lost; once per window and process is enough
   *  (a counter lost later, say a Redis flush, is raised again by reconcile()). */
  private async seedThenAdd(k: WindowKeys, id: Id, at: number, amount: number): Promise<void> {
    await this.spend(id, at);
    this.seeded.add(k);
    this.incr(k, amount);
  }

  private incr(k: WindowKeys, amount: number): void {
    this.cache.incr(k.dayKey, amount, DAY_TTL_S);
    this.cache.incr(k.monthKey, amount, MONTH_TTL_S);
  }

  /** Raises the spender's counters to the ledger's sums where they fell behind (a counter lost or reset). */
  async reconcile(id: Id, now: number): Promise<void> {
    const { w, dayKey, monthKey } = this.keys(id, now);
    const { day, month } = await this.spend(id, now);
    const [storeDay, storeMonth] = await Promise.all([
      this.kind.ledger(id, new Date(w.dayStart).toISOString()),
      this.kind.ledger(id, new Date(w.monthStart).toISOString()),
    ]);
    if (micro(storeDay) > day) await this.cache.incr(dayKey, micro(storeDay) - day, DAY_TTL_S);
    if (micro(storeMonth) > month) await this.cache.incr(monthKey, micro(storeMonth) - month, MONTH_TTL_S);
  }
}

