// The router's model catalog (GET <router>/api/v1/models): each model's output cap and per-token
// prices. Fetched at start-up and hourly; a failed refresh keeps the last good copy. Lookups are
// Map reads on the hot path. Prices feed cost estimates for rows the router did not price.

import type { Logger } from 'pino';
import { withSlash, type Router } from './config.ts';
import { Loop, type Timers } from './upstream/loop.ts';

export interface Prices {
  /** USD per token. */
  prompt: number;
  completion: number;
  cacheRead: number;
  cacheWrite: number;
}

interface Entry { maxCompletion: number | null; prices: Prices }

function num(v: unknown): number {
  const n = typeof v === 'string' || typeof v === 'number' ? Number(v) : NaN;
  return Number.isFinite(n) && n >= 0 ? n : 0;
}

export function parseCatalog(json: any): Map<string, Entry> {
  const out = new Map<string, Entry>();
  for (const m of Array.isArray(json?.data) ? json.data : []) {
    if (typeof m?.id !== 'string') continue;
    const max = m.top_provider?.max_completion_tokens;
    const prompt = num(m.pricing?.prompt);
    out.set(m.id, {
      maxCompletion: typeof max === 'number' && max > 0 ? max : null,
      prices: {
        prompt,
        completion: num(m.pricing?.completion),
        cacheRead: m.pricing?.input_cache_read === undefined ? prompt : num(m.pricing.input_cache_read),
        cacheWrite: m.pricing?.input_cache_write === undefined ? prompt : num(m.pricing.input_cache_write),
      },
    });
  }
  return out;
}

export class Catalog {
  private readonly models = new Map<string, Map<string, Entry>>();
  private readonly routers: Router[];
  private readonly log: Logger;
  private readonly timeoutMs: number;
  private loop?: Loop;
  /** ISO time of the last successful refresh per router (shown in /health). */
  readonly refreshedAt = new Map<string, string>();

  constructor(opts: { routers: Iterable<Router>; log: Logger; timeoutMs?: number }) {
    this.routers = [...opts.routers];
    this.log = opts.log;
    this.timeoutMs = opts.timeoutMs ?? 10_000;
  }

  async refresh(): Promise<void> {
    await Promise.all(this.routers.map(async (router) => {
      try {
        const res = await fetch(new URL('api/v1/models', withSlash(router.url)), { signal: AbortSignal.timeout(this.timeoutMs) });
        if (!res.ok) throw new Error(`status ${res.status}`);
        const parsed = parseCatalog(await res.json());
        if (parsed.size === 0) throw new Error('the catalog lists no models');
        this.models.set(router.name, parsed);
        this.refreshedAt.set(router.name, new Date().toISOString());
        this.log.info({ router: router.name, models: parsed.size }, 'model catalog loaded');
      } catch (err) {
        this.log.warn({ router: router.name, err, kept: this.models.get(router.name)?.size ?? 0 }, 'model catalog refresh failed; keeping the last good copy');
      }
    }));
  }

  /**
   * Loads once, then refreshes every `everyMs` (hourly by default) in the background, on the
   * scheduler shape every loop that talks to the router shares (lib/upstream/loop.ts): unref'd,
   * never two refreshes at once. refresh() logs its own failures, per router, and never throws.
   */
  async start(everyMs = 3_600_000, timers?: Timers): Promise<void> {
    await this.refresh();
    this.loop = new Loop({ name: 'model catalog refresh', log: this.log, everyMs, run: () => this.refresh(), timers });
    this.loop.start();
  }

  stop(): void {
    void this.loop?.stop();
  }

  maxCompletion(router: string, model: string): number | null {
    return this.models.get(router)?.get(model)?.maxCompletion ?? null;
  }

  prices(router: string, model: string): Prices | undefined {
    return this.models.get(router)?.get(model)?.prices;
  }
}

/** A cost estimate in USD from per-token prices, for rows the router did not price. */
export function estimateCost(u: { input_tokens: number; output_tokens: number; cache_read_tokens: number; cache_write_tokens: number }, p: Prices): number {
  const usd = u.input_tokens * p.prompt + u.cache_read_tokens * p.cacheRead + u.cache_write_tokens * p.cacheWrite + u.output_tokens * p.completion;
  return Math.round(usd * 1e10) / 1e10;
}

/**
 * Prompt tokens estimated from the bytes of a request body: one token per four bytes, rounded up
 * (JSON text of English and code runs at three to five bytes a token). The simulated router counts
 * a prompt by the same rule, so a test's estimate and the router's figure agree.
 */
export function promptTokensOf(bodyBytes: number): number {
  return Math.ceil(bodyBytes / 4);
}

/**
 * A row's cost: the router's reported figure, else an estimate from per-token prices (0 without
 * any). `promptBytes` is the size of a body the router received but answered no usage for (a
 * client that left, a timeout, a cut): when the router reported no input-side tokens, the prompt
 * is estimated from those bytes (promptTokensOf) at the input price. Output the router did not
 * report is not estimated.
 */
export function rowCost(
  u: { cost: number | null; input_tokens: number; output_tokens: number; cache_read_tokens: number; cache_write_tokens: number },
  prices: Prices | undefined,
  promptBytes = 0,
): { cost_usd: number; cost_source: 'upstream' | 'estimate' } {
  if (u.cost !== null) return { cost_usd: u.cost, cost_source: 'upstream' };
  if (!prices) return { cost_usd: 0, cost_source: 'estimate' };
  const unreported = u.input_tokens === 0 && u.cache_read_tokens === 0 && u.cache_write_tokens === 0;
  const counted = unreported && promptBytes > 0 ? { ...u, input_tokens: promptTokensOf(promptBytes) } : u;
  return { cost_usd: estimateCost(counted, prices), cost_source: 'estimate' };
}

/** Per-token prices of a tier (its per-million prices; cache reads and writes at the input price). */
export function tierPrices(t: { price: { input_per_mtok: number; output_per_mtok: number } }): Prices {
  const prompt = t.price.input_per_mtok / 1e6;
  return { prompt, completion: t.price.output_per_mtok / 1e6, cacheRead: prompt, cacheWrite: prompt };
}
