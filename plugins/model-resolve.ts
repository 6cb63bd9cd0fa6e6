// Model resolution and the max_tokens cap (CONTRACT §5). `sluice/<tier>` and `sluice/auto` pick a
// tier; `claude-…`, sonnet, opus and haiku mean the profile's default tier; anything else goes
// upstream as given. Budget degradation then forces the fast tier (and 2048 tokens). The chat
// dialect gets the tier's fallback list. The body is marked changed only when a value changed.

import type { Ctx, Plugin } from '../lib/context.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';

export const DEGRADED_MAX_TOKENS = 2048;
const DEFAULT_TIER_NAMES = new Set(['sonnet', 'opus', 'haiku']);

function set(ctx: Ctx, field: string, value: unknown): void {
  if (ctx.body![field] !== value) {
    ctx.body![field] = value;
    ctx.changed = true;
  }
}

function capField(ctx: Ctx, field: string, cap: number): void {
  const asked = ctx.body![field];
  if (typeof asked !== 'number' || asked > cap) set(ctx, field, cap);
}

export function modelResolve(deps: Pick<Deps, 'config' | 'catalog' | 'auto'>): Plugin {
  const { tiers } = deps.config;
  return {
    name: 'model-resolve',
    routes: ['chat', 'messages'],
    // Not async: only sluice/auto waits (for its decision); every other request resolves in place.
    run(ctx) {
      const requested = ctx.requestedModel!;
      const profile = ctx.profile!;
      let tierName: string | null = null;
      if (requested.startsWith('sluice/')) {
        const alias = requested.slice(7);
        // A degraded profile goes to the fast tier below: no decision worth paying for.
        if (alias === 'auto') {
          if (ctx.degradation === 'none') return deps.auto.decide(ctx).then((decided) => apply(ctx, decided));
        } else if (tiers.has(alias)) tierName = alias;
        else throw new GatewayError('invalid_body', { message: `Unknown model alias "${requested}". Ask GET /v1/models for the list.` });
      } else if (requested.startsWith('claude-') || DEFAULT_TIER_NAMES.has(requested)) {
        tierName = profile.default_tier;
      }
      apply(ctx, tierName);
    },
  };

  /** Sets the tier, the model, the chat fallbacks and the max_tokens cap for the tier chosen. */
  function apply(ctx: Ctx, chosen: string | null): void {
    const profile = ctx.profile!;
    const requested = ctx.requestedModel!;
    let tierName = chosen;
    if (ctx.degradation !== 'none') tierName = 'fast';
    const tier = tierName === null ? undefined : tiers.get(tierName)!;
    const model = tier ? tier.model : requested;
    ctx.tier = tierName;
    ctx.model = model;
    set(ctx, 'model', model);
    if (tier && ctx.dialect === 'chat' && tier.fallbacks.length > 0 && !Array.isArray(ctx.body!.models)) {
      ctx.body!.models = tier.fallbacks;
      ctx.changed = true;
    }

    // max_tokens cap: min(catalog max for the model, tier max), and 2048 when degraded that far.
    let cap = tier?.max_output_tokens;
    const maxCompletion = deps.catalog.maxCompletion(profile.router, model);
    if (maxCompletion) cap = cap === undefined ? maxCompletion : Math.min(cap, maxCompletion);
    if (ctx.degradation === 'max-tokens') cap = Math.min(cap ?? DEGRADED_MAX_TOKENS, DEGRADED_MAX_TOKENS);
    if (cap === undefined) return;
    // Chat: cap whichever of the two fields the client sent (both, if it sent both, so neither
    // slips past the cap); set `max_tokens` when it sent neither.
    const completion = ctx.dialect === 'chat' && ctx.body!.max_completion_tokens !== undefined;
    if (completion) capField(ctx, 'max_completion_tokens', cap);
    if (!completion || ctx.body!.max_tokens !== undefined) capField(ctx, 'max_tokens', cap);
  }
}
