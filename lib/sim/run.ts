// One inference request being answered (a Run): its generation id, model, provider, price, plan
// and what it has delivered so far. settle() is the single place a run becomes a cost: it charges
// the key and records the generation with the same number, exactly once, whether the run
// completed, was cut by a directive, or ended because its caller left (then it charges what had
// been delivered). The dialect files stream; they never charge or record by other means.

import { priceOf, providerOf, type Price } from './catalog.ts';
import { contentPlan, type ContentPlan } from './content.ts';
import { cutPoint, type Directives } from './directives.ts';
import { drop, pause, randomId, send, type Exchange } from './exchange.ts';
import type { SimState } from './state.ts';
import { round10 } from './usage.ts';

export interface Run {
  state: SimState;
  id: string;
  /** Unix seconds, as in `created`. */
  created: number;
  model: string;
  provider: string;
  price: Price;
  d: Readonly<Directives>;
  content: ContentPlan;
  bearer: string;
  promptTokens: number;
  streamed: boolean;
  startedAt: number;
  /** Sim-clock time the first content went out; -1 before. */
  firstAt: number;
  /** Content pieces and tool-argument fragments delivered so far: what an early end charges. */
  pieces: number;
  frags: number;
  /** Set by settle(): the usage that was charged and recorded. */
  settled: Tokens | undefined;
}

export interface Tokens { prompt: number; input: number; cached: number; cacheWrite: number; completion: number; reasoning: number; cost: number; promptCost: number; completionCost: number }

/** How a generation ended, as its record shows it. */
export interface Ending { finish: string | null; native: string | null; cancelled: boolean }
export const CUT: Ending = Object.freeze({ finish: 'error', native: null, cancelled: false });

/** The model a request asks for: `model`, else the first of `models`, else openrouter/auto. */
export function modelOf(json: any): string {
  return typeof json.model === 'string' ? json.model : Array.isArray(json.models) && typeof json.models[0] === 'string' ? json.models[0] : 'openrouter/auto';
}

/** The model id without its `:variant` (what prices and providers are keyed by). */
export function baseOf(model: string): string {
  const colon = model.indexOf(':');
  return colon < 0 ? model : model.slice(0, colon);
}

export function newRun(state: SimState, json: any, model: string, d: Readonly<Directives>, bearer: string, bodyBytes: number): Run {
  const base = baseOf(model);
  const startedAt = state.now();
  const created = Math.floor(startedAt / 1000);
  return {
    state,
    id: `gen-${created}-${randomId(20)}`,
    created,
    model,
    provider: providerOf(base, d.provider),
    price: priceOf(base),
    d,
    content: contentPlan(json, d),
    bearer,
    promptTokens: Math.ceil(bodyBytes / 4),
    streamed: json.stream === true,
    startedAt,
    firstAt: -1,
    pieces: 0,
    frags: 0,
    settled: undefined,
  };
}

export function tokens(r: Run, contentChunks: number, toolFragments: number): Tokens {
  const { d, price } = r;
  const prompt = r.promptTokens;
  const cached = Math.min(d.cached, prompt);
  const cacheWrite = Math.min(d.cacheWrite, prompt - cached);
  const reasoning = d.reasoning;
  const completion = contentChunks + toolFragments + reasoning;
  const promptCost = round10((prompt - cached - cacheWrite) * price.prompt + cached * price.cacheRead + cacheWrite * price.cacheWrite);
  const completionCost = round10(completion * price.completion);
  return { prompt, input: prompt - cached - cacheWrite, cached, cacheWrite, completion, reasoning, cost: round10(promptCost + completionCost), promptCost, completionCost };
}

/** Notes content that went out (for an early end's charge and the record's latency). */
export function delivered(r: Run, pieces: number, frags: number): void {
  r.pieces = pieces;
  r.frags = frags;
  if (r.firstAt < 0) r.firstAt = r.state.now();
}

/** Charges the key and records the generation for what was produced; once per run, later calls return the first. */
export function settle(r: Run, contentChunks: number, toolFragments: number, end: Ending): Tokens {
  if (r.settled !== undefined) return r.settled;
  const t = tokens(r, contentChunks, toolFragments);
  r.settled = t;
  const { state } = r;
  state.ledger.charge(r.bearer, t.cost);
  state.generations.record({
    id: r.id,
    model: r.model,
    provider: r.provider,
    streamed: r.streamed,
    cancelled: end.cancelled,
    finishReason: end.finish,
    nativeFinishReason: end.native,
    promptTokens: t.prompt,
    completionTokens: t.completion,
    cachedTokens: t.cached,
    reasoningTokens: t.reasoning,
    cost: t.cost,
    cacheDiscount: round10(t.prompt * r.price.prompt - t.promptCost),
    startedAt: r.startedAt,
    firstAt: r.firstAt,
    endedAt: state.now(),
  });
  return t;
}

/** The exchange ended before the run settled: the caller left (or close() cut it); charge what went out. */
export function settleEarlyEnd(r: Run, callerLeft: boolean): void {
  settle(r, r.pieces, r.frags, callerLeft ? { finish: null, native: null, cancelled: true } : CUT);
}

/**
 * A stream reached its cut point after `i` content chunks: fail-after sends the dialect's in-band
 * error event and ends; drop-after cuts the connection; silent-after sends nothing more and
 * leaves the connection open until the caller closes it (the run settles then).
 */
export async function endEarly(x: Exchange, r: Run, i: number, errorEvent: string): Promise<void> {
  if (r.d.failAfter === i) {
    settle(r, i, 0, CUT);
    await send(x, errorEvent);
    x.res.end();
  } else if (r.d.dropAfter === i) {
    settle(r, i, 0, CUT);
    await drop(x);
  }
}

/**
 * The start of a non-streamed answer: paced like the stream it stands for, with drop-after and
 * silent-after carried out. Gives the number of content pieces the answer holds and where a
 * fail-after strikes, or undefined once the exchange has ended.
 */
export async function paceJson(x: Exchange, r: Run): Promise<{ n: number; cut: number } | undefined> {
  const { d, content } = r;
  const cut = cutPoint(d);
  const n = cut >= 0 && cut < content.pieces.length ? cut : content.pieces.length;
  for (let i = 1; i < n; i++) {
    r.pieces = i; // pieces produced so far, should the caller leave during the pause
    if (!(await pause(x, d.chunkDelayMs))) return;
  }
  r.pieces = n;
  if (cut >= 0 && cut <= content.pieces.length) {
    if (d.dropAfter === cut) { settle(r, cut, 0, CUT); await drop(x); return; }
    if (d.silentAfter === cut) return;
  }
  return { n, cut };
}
