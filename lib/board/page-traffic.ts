// The board page's traffic sections: requests (windows, status classes, latency percentiles and
// sparklines by hour and by day), models, routing, providers and the cache. Views of the typed
// summary only; every value goes through the one escape helper (lib/board/html.ts).

import { html, int, ms, pct, usd, utc, type Html } from './html.ts';
import { counts, empty, figures, percentiles, sub, table, type Column } from './render.ts';
import { sparkline } from './sparkline.ts';
import type { CacheStats, Latency, ModelRow, ProviderRow, RequestWindow, Routing, Summary } from './types.ts';

const WINDOWS = [['today', 'today'], ['last_24h', '24 h'], ['last_7d', '7 days'], ['month', 'this month']] as const;
const CLASSES = ['2xx', '4xx', '5xx'] as const;

/** A series as a sparkline with its total; the label names its span for screen readers. */
function spark(title: string, values: number[], total: string, span: string): Html {
  return html`<figure><figcaption><span>${title}</span><b>${total}</b></figcaption>${sparkline(values, { label: `${title}, ${span}: ${total}` })}</figure>`;
}

const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);

/** Requests and cost by hour over 24 h and by day over 7 days, each with its total; the days' table folded below. */
function series(s: Summary['requests']): Html {
  const h = s.by_hour;
  const d = s.by_day;
  const hours = `${utc(h[0]?.hour)} to ${utc(h[h.length - 1]?.hour)}`;
  const days = `${d[0]?.day.slice(0, 10) ?? '–'} to ${d[d.length - 1]?.day.slice(0, 10) ?? '–'}`;
  const chart = (span: string, points: ReadonlyArray<{ requests: number; cost_usd: number }>) => {
    const r = points.map((p) => p.requests);
    const c = points.map((p) => p.cost_usd);
    return html`<div class="series">${spark('requests', r, int(sum(r)), span)}${spark('cost', c, usd(sum(c)), span)}</div>`;
  };
  return html`${sub('Last 24 h by hour', chart(hours, h))}${sub('Last 7 days by day', chart(days, d))}<details><summary>the 7 days as a table</summary>${table(d, [
    { label: 'day', key: true, cell: (p) => p.day.slice(0, 10) },
    { label: 'requests', cell: (p) => int(p.requests) },
    { label: 'errors', cell: (p) => int(p.errors) },
    { label: 'cost', cell: (p) => usd(p.cost_usd) },
  ], { fit: true })}</details>`;
}

const LATENCY: ReadonlyArray<readonly [keyof Latency, string]> = [['overhead_ms', 'overhead'], ['ttfb_ms', 'first byte'], ['duration_ms', 'duration']];

/** The rows of the windows table: one measure each, the four windows side by side. */
const MEASURES: ReadonlyArray<readonly [string, (w: RequestWindow) => string]> = [
  ['requests', (w) => int(w.total)],
  ['errors', (w) => int(w.errors)],
  ['cost', (w) => usd(w.cost_usd)],
  ...CLASSES.map((c) => [c, (w: RequestWindow) => int(w.by_status_class[c] ?? 0)] as const),
  ['other', (w) => int(w.total - CLASSES.reduce((a, c) => a + (w.by_status_class[c] ?? 0), 0))],
];

export function requestsSection(s: Summary): Html {
  const r = s.requests;
  const windows = WINDOWS.map(([id, name]): Column<(typeof MEASURES)[number]> => ({ label: name, cell: ([, f]) => f(r[id]) }));
  const pcts = (['p50', 'p95', 'p99'] as const).map((q): Column<(typeof LATENCY)[number]> => ({ label: q, cell: ([k]) => ms(r.last_24h.latency[k][q]) }));
  return html`${table(MEASURES, [{ label: '', key: true, cell: ([name]) => name }, ...windows], { id: ([name]) => name, fit: true })}${series(r)}${sub('Latency, last 24 h', table(LATENCY, [{ label: '', key: true, cell: ([, name]) => name }, ...pcts], { id: ([k]) => k, fit: true }))}<div class="pair">${sub('Today by endpoint', counts(r.today.by_endpoint))}${sub('Today by outcome', counts(r.today.by_outcome))}</div>`;
}

