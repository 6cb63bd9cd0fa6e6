// Model resolution, the fallback list and the output cap (docs/rewrites.md). `sluice/<tier>`
// and `sluice/auto` pick a tier; `claude-…`, sonnet, opus and haiku mean the profile's default
// tier; anything else goes upstream as given. Budget degradation then forces the fast tier (and
// 2048 tokens). A client's `models` list is resolved entry by entry, and replaced by the fast
// tier's under degradation; the messages dialect never carries one. Paid extras go under
// degradation (lib/paid-extras.ts). Every rewrite leaves a request
// the router accepts: the thinking budget follows the cap (lib/thinking-budget.ts). A member is
// assigned only when its value changes (lib/request-body.ts then re-sends only it); each
// adjustment is named in `ctx.adjusted` for the log.

import type { Plugin, ReadCtx } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import { dropPaidExtras } from '../lib/paid-extras.ts';
import { GENERATIVE } from '../lib/routes.ts';
import { fitMessagesThinking, fitReasoning } from '../lib/thinking-budget.ts';

export const DEGRADED_MAX_TOKENS = 2048;
/** OpenRouter answers 400 "'models' array must have 3 items or fewer." past this. */
export const MAX_FALLBACKS = 3;
const DEFAULT_TIER_NAMES = new Set(['sonnet', 'opus', 'haiku']);

function set(ctx: ReadCtx, field: string, value: unknown): void {
  if (ctx.body[field] !== value) {
    ctx.body[field] = value;
  }
}

function drop(ctx: ReadCtx, field: string, why: string): void {
  if (!(field in ctx.body)) return;
  delete ctx.body[field];
  ctx.adjusted.push(`${field} removed (${why})`);
}

/** Lowers (or sets) a token field to the cap; true when it changed the value. */
function capField(ctx: ReadCtx, field: string, cap: number): boolean {
  const asked = ctx.body[field];
  if (typeof asked === 'number' && asked <= cap) return false;
  set(ctx, field, cap);
  return true;
}

function sameList(a: unknown, b: readonly string[]): boolean {
  return Array.isArray(a) && a.length === b.length && a.every((v, i) => v === b[i]);
}

/** A client's list for the log line: whole when short, else its first entries and its length. */
function describeList(list: unknown): string {
  if (!Array.isArray(list) || list.length <= MAX_FALLBACKS * 2) return JSON.stringify(list).slice(0, 1024);
  return `${JSON.stringify(list.slice(0, MAX_FALLBACKS * 2)).slice(0, 1024)} (${list.length} entries)`;
}

/** A model id without OpenRouter's `:variant` suffix (`openai/gpt-5:online` → `openai/gpt-5`). */
function baseId(id: string): string {
  const colon = id.indexOf(':');
  return colon < 0 ? id : id.slice(0, colon);
}

