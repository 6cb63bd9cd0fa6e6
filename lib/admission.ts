// Admission: whether a request may go on, from the shared counters. It owns the windows a request
// is counted in and their rules: the IP block (20 auth failures from an address in 10 minutes
// block it for the window; IPv6 counts per /64), the key's window and the (key, end user) window
// (fixed 60-second windows, the profile's limits), the room a key's bodies may hold while they
// arrive (lib/intake.ts), and the budget spend the request is judged by (its profile's; its key's
// when the key has caps; its session's when the profile caps sessions), read in the same step as
// the windows (on Redis one script, one round trip). It answers with named verdicts; the plugins that refuse
// (plugins/ip-block.ts, plugins/rate-limit.ts, plugins/read-body.ts) only read them, and the board
// reads the IP block's state here too.

import type { Budget } from './budget.ts';
import { ipBlockBucket } from './client-ip.ts';
import type { Profile } from './config.ts';
import type { Check, CheckResult, Counters, Verdict } from './counters/counters.ts';
import { Intake, type Reservation } from './intake.ts';
import type { KeyRow } from './store/store.ts';

/** Auth failures from one address in a window that block it for the window. */
export const AUTH_FAILURE_LIMIT = 20;
export const AUTH_FAILURE_WINDOW_S = 600;
/** Requests and end users count in fixed windows of this length. */
export const WINDOW_S = 60;

const BLOCK = { blockS: AUTH_FAILURE_WINDOW_S } as const;

type RateLimits = Profile['rate_limits'];

/** The address's failure window: the 20th failure blocks it for the whole window. */
function failureWindow(ip: string): string {
  return `authfail:${ipBlockBucket(ip)}`;
}

function keyWindow(keyId: number): string {
  return `rl:key:${keyId}`;
}

function userWindow(keyId: number, endUser: string): string {
  return `rl:user:${keyId}:${endUser}`;
}

/** What the counted step found, by name. */
export interface Verdicts {
  ipBlocked: boolean;
  keyOver: boolean;
  /** False when the request names no end user. */
  endUserOver: boolean;
}

/** One request as the counted step sees it. */
export interface Admittee {
  ip: string;
  keyId: number;
  limits: RateLimits;
  endUser: string | null;
  profile: string;
  /** The key (its caps decide whether its spend is read too); absent: the profile's spend only. */
  key?: KeyRow;
  /** The session, when the profile caps sessions (its spend of today is read too); else null or absent. */
  session?: string | null;
}

export class Admission {
  private readonly counters: Counters;
  private readonly budget: Pick<Budget, 'spendKeys' | 'observe'>;
  private readonly intake: Intake;

  constructor(o: { counters: Counters; budget: Pick<Budget, 'spendKeys' | 'observe'>; intake?: Intake }) {
    this.counters = o.counters;
    this.budget = o.budget;
    this.intake = o.intake ?? new Intake();
  }

  /** Counts one auth failure (a refusal of key-auth or the allowlist) against the address. */
  countAuthFailure(ip: string): Promise<Verdict> {
    return this.counters.consume(failureWindow(ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, BLOCK);
  }

  /** Whether this process saw the address blocked (no I/O: the first step of every request). */
  blockedHere(ip: string): boolean {
    return this.counters.refused(failureWindow(ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, BLOCK);
  }

  /** The address's failure window, read without counting (allowed false while it is blocked). */
  failures(ip: string): Promise<Verdict> {
    return this.counters.peek(failureWindow(ip), AUTH_FAILURE_LIMIT - 1, AUTH_FAILURE_WINDOW_S, BLOCK);
  }

  /** Whether this process saw the key's window full, so its next request is refused before its body is read. */
  keyFullHere(keyId: number, limits: RateLimits): boolean {
    return this.counters.refused(keyWindow(keyId), limits.per_key_per_minute, WINDOW_S, { next: true });
  }

  /** Room for a body of the key before it is read (a refusal throws the 429). */
  room(keyId: number, limits: RateLimits, declared: number): Reservation {
    return this.intake.admit(keyId, limits.per_key_per_minute, declared);
  }

  /** A body that never completed still counts toward its key's window (nothing waits for it). */
  countAbandoned(keyId: number, limits: RateLimits): void {
    this.counters.consume(keyWindow(keyId), limits.per_key_per_minute, WINDOW_S).catch(() => {});
  }

  /**
   * The counted step, once the end user is known: the address's block read (never counted here),
   * the key's window and the end user's counted, the spend read for the budget (the profile's, a
   * capped key's, a capped session's); on the embedded counters at once, on Redis in one round trip.
   */
  admit(a: Admittee): Verdicts | Promise<Verdicts> {
    const checks: Check[] = [
      { bucket: failureWindow(a.ip), limit: AUTH_FAILURE_LIMIT - 1, windowS: AUTH_FAILURE_WINDOW_S, blockS: AUTH_FAILURE_WINDOW_S, peek: true },
      { bucket: keyWindow(a.keyId), limit: a.limits.per_key_per_minute, windowS: WINDOW_S },
    ];
    if (a.endUser !== null) checks.push({ bucket: userWindow(a.keyId, a.endUser), limit: a.limits.per_user_per_minute, windowS: WINDOW_S });
    const spendKeys = this.budget.spendKeys(a.profile, a.key, a.session);
    const result = this.counters.check(checks, spendKeys);
    if (result instanceof Promise) return result.then((r) => this.verdicts(r, spendKeys));
    return this.verdicts(result, spendKeys);
  }

  /** Hands the spend read on to the budget and names the windows' answers (a later check is undefined after a refusal). */
  private verdicts({ verdicts, values }: CheckResult, spendKeys: readonly string[]): Verdicts {
    for (let i = 0; i < spendKeys.length; i++) this.budget.observe(spendKeys[i]!, values[i]);
    return {
      ipBlocked: !verdicts[0]!.allowed,
      keyOver: verdicts[1] !== undefined && !verdicts[1].allowed,
      endUserOver: verdicts[2] !== undefined && !verdicts[2].allowed,
    };
  }
}
