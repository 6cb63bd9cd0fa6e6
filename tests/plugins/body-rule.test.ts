// The body rule (lib/request-body.ts): plugins change a body only by assigning, adding or deleting
// top-level members, never by changing a decoded value in place, because "the body changed" is
// read from the members alone (`bodyChanged`) and an unchanged member is sent as its bytes. Every
// plugin that rewrites a body runs here on bodies whose decoded values are deep-frozen, so an
// in-place change throws; and what would go upstream is checked against the object the plugins
// left: the same JSON, and the very bytes received when nothing changed.

import t from 'tap';
import type { ReadCtx } from '../../lib/context.ts';
import { bodyChanged, encodeBody } from '../../lib/request-body.ts';
import { DEGRADATIONS } from '../../lib/store/store.ts';
import { sanitize } from '../../plugins/sanitize.ts';
import { sanitizeResponses } from '../../plugins/sanitize-responses.ts';
import { ctxOf, plugin as modelResolve } from '../helpers/model-resolve.ts';

function deepFreeze(v: unknown): void {
  if (v === null || typeof v !== 'object' || Object.isFrozen(v)) return;
  Object.freeze(v);
  for (const child of Object.values(v)) deepFreeze(child);
}

const SYSTEM_TURN = { role: 'system', content: 'reminder' };
const PAID_TOOLS = [{ type: 'web_search_20250305', name: 'web_search' }, { name: 'f', input_schema: { type: 'object' }, strict: true, defer_loading: false }];

/** Bodies that take every rewrite the plugins make, and some that take none. */
const BODIES: Array<[ReadCtx['dialect'], Record<string, any>]> = [
  ['messages', { model: 'sluice/agent', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }],
  ['messages', {
    model: 'claude-sonnet-4-5', max_tokens: 64000, thinking: { type: 'enabled', budget_tokens: 60000 }, metadata: { user_id: 'u' },
    messages: [{ role: 'user', content: 'q' }, SYSTEM_TURN], tools: PAID_TOOLS, tool_choice: { type: 'tool', name: 'web_search' },
    context_management: { edits: [] }, output_config: { effort: 'high' }, plugins: [{ id: 'web' }],
  }],
  ['messages', { model: 'sluice/agent', max_tokens: 100, thinking: { type: 'adaptive' }, messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }], models: ['a/b'] }],
  ['chat', { model: 'openai/gpt-4.1-mini', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }],
  ['chat', {
    model: 'sluice/reasoning', models: ['sluice/fast', 'google/gemini-2.5-pro', 'x/y', 'x/z', 'x/w'], messages: [{ role: 'user', content: 'q' }],
    reasoning: { max_tokens: 90000 }, max_completion_tokens: 100000, max_tokens: 100000, web_search_options: {},
    plugins: [{ id: 'web' }, { id: 'file-parser', pdf: { engine: 'mistral-ocr' } }], tools: [{ type: 'openrouter:web_search' }, { type: 'function', function: { name: 'f' } }],
  }],
  ['responses', { model: 'openai/gpt-4.1-mini', max_output_tokens: 100, input: 'hi' }],
  ['responses', {
    model: 'sluice/agent', input: [{ role: 'user', content: 'q' }], client_metadata: { a: 1 }, store: false, reasoning: { effort: 'high', max_tokens: 50000 },
    tools: [{ type: 'web_search_preview' }], tool_choice: 'auto', include: ['reasoning.encrypted_content'],
  }],
];

function run(dialect: ReadCtx['dialect'], body: Record<string, any>, degradation: (typeof DEGRADATIONS)[number]): ReadCtx {
  const ctx = ctxOf(dialect, body, { degradation });
  for (const key of Object.keys(ctx.body)) deepFreeze(ctx.body[key]); // decodes every member, then freezes it
  return ctx;
}

t.test('every rewrite assigns, adds or deletes; the bytes sent are the object left', async (t) => {
  let rewritten = 0;
  for (const [dialect, body] of BODIES) {
    for (const degradation of DEGRADATIONS) {
      const ctx = run(dialect, body, degradation);
      const what = `${dialect} ${degradation} ${JSON.stringify(body).slice(0, 60)}`;
      try {
        if (dialect === 'responses') sanitizeResponses().run(ctx);
        await modelResolve.run(ctx);
        if (dialect === 'messages') sanitize().run(ctx);
      } catch (err) {
        t.fail(`${what}: a plugin changed a decoded value in place (${(err as Error).message})`);
        continue;
      }
      const changed = bodyChanged(ctx.body);
      const sent = changed ? Buffer.concat(encodeBody(ctx.body)) : ctx.raw;
      t.same(JSON.parse(sent.toString()), JSON.parse(JSON.stringify(ctx.body)), `${what}: what goes upstream is what the plugins left`);
      if (!changed) t.same(JSON.parse(JSON.stringify(ctx.body)), body, `${what}: unchanged means unchanged`);
      if (changed) rewritten++;
    }
  }
  t.ok(rewritten >= 10, `most cases rewrite something (${rewritten}), so the check above is not idle`);
});

t.test('the freeze catches an in-place change: the check is not idle', async (t) => {
  const ctx = run('messages', { model: 'm', tools: [{ name: 'f', strict: true }], messages: [] }, 'none');
  t.throws(() => { delete ctx.body.tools[0].strict; }, TypeError);
});
