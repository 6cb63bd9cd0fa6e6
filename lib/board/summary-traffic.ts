// The summary's traffic sections, each from its named rollup reads: requests (four windows, by
// hour and by day), models, routing, providers, cache, tool logs and benchmark runs. Read-only;
// none of them shows a key, a request's key prefix or prompt text.

import type { Catalog } from '../catalog.ts';
import type { Config } from '../config.ts';
import { addSums, AUTO_MODEL, SEP, statusClass, ZERO_SUMS, type Sums } from '../store/rollups.ts';
import type { BoardHistSum, BoardSum } from '../store/store.ts';
import { DAY, dayOf, group, hist, HOUR, hourOf, r6, type SummaryReads, type SummaryWindows } from './summary-reads.ts';
import type * as T from './types.ts';

/** One window's figures from its rollup rows (already summed over the window by the store). */
function requestWindow(inside: BoardSum[], h: BoardHistSum[], since: string): T.RequestWindow {
  const count = (dim: string, key: (k: string) => string = (k) => k) =>
    Object.fromEntries([...group(inside, (r) => (r.dim === dim ? key(r.key) : undefined))].map(([k, s]) => [k, s.requests]));
  const all = group(inside, (r) => (r.dim === 'all' ? '' : undefined)).get('') ?? { ...ZERO_SUMS };
  return {
    since, total: all.requests, errors: all.errors, cost_usd: r6(all.cost_usd),
    by_endpoint: count('endpoint'), by_outcome: count('outcome'), by_status_class: count('status', (k) => statusClass(Number(k))),
    latency: { overhead_ms: hist(h, 'all', '', 'o'), ttfb_ms: hist(h, 'all', '', 't'), duration_ms: hist(h, 'all', '', 'd') },
  };
}

export async function requestsSection(r: SummaryReads, w: SummaryWindows): Promise<T.Requests> {
  const point = (s: Sums | undefined) => ({ requests: s?.requests ?? 0, errors: s?.errors ?? 0, cost_usd: r6(s?.cost_usd ?? 0) });
  const byHour = group(await r.last24hByHour, (row) => row.bucket);
  const byDay = group(await r.last7dByDay, (row) => row.bucket);
  return {
    today: requestWindow(await r.today, await r.todayHist, `${w.today}T00:00:00.000Z`),
    last_24h: requestWindow(await r.last24h, await r.last24hHist, `${w.h24}:00:00.000Z`),
    last_7d: requestWindow(await r.last7d, await r.last7dHist, `${w.d7}T00:00:00.000Z`),
    month: requestWindow(await r.month, await r.monthHist, `${w.monthFrom}T00:00:00.000Z`),
    by_hour: Array.from({ length: 24 }, (_, i) => hourOf(w.now - (23 - i) * HOUR)).map((h) => ({ hour: `${h}:00:00.000Z`, ...point(byHour.get(h)) })),
    by_day: Array.from({ length: 7 }, (_, i) => dayOf(w.now - (6 - i) * DAY)).map((day) => ({ day, ...point(byDay.get(day)) })),
  };
}

function modelRows(rows: BoardSum[]): T.ModelRow[] {
  const g = group(rows, (r) => (r.dim === 'pmodel' ? r.key.split(SEP)[1] : undefined));
  const total = [...g.values()].reduce((a, s) => a + s.cost_usd, 0);
  return [...g].map(([model, s]) => ({
    model, requests: s.requests, input_tokens: s.input_tokens, output_tokens: s.output_tokens, cache_read_tokens: s.cache_read_tokens,
    cache_write_tokens: s.cache_write_tokens, reasoning_tokens: s.reasoning_tokens, cost_usd: r6(s.cost_usd), share: total > 0 ? r6(s.cost_usd / total) : 0,
  })).sort((a, b) => b.cost_usd - a.cost_usd || b.requests - a.requests);
}

export async function modelsSection(r: SummaryReads): Promise<T.Models> {
  return { today: modelRows(await r.today), month: modelRows(await r.month) };
}

/** The model sluice asked the router for, given how the row was routed (fallbacks: docs/rewrites.md). */
function isFallback(config: Config, tier: string, degradation: string, requested: string, served: string): boolean {
  if (served === '') return false;
  const t = config.tiers.get(degradation === 'fast-only' ? 'fast' : tier);
  if (t) return served !== t.model && t.fallbacks.includes(served);
  const asked = tier === 'auto-decision' ? config.auto.decision_model : requested;
  const norm = (m: string) => m.toLowerCase().replace(/:[a-z-]+$/, '').replace(/-\d{8}$/, '');
  return asked !== '' && asked !== AUTO_MODEL && norm(asked) !== norm(served);
}

