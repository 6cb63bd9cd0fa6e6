// The board's anomaly rules: deterministic thresholds over figures the summary already holds
// (rollups and the last hour's raw rows). Pure: no store, no clock of its own. Each rule yields a
// kind, a subject, a sentence and the number that crossed its threshold (docs/board.md, "Anomaly rules").

import type { Anomaly } from './types.ts';

export const RULES = {
  /** An end user's spend today against its mean daily spend of the previous 7 days. */
  endUserRatio: 5, endUserMinUsd: 0.05, endUserMinDays: 2,
  /** A session's spend this hour against its mean hourly spend over its earlier hours today. */
  sessionRatio: 5, sessionMinUsd: 0.05, sessionMinHours: 2,
  /** Errors (upstream or gateway) in the last 60 minutes, per profile. */
  errorSharePct: 20, errorMinCount: 10,
  /** Upstream 429 answers in the last 60 minutes, per profile. */
  rateLimitedMin: 10,
  /** A provider's p95 time to first byte, last 60 minutes against the last 7 days. */
  ttfbRatio: 2, ttfbMinDeltaMs: 500, ttfbMinRequests: 10,
  /** One request's cost against its tier's mean cost per request over the last 7 days. */
  costRatio: 10, costMinUsd: 0.05, costMinTierRequests: 20,
  /** Auth failures from one address in the last 60 minutes (the IP block's own limit). */
  authBurst: 20,
} as const;

export interface AnomalyInput {
  /** Today's spend, and the spend and active days of the previous 7 days. */
  endUsers: Array<{ profile: string; end_user: string; today_usd: number; prior_usd: number; prior_days: number }>;
  /** This hour's spend, and the spend and count of the day's earlier hours that spent anything. */
  /** `cap_usd`: the profile's cap per session and day (null: none), which such a session runs into. */
  sessions: Array<{ profile: string; subject: string; hour_usd: number; earlier_usd: number; earlier_hours: number; cap_usd: number | null }>;
  profilesLastHour: Array<{ profile: string; requests: number; errors: number; rate_limited: number }>;
  providers: Array<{ provider: string; requests_last_hour: number; p95_last_hour: number | null; p95_7d: number | null }>;
  costly: Array<{ id: string; profile: string; tier: string; cost_usd: number; tier_mean_usd: number; tier_requests: number }>;
  authBursts: Array<{ ip: string; failures: number }>;
  drift: Array<{ profile: string; drift_usd: number; drifted: boolean; day: string; today: string; threshold_usd: number }>;
  onCourse: Array<{ profile: string; projected_exhaustion: string | null; next_reset: string; percent: number; blocked: boolean }>;
}

const usd = (v: number) => `$${v.toFixed(v >= 1 ? 2 : 4)}`;
const round = (v: number, d = 2) => Math.round(v * 10 ** d) / 10 ** d;

/** What stops such a session: its profile's session cap and how far today's spend is into it, or that there is none. */
function capNote(s: AnomalyInput['sessions'][number]): string {
  const today = s.hour_usd + s.earlier_usd;
  if (s.cap_usd === null) return `profile ${s.profile} sets no session cap (session_daily_usd stops such a session alone)`;
  return `${usd(today)} today of the ${usd(s.cap_usd)} session cap of profile ${s.profile} (${round((100 * today) / s.cap_usd, 1)} %)`;
}

