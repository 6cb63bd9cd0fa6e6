// `sluice/auto`: a small decision model picks one ladder tier per session (docs/http.md). The
// decision is a chat call to `auto.decision_model` on the profile's router with the profile's key,
// kept per session in Counters for `session_ttl_minutes`. A timeout, an error or an answer naming
// no ladder tier means the profile's default tier. The decision's own cost is recorded as a row.

import type { Logger } from 'pino';
import { rowCost, type Catalog } from './catalog.ts';
import { withSlash, type AutoConfig } from './config.ts';
import { newRequestId, type ReadCtx } from './context.ts';
import type { Counters } from './counters/counters.ts';
import type { RequestRow } from './store/store.ts';
import { usageOf } from './proxy/usage-tap.ts';

const EXCERPT_CHARS = 4000;

function text(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((b) => (b && typeof b.text === 'string' ? b.text : '')).filter(Boolean).join('\n');
}

/**
 * The last user turn (the request being routed), cut to a few thousand characters: from chat and
 * messages `messages`, or from a Responses `input` (a string is the user's turn itself; items are
 * messages with `role`, whose content is a string or `input_text` parts).
 */
export function excerpt(body: Record<string, any>): string {
  const input = body.input;
  if (!Array.isArray(body.messages) && typeof input === 'string') return cut(input);
  const turns = Array.isArray(body.messages) ? body.messages : Array.isArray(input) ? input : [];
  for (let i = turns.length - 1; i >= 0; i--) {
    if (turns[i]?.role === 'user') {
      const t = text(turns[i].content);
      if (t) return cut(t);
    }
  }
  return '';
}

function cut(t: string): string {
  return t.length > EXCERPT_CHARS ? `${t.slice(0, EXCERPT_CHARS)}…` : t;
}

/** The first ladder tier named in the reply, case-insensitive, as a whole word. */
export function pickTier(reply: string, ladder: readonly string[]): string | undefined {
  let best: { tier: string; at: number } | undefined;
  const lower = reply.toLowerCase();
  for (const tier of ladder) {
    const m = new RegExp(`(^|[^a-z0-9-])${tier.replace(/[-]/g, '\\-')}($|[^a-z0-9-])`).exec(lower);
    if (m && (!best || m.index < best.at)) best = { tier, at: m.index };
  }
  return best?.tier;
}

export class AutoRouter {
  private readonly auto: AutoConfig;
  private readonly counters: Counters;
  private readonly log: Logger;
  private readonly record: (row: RequestRow) => void;
  private readonly now: () => number;
  private readonly catalog: Catalog;
  private readonly system: string;

  constructor(opts: { auto: AutoConfig; counters: Counters; catalog: Catalog; log: Logger; record: (row: RequestRow) => void; now: () => number }) {
    this.auto = opts.auto;
    this.catalog = opts.catalog;
    this.counters = opts.counters;
    this.log = opts.log;
    this.record = opts.record;
    this.now = opts.now;
    this.system = `You route requests to a model tier. The tiers, cheapest and weakest first: ${opts.auto.ladder.join(', ')}. ` +
      'Pick the cheapest tier that will do the task well. Answer with the tier name only.';
  }

  async decide(ctx: ReadCtx): Promise<string> {
    const profile = ctx.profile;
    const sessionKey = ctx.session ? `auto:${profile.name}:${ctx.session}` : undefined;
    if (sessionKey) {
      const kept = await this.counters.getText(sessionKey);
      // A kept tier is reused if it is still on the ladder, or is the default a failed decision fell back to.
      if (kept && (this.auto.ladder.includes(kept) || kept === profile.default_tier)) return kept;
    }
    const tier = (await this.ask(ctx)) ?? profile.default_tier;
    if (sessionKey) await this.counters.setText(sessionKey, tier, this.auto.session_ttl_minutes * 60);
    return tier;
  }

  private async ask(ctx: ReadCtx): Promise<string | undefined> {
    const started = performance.now();
    const ts = new Date(this.now()).toISOString();
    let status = 0;
    let json: any;
    try {
      const res = await fetch(new URL('api/v1/chat/completions', withSlash(ctx.router.url)), {
        method: 'POST',
        headers: { authorization: `Bearer ${ctx.upstreamKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({
          model: this.auto.decision_model,
          max_tokens: 16,
          temperature: 0,
          messages: [{ role: 'system', content: this.system }, { role: 'user', content: excerpt(ctx.body) }],
        }),
        signal: AbortSignal.timeout(this.auto.decision_timeout_ms),
      });
      status = res.status;
      json = await res.json().catch(() => undefined);
    } catch (err) {
      this.log.warn({ req: ctx.id, err }, 'auto decision failed; using the default tier');
    }
    if (status > 0) {
      const u = usageOf('chat', json);
      this.record({
        id: newRequestId(), ts, endpoint: 'chat', profile: ctx.profile.name, key_prefix: ctx.key.row.prefix, key_id: ctx.key.row.id,
        end_user: ctx.endUser, session: ctx.session, run: ctx.run, tier: 'auto-decision',
        requested_model: this.auto.decision_model, model: u.model ?? this.auto.decision_model,
        stream: false, status, outcome: status < 400 ? 'ok' : 'upstream_error',
        input_tokens: u.input_tokens, output_tokens: u.output_tokens, cache_read_tokens: u.cache_read_tokens,
        cache_write_tokens: u.cache_write_tokens, reasoning_tokens: u.reasoning_tokens,
        ...rowCost(u, this.catalog.prices(ctx.profile.router, this.auto.decision_model)),
        provider: u.provider, degradation: 'none', generation_id: u.generation_id, ttfb_ms: null,
        duration_ms: Math.round(performance.now() - started), overhead_ms: null, tools: u.tools,
      });
    }
    const reply = json?.choices?.[0]?.message?.content;
    const tier = typeof reply === 'string' ? pickTier(reply, this.auto.ladder) : undefined;
    if (status > 0 && !tier) this.log.warn({ req: ctx.id, status }, 'auto decision named no ladder tier; using the default tier');
    return tier;
  }
}