function modelTable(rows: readonly ModelRow[]): Html {
  return table(rows, [
    { label: 'model', key: true, cell: (m) => html`<span class="mono">${m.model}</span>` },
    { label: 'requests', cell: (m) => int(m.requests) },
    { label: 'cost', cell: (m) => usd(m.cost_usd) },
    { label: 'share', cell: (m) => pct(m.share) },
    { label: 'input', cell: (m) => int(m.input_tokens) },
    { label: 'output', cell: (m) => int(m.output_tokens) },
    { label: 'cache read', cell: (m) => int(m.cache_read_tokens) },
    { label: 'cache write', cell: (m) => int(m.cache_write_tokens) },
    { label: 'reasoning', cell: (m) => int(m.reasoning_tokens) },
  ], { max: 20, id: (m) => m.model, empty: 'No model served.' });
}

export function modelsSection(s: Summary): Html {
  return html`${sub('Today', modelTable(s.models.today))}<details><summary>this month (${int(s.models.month.length)} models)</summary>${modelTable(s.models.month)}</details><p class="note">Tokens by kind; share is of the window's spend.</p>`;
}

/** Per tier, today's and this month's requests and cost side by side. */
function tierTable(today: Routing['today']['by_tier'], month: Routing['month']['by_tier'], none: string): Html {
  const tiers = [...new Set([...today.map((x) => x.tier), ...month.map((x) => x.tier)])];
  const find = (list: typeof today, tier: string) => list.find((x) => x.tier === tier) ?? { requests: 0, cost_usd: 0 };
  return table(tiers, [
    { label: 'tier', key: true, cell: (t) => t },
    { label: 'today', cell: (t) => `${int(find(today, t).requests)} · ${usd(find(today, t).cost_usd)}` },
    { label: 'this month', cell: (t) => `${int(find(month, t).requests)} · ${usd(find(month, t).cost_usd)}` },
  ], { id: (t) => t, empty: none, fit: true });
}

export function routingSection(s: Summary): Html {
  const { today, month } = s.routing;
  const both = (f: (w: Routing['today']) => string) => `${f(today)} · ${f(month)}`;
  const body = html`${sub('Requests per tier (requests · cost)', tierTable(today.by_tier, month.by_tier, 'No requests yet.'))}${sub('sluice/auto decided', tierTable(today.auto, month.auto, 'No sluice/auto request yet.'))}${sub('Today · this month', figures([
    ['auto decision calls', both((w) => `${int(w.auto_decision_calls.requests)} (${usd(w.auto_decision_calls.cost_usd)})`)],
    ['rewritten by degradation', both((w) => int(w.degraded.requests))],
    ['fast-only · max-tokens today', `${int(today.degraded.fast_only)} · ${int(today.degraded.max_tokens)}`],
    ['router fallbacks', both((w) => `${int(w.fallbacks.requests)} (${pct(w.fallbacks.ratio)})`)],
  ]))}`;
  return body;
}

function providerTable(rows: readonly ProviderRow[]): Html {
  return table(rows, [
    { label: 'provider', key: true, cell: (p) => p.provider },
    { label: 'requests', cell: (p) => int(p.requests) },
    { label: 'errors', cell: (p) => `${int(p.errors)} (${pct(p.error_rate)})` },
    { label: 'TTFB p50 · p95 · p99', wide: true, cell: (p) => percentiles(p.ttfb_ms) },
  ], { id: (p) => p.provider, empty: 'No provider has answered yet.' });
}

export function providersSection(s: Summary): Html {
  return html`${sub('Last 24 h', providerTable(s.providers.last_24h))}<details><summary>last 7 days (${int(s.providers.last_7d.length)} providers)</summary>${providerTable(s.providers.last_7d)}</details>`;
}

/** Profiles with cache traffic this month; every profile's `l2_cache` setting, shown as read and unused. */
export function cacheSection(s: Summary): Html {
  const all = s.cache.profiles;
  if (all.length === 0) return empty('No profiles configured.');
  const used = all.filter((c) => c.month.cache_read_tokens + c.month.cache_write_tokens > 0);
  const stats = (w: CacheStats) => `${pct(w.hit_ratio)} · ${usd(w.saved_usd)}`;
  return html`${table(used, [
    { label: 'profile', key: true, cell: (c) => c.profile },
    { label: 'today: hit · saved', cell: (c) => stats(c.today) },
    { label: 'month: hit · saved', cell: (c) => stats(c.month) },
    { label: 'tokens read · written today', wide: true, cell: (c) => `${int(c.today.cache_read_tokens)} · ${int(c.today.cache_write_tokens)}` },
  ], { id: (c) => c.profile, empty: 'No cache reads or writes this month.' })}${sub('l2_cache (read from profiles.yaml; nothing uses it)', figures(all.map((c) => [c.profile, c.l2_cache ? 'on' : 'off'] as const)))}<p class="note">Hit: cache reads over all input tokens. Saved: cache reads priced at the input price less the cache-read price.</p>`;
}
