// The generation records the lookup answers from: one per inference request that got a `gen-…` id,
// holding exactly the cost its key was charged, visible `delay` ms after its generation ended,
// bounded in number (oldest go first). Only state: the route is generations.ts.

/** What a generation was, as the run that produced it settled it. */
export interface GenerationFacts {
  id: string;
  model: string;
  provider: string;
  streamed: boolean;
  cancelled: boolean;
  finishReason: string | null;
  nativeFinishReason: string | null;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  reasoningTokens: number;
  /** USD charged to the key: the record's total_cost and usage. */
  cost: number;
  /** USD saved (negative: paid extra) by cache reads and writes against the plain prompt price. */
  cacheDiscount: number;
  /** Sim-clock milliseconds: the request was routed, the first content went out, the generation ended. */
  startedAt: number;
  firstAt: number;
  endedAt: number;
}

/** The `data` of a lookup, field names as OpenRouter's. */
export interface GenerationData {
  id: string;
  upstream_id: string | null;
  total_cost: number;
  usage: number;
  cache_discount: number | null;
  upstream_inference_cost: number | null;
  is_byok: boolean;
  created_at: string;
  model: string;
  app_id: number | null;
  origin: string;
  provider_name: string;
  streamed: boolean;
  cancelled: boolean;
  latency: number;
  moderation_latency: number | null;
  generation_time: number;
  tokens_prompt: number;
  tokens_completion: number;
  native_tokens_prompt: number;
  native_tokens_completion: number;
  native_tokens_cached: number;
  native_tokens_reasoning: number;
  native_tokens_completion_images: number;
  num_media_prompt: number | null;
  num_media_completion: number | null;
  num_search_results: number | null;
  finish_reason: string | null;
  native_finish_reason: string | null;
  session_id: string | null;
}

const MAX_RECORDS = 100_000;

function toData(f: GenerationFacts): GenerationData {
  return {
    id: f.id,
    upstream_id: null,
    total_cost: f.cost,
    usage: f.cost,
    cache_discount: f.cacheDiscount === 0 ? null : f.cacheDiscount,
    upstream_inference_cost: null,
    is_byok: false,
    created_at: new Date(f.startedAt).toISOString(),
    model: f.model,
    app_id: null,
    origin: '',
    provider_name: f.provider,
    streamed: f.streamed,
    cancelled: f.cancelled,
    latency: Math.max(0, (f.firstAt >= 0 ? f.firstAt : f.endedAt) - f.startedAt),
    moderation_latency: null,
    generation_time: Math.max(0, f.endedAt - f.startedAt),
    tokens_prompt: f.promptTokens,
    tokens_completion: f.completionTokens,
    native_tokens_prompt: f.promptTokens,
    native_tokens_completion: f.completionTokens,
    native_tokens_cached: f.cachedTokens,
    native_tokens_reasoning: f.reasoningTokens,
    native_tokens_completion_images: 0,
    num_media_prompt: null,
    num_media_completion: null,
    num_search_results: null,
    finish_reason: f.finishReason,
    native_finish_reason: f.nativeFinishReason,
    session_id: null,
  };
}

function checkDelay(ms: number): number {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new TypeError('generation delay must be a non-negative number of milliseconds');
  return ms;
}

export class Generations {
  #byId = new Map<string, GenerationFacts>();
  #now: () => number;
  #delayMs: number;

  constructor(now: () => number, delayMs: number) {
    this.#now = now;
    this.#delayMs = checkDelay(delayMs);
  }

  setDelay(ms: number): void {
    this.#delayMs = checkDelay(ms);
  }

  record(f: GenerationFacts): void {
    if (this.#byId.size >= MAX_RECORDS) this.#byId.delete(this.#byId.keys().next().value!);
    this.#byId.set(f.id, f);
  }

  /** The record whether or not the delay has passed (for tests), or undefined. */
  data(id: string): GenerationData | undefined {
    const f = this.#byId.get(id);
    return f === undefined ? undefined : toData(f);
  }

  /** What the lookup endpoint may show now: the record once `delay` ms passed since it ended. */
  visible(id: string): GenerationData | undefined {
    const f = this.#byId.get(id);
    return f === undefined || this.#now() - f.endedAt < this.#delayMs ? undefined : toData(f);
  }
}