function routingWindow(config: Config, inside: BoardSum[]): T.RoutingWindow {
  const list = (dim: string) =>
    [...group(inside, (r) => (r.dim === dim ? r.key : undefined))].map(([tier, s]) => ({ tier, requests: s.requests, cost_usd: r6(s.cost_usd) }))
      .sort((a, b) => b.requests - a.requests);
  const by_tier = list('tier');
  const deg = group(inside, (r) => (r.dim === 'degradation' ? r.key : undefined));
  let fallbacks = 0;
  let routed = 0;
  for (const r of inside) {
    if (r.dim !== 'route') continue;
    const [tier, degradation, requested, served] = r.key.split(SEP);
    routed += r.requests;
    if (isFallback(config, tier, degradation, requested, served)) fallbacks += r.requests;
  }
  const decision = by_tier.find((t) => t.tier === 'auto-decision');
  return {
    by_tier, auto: list('auto'),
    auto_decision_calls: { requests: decision?.requests ?? 0, cost_usd: decision?.cost_usd ?? 0 },
    degraded: {
      requests: (deg.get('fast-only')?.requests ?? 0) + (deg.get('max-tokens')?.requests ?? 0),
      fast_only: deg.get('fast-only')?.requests ?? 0, max_tokens: deg.get('max-tokens')?.requests ?? 0,
    },
    fallbacks: { requests: fallbacks, ratio: routed > 0 ? r6(fallbacks / routed) : 0 },
  };
}

export async function routingSection(config: Config, r: SummaryReads): Promise<T.Routing> {
  return { today: routingWindow(config, await r.today), month: routingWindow(config, await r.month) };
}

function providerRows(rows: BoardSum[], h: BoardHistSum[]): T.ProviderRow[] {
  return [...group(rows, (r) => (r.dim === 'provider' ? r.key : undefined))].map(([provider, s]) => ({
    provider, requests: s.requests, errors: s.errors, error_rate: s.requests > 0 ? r6(s.errors / s.requests) : 0, ttfb_ms: hist(h, 'provider', provider, 't'),
  })).sort((a, b) => b.requests - a.requests);
}

export async function providersSection(r: SummaryReads): Promise<T.Providers> {
  return { last_24h: providerRows(await r.last24h, await r.last24hHist), last_7d: providerRows(await r.last7d, await r.last7dHist) };
}

function cacheStats(config: Config, catalog: Pick<Catalog, 'prices'>, profile: string, rows: BoardSum[]): T.CacheStats {
  const router = config.profiles.get(profile)?.router;
  const s = { ...ZERO_SUMS };
  let saved = 0;
  for (const r of rows) {
    if (r.dim !== 'pmodel') continue;
    const [p, model] = r.key.split(SEP);
    if (p !== profile) continue;
    addSums(s, r);
    const prices = router ? catalog.prices(router, model) : undefined;
    const tier = [...config.tiers.values()].find((t) => t.model === model);
    // The catalog's cache-read price when it lists a discount; otherwise cache reads are assumed
    // at 10 % of the input price (catalog, else the tier's).
    const input = prices?.prompt ?? (tier ? tier.price.input_per_mtok / 1e6 : 0);
    const read = prices && prices.cacheRead < prices.prompt ? prices.cacheRead : 0.1 * input;
    saved += r.cache_read_tokens * Math.max(0, input - read);
  }
  const prompt = s.input_tokens + s.cache_read_tokens + s.cache_write_tokens;
  return { input_tokens: s.input_tokens, cache_read_tokens: s.cache_read_tokens, cache_write_tokens: s.cache_write_tokens, hit_ratio: prompt > 0 ? r6(s.cache_read_tokens / prompt) : 0, saved_usd: r6(saved) };
}

export async function cacheSection(config: Config, catalog: Pick<Catalog, 'prices'>, r: SummaryReads, profiles: string[]): Promise<T.Cache> {
  const today = await r.today;
  const month = await r.month;
  return {
    profiles: profiles.map((p) => ({
      profile: p, l2_cache: config.profiles.get(p)?.l2_cache ?? false, l2_cache_used: false as const,
      today: cacheStats(config, catalog, p, today), month: cacheStats(config, catalog, p, month),
    })),
  };
}

export async function toolLogsSection(r: SummaryReads): Promise<T.ToolLog[]> {
  return [...group(await r.tools30d, (row) => row.key)].map(([k, s]) => {
    const [profile, name] = k.split(SEP);
    return { name, profile, count: s.requests, last_seen: s.last_ts };
  }).sort((a, b) => b.count - a.count || a.name.localeCompare(b.name));
}

export async function benchmarkRunsSection(r: SummaryReads): Promise<T.BenchmarkRun[]> {
  const runHist = await r.runsHist;
  return (await r.runs).map((run) => ({
    run: run.key, requests: run.requests, errors: run.errors, input_tokens: run.input_tokens, output_tokens: run.output_tokens,
    cache_read_tokens: run.cache_read_tokens, cache_write_tokens: run.cache_write_tokens, reasoning_tokens: run.reasoning_tokens, cost_usd: r6(run.cost_usd),
    duration_ms: hist(runHist, 'run', run.key, 'd'), ttfb_ms: hist(runHist, 'run', run.key, 't'), first_seen: run.first_ts, last_seen: run.last_ts,
  }));
}
