// Budget spend per profile, per capped key and per session, and the stage it implies (spec
// "Budget degradation"). A profile's spend, and a key's with caps, live in Counters as integer
// micro-USD, one counter per spender per UTC day and per UTC month (lib/budget-windows.ts), seeded
// from the store's ledger when missing (restarts, new instances) and reconciled with it
// periodically; a session's spend of today counts from its first request (one day counter, its
// label hashed). A request is handled at the higher stage of its profile's and its key's budget.
// The clock is injected so tests cross midnights and month ends. Reads and adds go through
// SpendCache: no spend round trip on a request's path, adds batched.

import { createHash } from 'node:crypto';
import type { Profile } from './config.ts';
import type { Counters } from './counters/counters.ts';
import { SpendCache, UNREAD, type SpendCacheOptions } from './counters/spend-cache.ts';
import { DAY_TTL_S, micro, MONTH_TTL_S, SpendWindows, windows, type Windows } from './budget-windows.ts';
import { DEGRADATIONS, type Degradation, type KeyRow, type RequestRow, type Store } from './store/store.ts';

export { micro, windows } from './budget-windows.ts';

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

/** Seconds from `now` to a block's reset at `at`, at least an hour (clients that honour retry-after do not come back within the hour). */
export function retryAfterS(at: number, now: number): number {
  return Math.max(3600, Math.ceil((at - now) / 1000));
}

/** The state of a profile with `day` and `month` micro-USD spent in the windows `w`. */
function stateOf(profile: Profile, day: number, month: number, w: Windows, now: number): BudgetState {
  const s = standingOf('profile', profile.name, profile.budget.daily_usd, profile.budget.monthly_usd, day, month, w);
  const { degradation, blocked } = stageEffects(s.stage);
  return {
    day_usd: s.day_usd,
    month_usd: s.month_usd,
    percent: s.percent,
    degradation,
    blocked,
    retryAfterS: retryAfterS(resetOf(s), now),
    dayResetAt: w.dayEnd,
    monthResetAt: w.monthEnd,
  };
}

/** One budget's standing: the profile's or the key's. Shared between requests: never modified. */
export interface Standing {
  scope: 'profile' | 'key';
  /** The profile's name, or the key's. */
  name: string;
  stage: BudgetStage;
  /** The higher of day % and month % (a cap that is not set counts 0 %). */
  percent: number;
  day_usd: number;
  month_usd: number;
  /** The budget's (or cap's) limits; null: the key has no cap for that window. */
  daily_usd: number | null;
  monthly_usd: number | null;
  /** When the current day and month windows reset (ms since the epoch). */
  dayResetAt: number;
  monthResetAt: number;
}

/** What a request is handled at: the higher stage of its profile's and its key's budget. Shared between requests: never modified. */
export interface BudgetView {
  stage: BudgetStage;
  /** The binding budget's percentage. */
  percent: number;
  /** The standing the stage comes from: the key's when its stage is higher (or equal at a higher percentage; both exhausted: when it resets later), else the profile's. */
  binding: Standing;
  profile: Standing;
  /** Null for a key without caps. */
  key: Standing | null;
}

/** Where each stage sits, mildest first. */
const STAGE_RANK: Record<BudgetStage, number> = { none: 0, 'fast-only': 1, 'max-tokens': 2, blocked: 3 };

/** The standing of a budget with limits `daily`/`monthly` (null: none) and `day`/`month` micro-USD spent in the windows `w`. */
export function standingOf(scope: Standing['scope'], name: string, daily: number | null, monthly: number | null, day: number, month: number, w: Pick<Windows, 'dayEnd' | 'monthEnd'>): Standing {
  // From the integer micro-USD amounts: one correctly rounded division, so spend exactly at a
  // threshold reads as that threshold (0.0595 / 0.07 * 100 would give 84.99999999999999).
  const percent = Math.max(daily === null ? 0 : (day * 100) / micro(daily), monthly === null ? 0 : (month * 100) / micro(monthly));
  return {
    scope, name, stage: degradationFor(percent), percent, day_usd: day / 1e6, month_usd: month / 1e6,
    daily_usd: daily, monthly_usd: monthly, dayResetAt: w.dayEnd, monthResetAt: w.monthEnd,
  };
}

/** The window whose limit a standing has reached: the month once its monthly limit is spent, else the day. */
export function exhaustedWindow(s: Standing): 'day' | 'month' {
  return s.monthly_usd !== null && micro(s.month_usd) >= micro(s.monthly_usd) ? 'month' : 'day';
}

/** When an exhausted standing may spend again: the month's end once its monthly limit is spent, else the day's end. */
export function resetOf(s: Standing): number {
  return exhaustedWindow(s) === 'month' ? s.monthResetAt : s.dayResetAt;
}

/**
 * The binding view of a profile's and a key's standings: the higher stage binds, and on the same
 * stage the higher percentage. When both are exhausted, the one that resets later binds (it
 * decides when requests may resume), the profile's on a tie.
 */