export function modelResolve(deps: Pick<Deps, 'config' | 'catalog' | 'auto'>): Plugin<'read'> {
  const { tiers } = deps.config;

  /**
   * The tier an id names: a tier name, 'auto', or null for an id that goes as given.
   * Throws the dialect's 400 for an unknown `sluice/` alias.
   */
  function tierOf(requested: string, defaultTier: string, where: string): string | null {
    if (requested.startsWith('sluice/')) {
      const alias = requested.slice(7);
      if (alias === 'auto' || tiers.has(alias)) return alias;
      throw new GatewayError('invalid_body', { message: `Unknown model alias "${requested}"${where}. Ask GET /v1/models for the list.` });
    }
    if (requested.startsWith('claude-') || DEFAULT_TIER_NAMES.has(requested)) return defaultTier;
    return null;
  }

  return {
    name: 'model-resolve',
    routes: GENERATIVE,
    needs: 'read',
    gives: 'read',
    // Not async: only sluice/auto waits (for its decision); every other request resolves in place.
    run(ctx) {
      const profile = ctx.profile;
      const chosen = tierOf(ctx.requestedModel, profile.default_tier, '');
      // A degraded profile goes to the fast tier below: no decision worth paying for.
      if (chosen === 'auto') {
        if (ctx.degradation === 'none') return deps.auto.decide(ctx).then((decided) => apply(ctx, decided));
        return apply(ctx, null);
      }
      apply(ctx, chosen);
    },
  };

  /**
   * The client's `models` list resolved entry by entry: ids only, no duplicates, no primary, at
   * most 3. Reading stops once 3 are collected: the rest could never be sent, so however long the
   * list, the work is at most a few entries past the third distinct id (each compared with 3).
   */
  function clientList(ctx: ReadCtx, model: string, list: unknown): string[] {
    if (!Array.isArray(list)) throw new GatewayError('invalid_body', { message: '`models` must be an array of model ids.' });
    const out: string[] = [];
    for (let i = 0; i < list.length && out.length < MAX_FALLBACKS; i++) {
      const entry = list[i];
      if (typeof entry !== 'string' || entry === '') throw new GatewayError('invalid_body', { message: `\`models[${i}]\` must be a model id (a non-empty string).` });
      const tier = tierOf(entry, ctx.profile.default_tier, ` in models[${i}]`);
      // sluice/auto in the list means the model already chosen for the request.
      const id = tier === null ? entry : tier === 'auto' ? model : tiers.get(tier)!.model;
      if (id !== model && !out.includes(id)) out.push(id);
    }
    return out;
  }

  /** Sets the tier, the model, the fallback list and the output cap for the tier chosen. */
  function apply(ctx: ReadCtx, chosen: string | null): void {
    const body = ctx.body;
    let tierName = chosen;
    if (ctx.degradation !== 'none') tierName = 'fast';
    const tier = tierName === null ? undefined : tiers.get(tierName)!;
    const model = tier ? tier.model : ctx.requestedModel;
    ctx.tier = tierName;
    ctx.model = model;
    set(ctx, 'model', model);

    // The fallback list: none on messages (the spec's rule; OpenRouter's messages endpoint would
    // read `models` and `fallbacks`), else the fast tier's under degradation, else the client's own
    // resolved, else the tier's.
    let fallbacks: readonly string[] = [];
    if (ctx.dialect === 'messages') {
      drop(ctx, 'models', 'no fallback list on the messages dialect');
      drop(ctx, 'fallbacks', 'no fallback list on the messages dialect');
    } else {
      const sent = 'models' in body;
      const list = ctx.degradation !== 'none' ? tier!.fallbacks.slice(0, MAX_FALLBACKS)
        : sent ? clientList(ctx, model, body.models)
        : tier ? tier.fallbacks.slice(0, MAX_FALLBACKS) : [];
      if (list.length === 0) {
        if (sent) drop(ctx, 'models', ctx.degradation !== 'none' ? `degraded: ${ctx.degradation}` : 'no fallback left once resolved');
      } else if (!sameList(body.models, list)) {
        if (sent) ctx.adjusted.push(`models ${describeList(body.models)}→${JSON.stringify(list)}`);
        body.models = list;
      }
      fallbacks = list;
    }
    if (ctx.degradation !== 'none') {
      const dropped = dropPaidExtras(body, `degraded: ${ctx.degradation}`);
      ctx.adjusted.push(...dropped);
    }

    // Output cap: min(tier max, catalog max of every model that may serve), 2048 when degraded that
    // far. An id outside the tiers that the catalog does not know (`openrouter/auto`, a preset) is
    // capped at the profile's default tier's max: every request has a cap.
    const router = ctx.profile.router;
    let cap = tier?.max_output_tokens;
    for (const id of [model, ...fallbacks]) {
      const max = deps.catalog.maxCompletion(router, id) ?? deps.catalog.maxCompletion(router, baseId(id));
      if (max) cap = cap === undefined ? max : Math.min(cap, max);
    }
    cap ??= tiers.get(ctx.profile.default_tier)!.max_output_tokens;
    if (ctx.degradation === 'max-tokens') cap = Math.min(cap, DEGRADED_MAX_TOKENS);
    let lowered: boolean;
    if (ctx.dialect === 'responses') lowered = capField(ctx, 'max_output_tokens', cap);
    else if (ctx.dialect === 'chat' && body.max_completion_tokens !== undefined) {
      // Cap whichever of the two fields the client sent (both, if it sent both, so neither slips past).
      lowered = capField(ctx, 'max_completion_tokens', cap);
      if (body.max_tokens !== undefined) lowered = capField(ctx, 'max_tokens', cap) || lowered;
    } else lowered = capField(ctx, 'max_tokens', cap);
    if (!lowered) return;
    // sluice set or lowered the output limit: the thinking budget must fit under it.
    const adjusted = ctx.dialect === 'messages' ? fitMessagesThinking(body, cap) : fitReasoning(body, cap);
    if (adjusted !== null) ctx.adjusted.push(adjusted);
  }
}
