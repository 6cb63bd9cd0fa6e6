// The rewrites that must keep a request valid and inside its budget (issue 15; docs/rewrites.md):
// a client's `models` list resolved like `model` and replaced under degradation, no fallback list
// on the messages dialect, the thinking budget following every cap sluice sets, the responses
// dialect's `max_output_tokens`, and paid web search dropped while a budget degrades.

import fc from 'fast-check';
import t from 'tap';
import { GatewayError } from '../../lib/errors.ts';
import { bodyChanged } from '../../lib/request-body.ts';
import type { Degradation } from '../../lib/store/store.ts';
import { MAX_FALLBACKS } from '../../plugins/model-resolve.ts';
import { ctxOf, plugin, resolve } from '../helpers/model-resolve.ts';

const FAST = 'google/gemini-2.5-flash';
const AGENT = 'anthropic/claude-sonnet-4.5';
const PRO = 'google/gemini-2.5-pro';

async function refusal(dialect: 'chat' | 'responses', body: Record<string, any>): Promise<unknown> {
  const ctx = ctxOf(dialect, body);
  return Promise.resolve().then(() => plugin.run(ctx)).then(() => undefined, (e: unknown) => e);
}

t.test("chat and responses: the client's models list is resolved entry by entry", async (t) => {
  for (const dialect of ['chat', 'responses'] as const) {
    const ctx = await resolve(dialect, {
      model: 'sluice/agent',
      models: ['sluice/fast', 'claude-3-5-haiku-latest', 'openai/gpt-5', 'openai/gpt-5', 'sluice/auto', 'x/extra', 'y/more'],
      messages: [],
    });
    t.equal(ctx.body!.model, AGENT);
    t.same(ctx.body!.models, [FAST, 'openai/gpt-5', 'x/extra'],
      `${dialect}: aliases resolved, the primary and duplicates dropped, at most ${MAX_FALLBACKS} kept`);
    t.match(ctx.adjusted, [/^models \[/], 'the change is named for the log line');
    t.equal(bodyChanged(ctx.body!), true);
  }
  const kept = await resolve('chat', { model: 'openai/gpt-5', models: ['openai/gpt-4.1-mini'], messages: [] });
  t.same(kept.body!.models, ['openai/gpt-4.1-mini']);
  t.same(kept.adjusted, [], 'a list already valid is not an adjustment');
  const onlyPrimary = await resolve('chat', { model: 'sluice/fast', models: ['sluice/fast', FAST], messages: [] });
  t.notOk('models' in onlyPrimary.body!, 'a list of nothing but the primary goes');
});

t.test('a bad models entry answers 400 invalid_body, as a bad model does', async (t) => {
  for (const [models, text] of [
    [['sluice/nope'], /Unknown model alias "sluice\/nope" in models\[0\]/],
    [['openai/gpt-5', 7], /models\[1\]/],
    [['openai/gpt-5', ''], /models\[1\]/],
    ['openai/gpt-5', /must be an array/],
    [{ a: 1 }, /must be an array/],
  ] as const) {
    const err = await refusal('chat', { model: 'sluice/agent', models, messages: [] });
    t.ok(err instanceof GatewayError, JSON.stringify(models));
    t.match(err, { code: 'invalid_body', status: 400, message: text });
  }
});

t.test("degraded: the fast tier's own list, whatever the client sent; web search dropped", async (t) => {
  for (const degradation of ['fast-only', 'max-tokens'] as Degradation[]) {
    const ctx = await resolve('chat', {
      model: 'openai/gpt-5', models: ['google/gemini-2.5-pro', 'sluice/reasoning'], messages: [],
      plugins: [{ id: 'web', max_results: 5 }, { id: 'file-parser' }], web_search_options: { search_context_size: 'high' },
    }, { degradation });
    t.equal(ctx.body!.model, FAST, degradation);
    t.same(ctx.body!.models, ['openai/gpt-4.1-mini'], 'only the fast tier');
    t.same(ctx.body!.plugins, [{ id: 'file-parser', pdf: { engine: 'pdf-text' } }], 'the paid web plugin goes; the file parser takes the free engine');
    t.notOk('web_search_options' in ctx.body!);
  }
  const normal = await resolve('chat', { model: 'openai/gpt-5', plugins: [{ id: 'web' }, { id: 'file-parser', pdf: { engine: 'mistral-ocr' } }], messages: [] });
  t.same(normal.body!.plugins, [{ id: 'web' }, { id: 'file-parser', pdf: { engine: 'mistral-ocr' } }], 'nothing is dropped while the budget is normal');
});

t.test('degraded: server tools billed per use go, with a tool_choice naming them; client tools stay', async (t) => {
  const own = { name: 'read_file', description: 'reads', input_schema: { type: 'object' } };
  const messages = await resolve('messages', {
    model: 'sluice/agent', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }],
    tools: [own, { type: 'web_search_20250305', name: 'web_search', max_uses: 5 }, { type: 'code_execution_20250825', name: 'code_execution' }, { type: 'web_fetch_20250910', name: 'web_fetch' }],
    tool_choice: { type: 'tool', name: 'web_search' },
    plugins: [{ id: 'web' }],
  }, { degradation: 'fast-only' });
  t.same(messages.body!.tools, [own], 'messages: only the client tool is left');
  t.notOk('tool_choice' in messages.body!, 'a tool_choice naming a removed tool goes');
  t.notOk('plugins' in messages.body! && messages.body!.plugins.length > 0, 'the web plugin goes on messages too');
  t.match(messages.adjusted.join('\n'), /tools\[type=web_search_20250305,web_search,code_execution_20250825,code_execution,web_fetch_20250910,web_fetch\] removed/);

  const responses = await resolve('responses', {
    model: 'sluice/agent', input: 'x', tools: [{ type: 'web_search_preview' }], tool_choice: 'auto',
  }, { degradation: 'max-tokens' });
  t.notOk('tools' in responses.body!, 'a tools list left empty goes');
  t.notOk('tool_choice' in responses.body!, 'and so does its tool_choice');

  const chat = await resolve('chat', {
    model: 'sluice/agent', messages: [], tools: [{ type: 'function', function: { name: 'f' } }, { type: 'openrouter:web_search' }], tool_choice: { type: 'function', function: { name: 'f' } },
  }, { degradation: 'fast-only' });
  t.same(chat.body!.tools, [{ type: 'function', function: { name: 'f' } }], "OpenRouter's server tools go");
  t.same(chat.body!.tool_choice, { type: 'function', function: { name: 'f' } }, 'a tool_choice naming a kept tool stays');

  const normal = await resolve('messages', { model: 'sluice/agent', max_tokens: 100, messages: [], tools: [{ type: 'web_search_20250305', name: 'web_search' }] });
  t.equal(normal.body!.tools.length, 1, 'nothing is removed at the normal stage');
});