function combine(profile: Standing, key: Standing): BudgetView {
  const d = STAGE_RANK[key.stage] - STAGE_RANK[profile.stage];
  const keyBinds = d === 0 && key.stage === 'blocked' ? resetOf(key) > resetOf(profile) : d > 0 || (d === 0 && key.percent > profile.percent);
  const binding = keyBinds ? key : profile;
  return { stage: binding.stage, percent: binding.percent, binding, profile, key };
}

/** Session labels hashed for counter names, held until the day changes or this many are held. */
const SESSION_NAMES_MAX = 10_000;

export class Budget {
  /** Spend reads from memory (refreshed behind), increments batched off the request path. */
  private readonly counters: SpendCache;
  /** The wall clock the UTC windows follow (the /metrics window gauges read it too). */
  readonly now: () => number;
  private readonly profiles: SpendWindows<string>;
  private readonly keyWindows: SpendWindows<number>;
  /** Keys this process saw with caps, and profiles it saw with a session cap: their rows' spend is counted for them too. */
  private readonly cappedKeys = new Set<number>();
  private readonly sessionCapped = new Set<string>();
  /** Per profile, the view of its last spend for keys without caps: reused while that spend stays the same. */
  private readonly views = new Map<string, { profile: Profile; day: number; month: number; dayEnd: number; view: BudgetView }>();
  /** `profile \u001f session` → the session's day counter, for the day `sessionDay`. */
  private readonly sessionNames = new Map<string, string>();
  private sessionDay = '';

  /** `now` is the wall clock the UTC windows follow; `cache` tunes (and in tests drives) the SpendCache. */
  constructor(opts: { counters: Counters; store: Store; now: () => number; cache?: SpendCacheOptions }) {
    this.counters = new SpendCache(opts.counters, opts.cache);
    this.now = opts.now;
    const store = opts.store;
    this.profiles = new SpendWindows(this.counters, {
      names: (profile, w) => ({ dayKey: `spend:day:${profile}:${w.day}`, monthKey: `spend:month:${profile}:${w.month}` }),
      ledger: (profile, since) => store.ledgerSpendSince(profile, since), // the spend ledger
    });
    this.keyWindows = new SpendWindows(this.counters, {
      names: (id, w) => ({ dayKey: `spend:key:day:${id}:${w.day}`, monthKey: `spend:key:month:${id}:${w.month}` }),
      ledger: (id, since) => store.keyLedgerSpendSince(id, since),
    });
  }

  /**
   * The profile's budget state: at once when this process knows both windows' spend (every
   * request after the first), else a promise that reads (or seeds) them first.
   */
  state(profile: Profile): BudgetState | Promise<BudgetState> {
    const now = this.now();
    const { w, dayKey, monthKey } = this.profiles.keys(profile.name, now);
    const day = this.counters.now(dayKey);
    const month = this.counters.now(monthKey);
    if (typeof day === 'number' && typeof month === 'number') return stateOf(profile, day, month, w, now);
    return this.profiles.spend(profile.name, now).then((s) => stateOf(profile, s.day, s.month, s.w, now));
  }

  /**
   * The stage a request of `key` is handled at, with both standings: at once when this process
   * knows the spend, else a promise that reads (or seeds) it first. A key without caps reads
   * nothing more than its profile's spend, and its view is reused while that spend stays the same.
   */
  view(profile: Profile, key: KeyRow): BudgetView | Promise<BudgetView> {
    const now = this.now();
    const pk = this.profiles.keys(profile.name, now);
    const day = this.counters.now(pk.dayKey);
    const month = this.counters.now(pk.monthKey);
    if (key.daily_usd == null && key.monthly_usd == null) {
      if (typeof day === 'number' && typeof month === 'number') return this.profileView(profile, day, month, pk.w);
      return this.profiles.spend(profile.name, now).then((s) => this.profileView(profile, s.day, s.month, s.w));
    }
    this.cappedKeys.add(key.id);
    const kk = this.keyWindows.keys(key.id, now);
    const keyDay = this.counters.now(kk.dayKey);
    const keyMonth = this.counters.now(kk.monthKey);
    if (typeof day === 'number' && typeof month === 'number' && typeof keyDay === 'number' && typeof keyMonth === 'number') {
      return this.keyView(profile, key, day, month, keyDay, keyMonth, pk.w);
    }
    return Promise.all([this.profiles.spend(profile.name, now), this.keyWindows.spend(key.id, now)])
      .then(([p, k]) => this.keyView(profile, key, p.day, p.month, k.day, k.month, p.w));
  }

