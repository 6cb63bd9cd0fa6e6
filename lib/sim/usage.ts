// Per-key usage accounting: the USD each bearer key was charged, all time and in the current UTC
// day, Monday-start week and month (protocols.md §4.1), on the sim's injectable clock. A period's
// figure reads 0 once the clock has left it. Charges arrive only from a settling generation, so a
// key's usage and the generations' total_cost always add up; nothing else may write here.

export type LimitReset = 'daily' | 'weekly' | 'monthly' | null;

export interface UsageView { usage: number; usage_daily: number; usage_weekly: number; usage_monthly: number }

interface Tally { total: number; day: number; daily: number; week: number; weekly: number; month: number; monthly: number }
interface Periods { day: number; week: number; month: number }

function periods(ms: number): Periods {
  const day = Math.floor(ms / 86_400_000);
  const d = new Date(ms);
  // 1970-01-01 was a Thursday; +3 makes weeks start on Monday.
  return { day, week: Math.floor((day + 3) / 7), month: d.getUTCFullYear() * 12 + d.getUTCMonth() };
}

/** USD sums are rounded to 1e-10 so that repeated additions compare equal to the figures sent. */
export const round10 = (x: number): number => Math.round(x * 1e10) / 1e10;

const ZERO: UsageView = Object.freeze({ usage: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0 });

export class Ledger {
  #tallies = new Map<string, Tally>();
  #now: () => number;

  constructor(now: () => number) {
    this.#now = now;
  }

  charge(bearer: string, cost: number): void {
    const p = periods(this.#now());
    let u = this.#tallies.get(bearer);
    if (u === undefined) {
      u = { total: 0, day: p.day, daily: 0, week: p.week, weekly: 0, month: p.month, monthly: 0 };
      this.#tallies.set(bearer, u);
    }
    if (u.day !== p.day) { u.day = p.day; u.daily = 0; }
    if (u.week !== p.week) { u.week = p.week; u.weekly = 0; }
    if (u.month !== p.month) { u.month = p.month; u.monthly = 0; }
    u.total = round10(u.total + cost);
    u.daily = round10(u.daily + cost);
    u.weekly = round10(u.weekly + cost);
    u.monthly = round10(u.monthly + cost);
  }

  total(bearer: string): number {
    return this.#tallies.get(bearer)?.total ?? 0;
  }

  view(bearer: string): UsageView {
    const u = this.#tallies.get(bearer);
    if (u === undefined) return ZERO;
    const p = periods(this.#now());
    return {
      usage: u.total,
      usage_daily: u.day === p.day ? u.daily : 0,
      usage_weekly: u.week === p.week ? u.weekly : 0,
      usage_monthly: u.month === p.month ? u.monthly : 0,
    };
  }
}

/** The usage that counts against a limit with this reset period (all time when it never resets). */
export function usageInLimitPeriod(v: UsageView, reset: LimitReset): number {
  return reset === 'daily' ? v.usage_daily : reset === 'weekly' ? v.usage_weekly : reset === 'monthly' ? v.usage_monthly : v.usage;
}

/** limit − usage in the limit's period, never below 0; null for an unlimited key. */
export function limitRemaining(limit: number | null, reset: LimitReset, v: UsageView): number | null {
  return limit === null ? null : round10(Math.max(0, limit - usageInLimitPeriod(v, reset)));
}