t.test('messages: a fallback list is never forwarded', async (t) => {
  const ctx = await resolve('messages', { model: 'sluice/fast', models: ['openai/gpt-5'], fallbacks: ['x/y'], max_tokens: 10, messages: [] });
  t.notOk('models' in ctx.body!);
  t.notOk('fallbacks' in ctx.body!);
  t.match(ctx.adjusted, [/^models removed/, /^fallbacks removed/]);
});

t.test("the cap is the lowest maximum of every model that may serve", async (t) => {
  const ctx = await resolve('chat', { model: PRO, models: ['openai/gpt-4.1-mini'], max_tokens: 60000, messages: [] });
  t.equal(ctx.body!.max_tokens, 32768, 'gpt-4.1-mini (32768) may serve: the request must be valid for it too');
  const suffix = await resolve('chat', { model: 'openai/gpt-4.1-mini:online', max_tokens: 60000, messages: [] });
  t.equal(suffix.body!.max_tokens, 32768, 'a :variant is capped by its base model');
});

t.test("Claude Code's enabled thinking (sonnet 4.5) at each budget stage", async (t) => {
  const body = () => ({ model: 'claude-sonnet-4-5-20250929', max_tokens: 32000, thinking: { type: 'enabled', budget_tokens: 31999 }, messages: [] });
  const normal = await resolve('messages', body());
  t.equal(normal.body!.max_tokens, 32000, 'normal: the agent tier allows 32000');
  t.same(normal.body!.thinking, { type: 'enabled', budget_tokens: 31999 }, 'normal: nothing to change');
  t.same(normal.adjusted, []);

  const fast = await resolve('messages', body(), { degradation: 'fast-only' });
  t.equal(fast.body!.model, FAST);
  t.equal(fast.body!.max_tokens, 8192, 'fast-only: the fast tier cap');
  t.equal(fast.body!.thinking.budget_tokens, 6144, 'a quarter of the cap kept for the answer');
  t.same(fast.adjusted, ['thinking.budget_tokens 31999→6144 (cap 8192)']);

  const capped = await resolve('messages', body(), { degradation: 'max-tokens' });
  t.equal(capped.body!.max_tokens, 2048);
  t.equal(capped.body!.thinking.budget_tokens, 1024, 'the smallest valid budget, 1024 left for the answer');
});