export function anomalies(i: AnomalyInput): Anomaly[] {
  const out: Anomaly[] = [];
  for (const e of i.endUsers) {
    if (e.prior_days < RULES.endUserMinDays || e.prior_usd <= 0 || e.today_usd < RULES.endUserMinUsd) continue;
    const usual = e.prior_usd / e.prior_days;
    const ratio = e.today_usd / usual;
    if (ratio >= RULES.endUserRatio) {
      out.push({ kind: 'end_user_spend', subject: e.end_user, profile: e.profile, value: round(ratio), threshold: RULES.endUserRatio,
        reason: `end user spent ${usd(e.today_usd)} today, ${round(ratio, 1)}× its daily mean of ${usd(usual)} over its ${e.prior_days} active days of the previous 7` });
    }
  }
  for (const s of i.sessions) {
    if (s.earlier_hours < RULES.sessionMinHours || s.hour_usd < RULES.sessionMinUsd) continue;
    const usual = s.earlier_usd / s.earlier_hours;
    const ratio = s.hour_usd / usual;
    if (ratio >= RULES.sessionRatio) {
      out.push({ kind: 'session_spend', subject: s.subject, profile: s.profile, value: round(ratio), threshold: RULES.sessionRatio,
        reason: `session spent ${usd(s.hour_usd)} this hour, ${round(ratio, 1)}× its hourly mean of ${usd(usual)} earlier today; ${capNote(s)}` });
    }
  }
  for (const p of i.profilesLastHour) {
    const share = p.requests > 0 ? (100 * p.errors) / p.requests : 0;
    if (p.errors >= RULES.errorMinCount && share >= RULES.errorSharePct) {
      out.push({ kind: 'error_burst', subject: p.profile, profile: p.profile, value: round(share, 1), threshold: RULES.errorSharePct,
        reason: `${p.errors} of ${p.requests} requests failed in the last hour (${round(share, 1)} %)` });
    }
    if (p.rate_limited >= RULES.rateLimitedMin) {
      out.push({ kind: 'rate_limited_burst', subject: p.profile, profile: p.profile, value: p.rate_limited, threshold: RULES.rateLimitedMin,
        reason: `the upstream answered 429 to ${p.rate_limited} requests in the last hour` });
    }
  }
  for (const p of i.providers) {
    if (p.requests_last_hour < RULES.ttfbMinRequests || p.p95_last_hour === null || p.p95_7d === null || p.p95_7d <= 0) continue;
    const ratio = p.p95_last_hour / p.p95_7d;
    if (ratio >= RULES.ttfbRatio && p.p95_last_hour - p.p95_7d >= RULES.ttfbMinDeltaMs) {
      out.push({ kind: 'provider_ttfb', subject: p.provider, profile: null, value: round(ratio), threshold: RULES.ttfbRatio,
        reason: `time to first byte p95 is ${Math.round(p.p95_last_hour)} ms in the last hour against ${Math.round(p.p95_7d)} ms over 7 days` });
    }
  }
  for (const c of i.costly) {
    if (c.tier_requests < RULES.costMinTierRequests || c.cost_usd < RULES.costMinUsd || c.tier_mean_usd <= 0) continue;
    const ratio = c.cost_usd / c.tier_mean_usd;
    if (ratio >= RULES.costRatio) {
      out.push({ kind: 'costly_request', subject: c.id, profile: c.profile, value: round(ratio), threshold: RULES.costRatio,
        reason: `one request cost ${usd(c.cost_usd)}, ${round(ratio, 1)}× the ${c.tier} tier's mean of ${usd(c.tier_mean_usd)}` });
    }
  }
  for (const a of i.authBursts) {
    if (a.failures >= RULES.authBurst) {
      out.push({ kind: 'auth_failure_burst', subject: a.ip, profile: null, value: a.failures, threshold: RULES.authBurst,
        reason: `${a.failures} failed authentications from this address in the last hour` });
    }
  }
  for (const d of i.drift) {
    if (d.drifted && d.day === d.today) {
      out.push({ kind: 'drift', subject: d.profile, profile: d.profile, value: d.drift_usd, threshold: d.threshold_usd,
        reason: `the ledger and the router's usage differ by ${d.drift_usd < 0 ? '-' : '+'}${usd(Math.abs(d.drift_usd))} today` });
    }
  }
  for (const b of i.onCourse) {
    if (b.blocked || b.projected_exhaustion === null) continue;
    const hours = (Date.parse(b.next_reset) - Date.parse(b.projected_exhaustion)) / 3_600_000;
    out.push({ kind: 'budget_on_course', subject: b.profile, profile: b.profile, value: round(b.percent, 1), threshold: 100,
      reason: `at the last hour's pace the daily budget runs out at ${b.projected_exhaustion.slice(11, 16)} UTC, ${round(hours, 1)} h before its reset` });
  }
  return out;
}
