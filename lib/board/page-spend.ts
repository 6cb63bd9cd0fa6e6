// The board page's first screen: the glance line, spend per profile (day and month bars against the
// budgets, the degradation badge, the next reset, burn rate, projected run-out, ledger against the
// router's readout, the session cap), the keys with caps of their own against them, today's sessions
// stopped at their cap, and the anomalies. Views of the typed summary only; every value goes through
// the one escape helper. It computes nothing the summary does not already say, except colours.

import { degradationFor, type BudgetStage } from '../budget.ts';
import { figure, html, int, percent, relative, usd, utc, type Html } from './html.ts';
import { badge, empty, figures, sub, table } from './render.ts';
import { budgetBar } from './sparkline.ts';
import type { Anomaly, AnomalyKind, SpendKey, SpendProfile, StoppedSession, Summary } from './types.ts';

/** A profile's stage as its badge says it: blocked wins over the degradation stage it stays in. */
export function stageOf(p: SpendProfile): BudgetStage {
  return p.blocked ? 'blocked' : p.degradation;
}

const STAGE_BADGE = { none: 'ok', 'fast-only': 'warn', 'max-tokens': 'warn', blocked: 'bad' } as const satisfies Record<BudgetStage, string>;

/** Today's spend, today's requests, profiles degraded or blocked, anomalies: the first line read. */
export function glance(s: Summary): Html {
  const degraded = s.spend.profiles.filter((p) => stageOf(p) !== 'none').length;
  const tile = (label: string, value: string, warn = false) => html`<div><span>${label}</span><b${warn ? html` class="warn"` : ''}>${value}</b></div>`;
  return html`<div class="glance" aria-label="at a glance">${tile('spent today', usd(s.spend.total_day_usd))}${tile('requests today', int(s.requests.today.total))}${tile('degraded', `${degraded} of ${s.spend.profiles.length}`, degraded > 0)}${tile('anomalies', int(s.anomalies.length), s.anomalies.length > 0)}</div>`;
}

/** One budget window as a labelled bar; the bar's colour follows that window's own percentage. */
function meter(profile: string, what: string, spent: number, budget: number, pctOfBudget: number): Html {
  const text = `${usd(spent)} of ${usd(budget)} · ${percent(pctOfBudget)}`;
  return html`<div class="meter" data-window="${what}"><div class="meter-head"><span>${what}</span><span><b>${usd(spent)}</b> of ${usd(budget)} · ${percent(pctOfBudget)}</span></div>${budgetBar(spent, budget, degradationFor(pctOfBudget), `${profile} ${what}: ${text}`)}</div>`;
}

/** Ledger against the router's usage readout, from the newest snapshot. */
function drift(p: SpendProfile, now: number): Html | string {
  if (p.snapshot_at === null || p.router_day_usd === null) return 'no usage snapshot yet';
  return html`ledger ${usd(p.ledger_day_usd)} · router ${usd(p.router_day_usd)} · drift <b>${usd(p.drift_usd)}</b> ${p.drifted ? badge('bad', 'drifted') : badge('ok', 'in step')} <span class="muted">snapshot ${relative(p.snapshot_at, now)}</span>`;
}

function profileCard(p: SpendProfile, now: number): Html {
  const stage = stageOf(p);
  const runOut = p.projected_exhaustion !== null ? html`${relative(p.projected_exhaustion, now)} <span class="muted">(${utc(p.projected_exhaustion)})</span>`
    : p.day_percent >= 100 ? 'already out' : p.burn_rate_usd_per_hour > 0 ? 'not before the reset' : 'nothing spent in the last hour';
  return html`<article class="profile" data-profile="${p.profile}"><header><h3>${p.profile}</h3>${badge(STAGE_BADGE[stage], stage)}</header>${meter(p.profile, 'today', p.day_usd, p.daily_budget_usd, p.day_percent)}${meter(p.profile, 'this month', p.month_usd, p.monthly_budget_usd, p.month_percent)}<p class="reset">resets ${relative(p.next_reset, now)} <span class="muted">(${utc(p.next_reset)})</span></p>${figures([
    ['burn rate', `${usd(p.burn_rate_usd_per_hour)} / h`],
    ['daily budget runs out', runOut],
    ['ledger vs router (today)', drift(p, now), 'wide'],
    p.session_cap_usd !== null && ['session cap', `${usd(p.session_cap_usd)} a session a day`],
  ])}</article>`;
}