t.test('chat reasoning.max_tokens and the responses dialect follow the cap', async (t) => {
  const chat = await resolve('chat', { model: 'sluice/agent', max_tokens: 48000, reasoning: { max_tokens: 16000 }, messages: [] }, { degradation: 'fast-only' });
  t.equal(chat.body!.max_tokens, 8192);
  t.same(chat.body!.reasoning, { max_tokens: 6144 });

  const absent = await resolve('responses', { model: 'sluice/fast', input: 'hi', reasoning: { effort: 'high' } });
  t.equal(absent.body!.max_output_tokens, 8192, 'set when absent, as chat sets max_tokens');
  t.notOk('max_tokens' in absent.body!, 'the responses dialect has no max_tokens');
  t.same(absent.body!.reasoning, { effort: 'high' }, 'effort needs no budget');

  const low = await resolve('responses', { model: 'sluice/agent', input: 'hi', max_output_tokens: 30000, reasoning: { max_tokens: 20000 } }, { degradation: 'max-tokens' });
  t.equal(low.body!.max_output_tokens, 2048);
  t.same(low.body!.reasoning, { max_tokens: 1024 });
});

// Every id a client might put in `models`, aliases included.
const POOL = ['sluice/fast', 'sluice/agent', 'sluice/reasoning', 'sluice/auto', 'claude-x', 'sonnet', 'openai/gpt-5', 'x/y', PRO, FAST];

t.test('property: no alias reaches the router, the list stays within 3, a degraded profile reaches only fast models', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.constantFrom('chat', 'responses'), fc.constantFrom(...POOL.filter((m) => m !== 'sluice/auto')), fc.array(fc.constantFrom(...POOL), { maxLength: 8 }),
    fc.constantFrom<Degradation>('none', 'fast-only', 'max-tokens'),
    async (dialect, model, models, degradation) => {
      const ctx = await resolve(dialect, { model, models, messages: [] }, { degradation });
      const list: string[] = ctx.body!.models ?? [];
      if (list.length > MAX_FALLBACKS || list.some((m) => m.startsWith('sluice/')) || ctx.body!.model.startsWith('sluice/')) return false;
      if (new Set(list).size !== list.length || list.includes(ctx.body!.model)) return false;
      if (degradation !== 'none') return ctx.body!.model === FAST && list.every((m) => m === 'openai/gpt-4.1-mini');
      return true;
    },
  ), { numRuns: 500 });
  t.pass('500 random requests');
});
