// The board page's who-and-what sections: sessions (active, top today, end users including `cc:…`),
// auth failures, tool logs, benchmark runs, and the gateway's health. Views of the typed summary
// only. Session ids, end users, addresses, tool names and run labels are chosen by clients: they
// reach the page only through the one escape helper (lib/board/html.ts), so markup shows as text.

import { html, int, relative, usd, utc, uptime, type Html } from './html.ts';
import { badge, counts, figures, percentiles, sub, table } from './render.ts';
import type { BenchmarkRun, HealthSection, SessionRow, Summary } from './types.ts';

/** The time as "5 min ago", the exact UTC time in the hover title. */
function ago(iso: string, now: number): Html {
  return html`<time datetime="${iso}" title="${utc(iso)}">${relative(iso, now)}</time>`;
}

function sessionTable(rows: readonly SessionRow[], now: number, none: string): Html {
  return table(rows, [
    { label: 'end user · session', key: true, cell: (r) => html`${r.end_user === null ? html`<span class="muted">no end user</span>` : html`<span class="mono">${r.end_user}</span>`}${r.session === null || r.session === r.end_user ? '' : html` <span class="mono muted">· ${r.session}</span>`}` },
    { label: 'profile · tier', cell: (r) => `${r.profile} · ${r.tier}` },
    { label: 'requests', cell: (r) => int(r.requests) },
    { label: 'cost', cell: (r) => usd(r.cost_usd) },
    { label: 'last seen', cell: (r) => ago(r.last_seen, now) },
  ], { max: 20, empty: none });
}

export function sessionsSection(s: Summary, now: number): Html {
  const { active, top_today } = s.sessions;
  return html`${sub(`Active in the last hour (${int(active.length)})`, sessionTable(active, now, 'Nobody in the last hour.'))}${sub('Most expensive today', sessionTable(top_today, now, 'No session today.'))}`;
}

export function authFailuresSection(s: Summary, now: number): Html {
  const a = s.auth_failures;
  const body = html`${figures([['today', html`<b>${int(a.total_today)}</b>`]])}${counts(a.today, 'No failure today.')}${sub('Addresses with most failures today', table(a.top_addresses, [
    { label: 'address', key: true, cell: (r) => html`<span class="mono">${r.ip}</span>` },
    { label: 'failures', cell: (r) => int(r.failures) },
    { label: 'now', cell: (r) => (r.blocked ? badge('bad', 'blocked') : badge('muted', 'not blocked')) },
  ], { id: (r) => r.ip, empty: 'None today.' }))}${sub('Latest', table(a.latest, [
    { label: 'when', key: true, cell: (r) => ago(r.ts, now) },
    { label: 'address', cell: (r) => html`<span class="mono">${r.ip}</span>` },
    { label: 'key prefix', cell: (r) => html`<span class="mono">${r.prefix || '–'}</span>` },
    { label: 'outcome', cell: (r) => r.outcome },
  ], { max: 10, empty: 'None yet.' }))}`;
  return body;
}

export function toolLogsSection(s: Summary, now: number): Html {
  const body = table(s.tool_logs, [
    { label: 'tool', key: true, cell: (r) => html`<span class="mono">${r.name}</span>` },
    { label: 'profile', cell: (r) => r.profile },
    { label: 'calls', cell: (r) => int(r.count) },
    { label: 'last seen', cell: (r) => ago(r.last_seen, now) },
  ], { max: 30, id: (r) => `${r.profile}:${r.name}`, empty: 'No tool called in the last 30 days.' });
  return html`${body}<p class="note">Names only, never arguments; last 30 days.</p>`;
}

const tokens = (r: BenchmarkRun) => `${int(r.input_tokens)} in · ${int(r.output_tokens)} out${r.cache_read_tokens ? ` · ${int(r.cache_read_tokens)} cached` : ''}${r.reasoning_tokens ? ` · ${int(r.reasoning_tokens)} reasoning` : ''}`;

export function benchmarkRunsSection(s: Summary): Html {
  const body = table(s.benchmark_runs, [
    { label: 'run', key: true, cell: (r) => html`<span class="mono">${r.run}</span>` },
    { label: 'requests', cell: (r) => `${int(r.requests)}${r.errors ? ` (${int(r.errors)} errors)` : ''}` },
    { label: 'cost', cell: (r) => usd(r.cost_usd) },
    { label: 'tokens', wide: true, cell: tokens },
    { label: 'duration p50 · p95 · p99', wide: true, cell: (r) => percentiles(r.duration_ms) },
    { label: 'TTFB p50 · p95 · p99', wide: true, cell: (r) => percentiles(r.ttfb_ms) },
    { label: 'first · last seen', wide: true, cell: (r) => `${utc(r.first_seen)} · ${utc(r.last_seen)}` },
  ], { max: 20, empty: 'No request carried x-sluice-run yet.' });
  return body;
}

function yes(ok: boolean, good: string, bad: string): Html {
  return ok ? badge('ok', good) : badge('bad', bad);
}

export function healthSection(h: HealthSection, now: number): Html {
  const routers = Object.entries(h.catalog);
  const body = html`${figures([
    ['status', yes(h.status === 'ok', 'ok', h.status)],
    ['version', h.version],
    ['up for', html`${uptime(h.uptime_s)} <span class="muted">since ${utc(h.started_at)}</span>`],
    ['store', html`${h.store.kind} ${yes(h.store.reachable, 'reachable', 'unreachable')}`],
    ['rows written · pending', `${int(h.store.rows_written)} · ${int(h.rows_pending)}`],
    ['counters', html`${h.counters.kind} ${yes(!h.counters.degraded, 'ok', 'degraded')}`],
    ['in flight', int(h.in_flight)],
    ['key cache', `${int(h.key_cache_size)} keys`],
    h.reconcile !== null && ['cost reconciliation', `${int(h.reconcile.reconciled)} given · ${int(h.reconcile.pending)} waiting · ${int(h.reconcile.abandoned)} abandoned`],
    ['rollups', h.rollups.backfill_done ? `backfilled (${int(h.rollups.backfill_rows)} rows)` : `backfilling (${int(h.rollups.backfill_rows)} rows so far)`],
    ['raw rows kept', h.rollups.retention_days === null ? 'all' : `${int(h.rollups.retention_days)} days (${int(h.rollups.retention_deleted)} dropped)`],
  ])}${sub('Catalog refreshed', table(routers, [
    { label: 'router', key: true, cell: ([name]) => name },
    { label: 'refreshed', cell: ([, c]) => (c.refreshed_at === null ? 'never' : ago(c.refreshed_at, now)) },
  ], { id: ([name]) => name, empty: 'No router configured.', fit: true }))}${sub('Usage snapshots', table(h.usage_snapshots, [
    { label: 'profile', key: true, cell: (u) => u.profile },
    { label: 'taken', cell: (u) => ago(u.ts, now) },
    { label: 'router today · month', wide: true, cell: (u) => `${usd(u.usage_daily)} · ${usd(u.usage_monthly)}` },
    { label: 'key limit left', cell: (u) => (u.limit_usd === null ? 'no limit' : `${usd(u.limit_remaining)} of ${usd(u.limit_usd)}`) },
    { label: 'drift', cell: (u) => html`${usd(u.drift_usd)} ${u.drifted ? badge('bad', 'drifted') : ''}` },
  ], { id: (u) => u.profile, empty: 'No usage snapshot yet.' }))}`;
  return body;
}