  private profileView(profile: Profile, day: number, month: number, w: Windows): BudgetView {
    const last = this.views.get(profile.name);
    if (last !== undefined && last.profile === profile && last.day === day && last.month === month && last.dayEnd === w.dayEnd) return last.view;
    const standing = standingOf('profile', profile.name, profile.budget.daily_usd, profile.budget.monthly_usd, day, month, w);
    const view: BudgetView = { stage: standing.stage, percent: standing.percent, binding: standing, profile: standing, key: null };
    // The entry is updated in place: under load the spend changes with every response.
    if (last === undefined) this.views.set(profile.name, { profile, day, month, dayEnd: w.dayEnd, view });
    else {
      last.profile = profile;
      last.day = day;
      last.month = month;
      last.dayEnd = w.dayEnd;
      last.view = view;
    }
    return view;
  }

  private keyView(profile: Profile, key: KeyRow, day: number, month: number, keyDay: number, keyMonth: number, w: Windows): BudgetView {
    const own = standingOf('key', key.name, key.daily_usd ?? null, key.monthly_usd ?? null, keyDay, keyMonth, w);
    return combine(this.profileView(profile, day, month, w).profile, own);
  }

  /**
   * The session's spend of today in micro-USD (0 before its first cost): at once once this process
   * read its counter (the request's counted step reads it), else a promise. For a profile with a
   * session cap: from then on this process counts the spend of that profile's sessions.
   */
  sessionSpend(profile: Profile, session: string): number | Promise<number> {
    this.sessionCapped.add(profile.name);
    const key = this.sessionKey(profile.name, session, this.profiles.keys(profile.name, this.now()).w);
    const v = this.counters.now(key);
    if (v !== UNREAD) return v ?? 0;
    return this.counters.get(key).then((x) => x ?? 0);
  }

  /** The session's day counter: its label hashed, so the name stays short whatever the label. */
  private sessionKey(profile: string, session: string, w: Windows): string {
    if (w.day !== this.sessionDay || this.sessionNames.size >= SESSION_NAMES_MAX) {
      this.sessionNames.clear();
      this.sessionDay = w.day;
    }
    const id = `${profile}\u001f${session}`;
    let name = this.sessionNames.get(id);
    if (name === undefined) {
      name = `spend:session:day:${profile}:${createHash('sha256').update(session).digest('hex').slice(0, 24)}:${w.day}`;
      this.sessionNames.set(id, name);
    }
    return name;
  }

  /**
   * Adds a recorded cost to both windows of the time it was spent: at once once this process has
   * seeded those windows, else a promise that seeds them first.
   */
  add(profile: string, usd: number, at: number): void | Promise<void> {
    const amount = micro(usd);
    if (amount <= 0) return;
    return this.profiles.add(profile, amount, at);
  }

  /**
   * Adds a row's cost where it counts: its profile's windows, its key's when this process saw the
   * key with caps, and its session's day when its profile has a session cap. At once, except for
   * the first cost of a window this process has not seeded yet.
   */
  addRow(row: RequestRow): void | Promise<void> {
    const at = Date.parse(row.ts);
    const profile = this.add(row.profile, row.cost_usd, at);
    const amount = micro(row.cost_usd);
    if (amount <= 0) return profile;
    const key = row.key_id != null && this.cappedKeys.has(row.key_id) ? this.keyWindows.add(row.key_id, amount, at) : undefined;
    if (row.session !== null && this.sessionCapped.has(row.profile)) {
      this.counters.incr(this.sessionKey(row.profile, row.session, this.profiles.keys(row.profile, at).w), amount, DAY_TTL_S);
    }
    if (profile === undefined && key === undefined) return;
    return Promise.all([profile, key]).then(() => {});
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
   * A key's counters are not corrected here: reconcile() raises them to the ledger, which the
   * correction updates.
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

  /**
   * The spend counters a request reads in its one counted step (lib/admission.ts): its profile's
   * day and month; its key's too when the key has caps; its session's day when it has a session
   * and its profile a session cap (`session` given only then).
   */
  spendKeys(profile: string, key?: KeyRow, session?: string | null): string[] {
    const now = this.now();
    const k = this.profiles.keys(profile, now);
    const out = [k.dayKey, k.monthKey];
    if (key !== undefined && (key.daily_usd != null || key.monthly_usd != null)) {
      const kk = this.keyWindows.keys(key.id, now);
      out.push(kk.dayKey, kk.monthKey);
    }
    if (session) out.push(this.sessionKey(profile, session, k.w));
    return out;
  }

  /** Spend read by that step (undefined: the counter is missing, and view() seeds it). */
  observe(key: string, value: number | undefined): void {
    this.counters.observe(key, value);
  }

  /** Sends the increments still held in memory (at shutdown; otherwise the SpendCache's timer does, 10 ms after the first). */
  flush(): Promise<void> {
    return this.counters.flush();
  }

  /** Raises the counters to the store's sums where they fell behind (a counter lost or reset): the profiles', and those of the keys this process saw with caps. */
  async reconcile(profiles: Iterable<string>): Promise<void> {
    const now = this.now();
    for (const profile of profiles) await this.profiles.reconcile(profile, now);
    for (const id of this.cappedKeys) await this.keyWindows.reconcile(id, now);
  }
}