/** A key's spend in one window against its cap (no cap: the spend alone). */
function against(spent: number, cap: number | null, pctOfCap: number | null): string {
  return cap === null ? `${usd(spent)} · no cap` : `${usd(spent)} of ${usd(cap)} · ${percent(pctOfCap)}`;
}

function keysTable(keys: readonly SpendKey[], now: number): Html {
  return table(keys, [
    { label: 'key', key: true, cell: (k) => k.name },
    { label: 'profile', cell: (k) => k.profile },
    { label: 'today', cell: (k) => against(k.day_usd, k.daily_usd, k.day_percent) },
    { label: 'this month', cell: (k) => against(k.month_usd, k.monthly_usd, k.month_percent) },
    { label: 'stage', cell: (k) => badge(STAGE_BADGE[k.stage], k.stage) },
    { label: 'resets', cell: (k) => relative(k.next_reset, now) },
  ], { id: (k) => `${k.profile}:${k.name}`, empty: 'No key has caps of its own (sluice keys create --daily-usd, sluice keys caps).' });
}

function stoppedTable(sessions: readonly StoppedSession[], capped: boolean, now: number): Html {
  return table(sessions, [
    { label: 'session', key: true, wide: true, cell: (x) => html`<span class="mono">${x.session}</span>` },
    { label: 'profile', cell: (x) => x.profile },
    { label: 'spent', cell: (x) => `${usd(x.cost_usd)} of ${usd(x.cap_usd)}` },
    { label: 'requests', cell: (x) => int(x.requests) },
    { label: 'last seen', cell: (x) => relative(x.last_seen, now) },
  ], { id: (x) => `${x.profile}:${x.session}`, empty: capped ? 'No session reached its cap today.' : 'No profile caps its sessions (session_daily_usd).' });
}

export function spendSection(s: Summary, now: number): Html {
  const { profiles } = s.spend;
  const body = profiles.length === 0
    ? empty('No profiles configured.')
    : html`<div class="profiles">${profiles.map((p) => profileCard(p, now))}</div><p class="note">All profiles: ${usd(s.spend.total_day_usd)} today · ${usd(s.spend.total_month_usd)} this month.</p>`;
  const capped = profiles.some((p) => p.session_cap_usd !== null);
  return html`${body}${sub('Keys with caps of their own', keysTable(s.spend.keys, now))}${html`<div id="sessions-stopped">${sub('Sessions stopped today (at their cap; refused until 00:00 UTC)', stoppedTable(s.spend.sessions_stopped, capped, now))}</div>`}`;
}

const times = (v: number) => `${figure(v)}×`;
const count = (v: number) => int(v);
/** Each kind: what it is called and the unit of its value and threshold (lib/board/anomalies.ts). */
const KINDS: Record<AnomalyKind, readonly [label: string, unit: (v: number) => string]> = {
  end_user_spend: ['end user spending', times],
  session_spend: ['session spending', times],
  error_burst: ['error burst', percent],
  rate_limited_burst: ['429 burst', count],
  provider_ttfb: ['provider slow', times],
  costly_request: ['costly request', times],
  auth_failure_burst: ['auth failures', count],
  drift: ['ledger drift', usd],
  budget_on_course: ['budget on course', percent],
};

export function anomaliesSection(anomalies: readonly Anomaly[]): Html {
  const body = table(anomalies, [
    { label: 'what', key: true, cell: (a) => html`${KINDS[a.kind][0]}: <span class="mono">${a.subject}</span>` },
    { label: 'profile', cell: (a) => a.profile ?? '–' },
    { label: 'measured', cell: (a) => html`<b>${KINDS[a.kind][1](a.value)}</b> <span class="muted">over ${KINDS[a.kind][1](a.threshold)}</span>` },
    // A session spending fast runs into its profile's session cap: the sessions it stopped are listed in the spend section.
    { label: 'why', wide: true, cell: (a) => (a.kind === 'session_spend' ? html`${a.reason} · <a href="#sessions-stopped">sessions stopped today</a>` : a.reason) },
  ], { empty: 'Nothing to look at.', id: (a) => `${a.kind}:${a.subject}` });
  return body;
}
