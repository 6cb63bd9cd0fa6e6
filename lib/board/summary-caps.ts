// The spend section's caps below the profiles': each active key with caps of its own against them
// (its standing as the budget step reads it; from the rollups when the counters cannot be read),
// and the sessions whose spend today reached their profile's cap per session. A refusal writes no
// row, so a session at its cap is what the store can show of a session stopped (the refusals
// themselves are counted on /metrics). Read-only; never a key or its prefix, only its name.

import { windowOf } from '../budget-report.ts';
import { micro, standingOf, type Budget, type Standing } from '../budget.ts';
import type { Config } from '../config.ts';
import { SEP } from '../store/rollups.ts';
import type { BoardSum, KeyRow } from '../store/store.ts';
import { r6, type SummaryWindows } from './summary-reads.ts';
import type * as T from './types.ts';

/** A key with caps, not revoked and not expired at `now`. */
function cappedAndActive(k: KeyRow, now: number): boolean {
  return (k.daily_usd != null || k.monthly_usd != null) && k.revoked_at === null && (k.expires_at === null || Date.parse(k.expires_at) > now);
}

/** A key's standing from its rollups (day and month spend in USD), computed as lib/budget.ts does from its counters. */
function fromRollups(k: KeyRow, day: number, month: number, w: SummaryWindows): Standing {
  return standingOf('key', k.name, k.daily_usd, k.monthly_usd, micro(day), micro(month), w);
}

function spendKey(profile: string, s: Standing): T.SpendKey {
  const of = (spent: number, cap: number | null) => (cap === null ? null : r6((micro(spent) * 100) / micro(cap)));
  return {
    profile, name: s.name, daily_usd: s.daily_usd, monthly_usd: s.monthly_usd, day_usd: r6(s.day_usd), month_usd: r6(s.month_usd),
    day_percent: of(s.day_usd, s.daily_usd), month_percent: of(s.month_usd, s.monthly_usd), percent: r6(s.percent), stage: s.stage,
    next_reset: new Date(windowOf(s) === 'month' ? s.monthResetAt : s.dayResetAt).toISOString(),
  };
}

/** Each active key with caps against them, most spent of its cap first. */
export async function cappedKeys(
  d: { config: Config; budget: Pick<Budget, 'view'> }, keys: KeyRow[], today: BoardSum[], month: BoardSum[], w: SummaryWindows,
): Promise<T.SpendKey[]> {
  const spent = (rows: BoardSum[], id: number) => rows.find((r) => r.dim === 'key' && r.key === String(id))?.cost_usd ?? 0;
  const out = await Promise.all(keys.filter((k) => cappedAndActive(k, w.now)).map(async (k) => {
    const profile = d.config.profiles.get(k.profile);
    let s: Standing | null | undefined;
    try {
      if (profile) s = (await d.budget.view(profile, k)).key;
    } catch {
      s = undefined; // counters away: the rollups' figures
    }
    return spendKey(k.profile, s ?? fromRollups(k, spent(today, k.id), spent(month, k.id), w));
  }));
  return out.sort((a, b) => b.percent - a.percent || a.profile.localeCompare(b.profile) || a.name.localeCompare(b.name));
}

/** Today's sessions (rollup rows, costliest first) whose spend reached their profile's cap per session. */
export function stoppedSessions(config: Config, sessions: BoardSum[]): T.StoppedSession[] {
  const out: T.StoppedSession[] = [];
  for (const r of sessions) {
    const [profile, session, endUser] = r.key.split(SEP);
    const cap = config.profiles.get(profile)?.session_daily_usd;
    // Sessions without an id are not capped; the comparison is the budget step's, in whole micro-USD.
    if (!session || cap == null || micro(r.cost_usd) < micro(cap)) continue;
    out.push({ profile, session, end_user: endUser || null, cost_usd: r6(r.cost_usd), cap_usd: cap, requests: r.requests, last_seen: r.last_ts });
  }
  return out;
}
