// The simulated router refuses what OpenRouter and Anthropic refuse (lib/sim/validate.ts), with
// their status and text in the dialect's envelope, and still routes every real client's valid
// shape: over HTTP for each rule, and at unit level for the interleaved-thinking exception.

import t from 'tap';
import { startSimulatedRouter } from '../../lib/sim/index.ts';
import { validate } from '../../lib/sim/validate.ts';
import { call, chatBody, messagesBody } from './client.ts';

const sim = await startSimulatedRouter();
t.teardown(() => sim.close());

async function answer(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await call(sim, path, body);
  return { status: res.status, json: await res.json() };
}

const CHAT = '/api/v1/chat/completions';
const MESSAGES = '/api/v1/messages';

t.test('an unknown model id, in model or models, is a 400 in each dialect', async (t) => {
  const chat = await answer(CHAT, chatBody({ model: 'sluice/fast' }));
  t.equal(chat.status, 400);
  t.same(chat.json, { error: { message: 'sluice/fast is not a valid model ID', code: 400 } }, "OpenRouter's words");
  const msg = await answer(MESSAGES, messagesBody({ model: 'claude-sonnet-4-5-20250929' }));
  t.equal(msg.status, 400);
  t.match(msg.json, { type: 'error', error: { type: 'invalid_request_error', message: 'claude-sonnet-4-5-20250929 is not a valid model ID' } });
  const listed = await answer(CHAT, chatBody({ models: ['openai/gpt-4.1-mini', 'acme/nothing'] }));
  t.equal(listed.status, 400);
  t.equal(listed.json.error.message, 'acme/nothing is not a valid model ID');
  t.equal((await answer(CHAT, chatBody({ model: 'openai/gpt-4.1-mini:online' }))).status, 200, 'a :variant of a known model routes');
  t.equal((await answer(CHAT, chatBody({ model: 'openrouter/auto' }))).status, 200, "the router's own auto model routes");
});

t.test('the models list: ids only, at most 3', async (t) => {
  const four = await answer(CHAT, chatBody({ models: ['openai/gpt-4.1-mini', 'openai/gpt-5', 'google/gemini-2.5-pro', 'google/gemini-2.5-flash-lite'] }));
  t.equal(four.status, 400);
  t.equal(four.json.error.message, "'models' array must have 3 items or fewer.");
  t.equal((await answer(CHAT, chatBody({ models: 'openai/gpt-5' }))).status, 400);
  t.equal((await answer(CHAT, chatBody({ models: [1] }))).status, 400);
  t.equal((await answer(CHAT, chatBody({ models: ['openai/gpt-4.1-mini', 'openai/gpt-5', 'google/gemini-2.5-pro'] }))).status, 200, 'three routes');
});

t.test('an output limit above the catalog maximum of any model that may serve', async (t) => {
  const over = await answer(MESSAGES, messagesBody({ max_tokens: 64001 }));
  t.equal(over.status, 400);
  t.match(over.json.error.message, /^max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for anthropic\/claude-sonnet-4.5/);
  t.equal((await answer(MESSAGES, messagesBody({ max_tokens: 64000 }))).status, 200, 'the maximum itself routes');
  const viaFallback = await answer(CHAT, chatBody({ max_completion_tokens: 40000, models: ['openai/gpt-4.1-mini'] }));
  t.equal(viaFallback.status, 400, 'gpt-4.1-mini takes 32768 at most');
  t.match(viaFallback.json, { error: { message: 'Provider returned error', metadata: { raw: /32768/ } } });
  for (const bad of [0, -1, 1.5, '100']) t.equal((await answer(CHAT, chatBody({ max_tokens: bad }))).status, 400, `max_tokens ${JSON.stringify(bad)}`);
  t.equal((await answer(CHAT, chatBody({ model: 'meta-llama/llama-3.3-70b-instruct', max_tokens: 1_000_000 }))).status, 200, 'no catalog maximum: no check');
});

t.test("Anthropic's thinking rules on the messages dialect", async (t) => {
  const low = await answer(MESSAGES, messagesBody({ max_tokens: 4000, thinking: { type: 'enabled', budget_tokens: 1023 } }));
  t.equal(low.status, 400);
  t.equal(low.json.error.message, 'thinking.enabled.budget_tokens: Input should be greater than or equal to 1024');
  const over = await answer(MESSAGES, messagesBody({ max_tokens: 8192, thinking: { type: 'enabled', budget_tokens: 31999 } }));
  t.equal(over.status, 400);
  t.equal(over.json.error.message, '`max_tokens` must be greater than `thinking.budget_tokens`.');
  t.equal((await answer(MESSAGES, messagesBody({ max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 2048 } }))).status, 400, 'equal is not below');
  t.equal((await answer(MESSAGES, messagesBody({ thinking: { type: 'sometimes' } }))).status, 400);
  t.equal((await answer(MESSAGES, messagesBody({ thinking: { type: 'enabled' } }))).status, 400, 'enabled needs a budget');
  // What Claude Code (sonnet 4.5) and opencode really send.
  t.equal((await answer(MESSAGES, messagesBody({ max_tokens: 32000, thinking: { type: 'enabled', budget_tokens: 31999, display: 'omitted' } }))).status, 200);
  t.equal((await answer(MESSAGES, messagesBody({ max_tokens: 48000, thinking: { type: 'enabled', budget_tokens: 16000 } }))).status, 200);
  t.equal((await answer(MESSAGES, messagesBody({ max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 } }))).status, 200);
  t.equal((await answer(MESSAGES, messagesBody({ thinking: { type: 'adaptive' } }))).status, 200);
});

t.test('interleaved thinking lets the budget exceed max_tokens (unit)', async (t) => {
  const body = { model: 'anthropic/claude-sonnet-4.5', max_tokens: 4000, thinking: { type: 'enabled', budget_tokens: 20000 } };
  t.match(validate('messages', body, {}), { status: 400 });
  t.equal(validate('messages', body, { 'anthropic-beta': 'fine-grained-tool-streaming-2025-05-14,interleaved-thinking-2025-05-14' }), undefined);
  t.match(validate('messages', { ...body, thinking: { type: 'enabled', budget_tokens: 1000 } }, { 'anthropic-beta': 'interleaved-thinking-2025-05-14' }), { status: 400 }, 'the minimum still holds');
});

t.test("chat: OpenRouter's reasoning.max_tokens becomes Anthropic's budget", async (t) => {
  const over = await answer(CHAT, chatBody({ model: 'anthropic/claude-sonnet-4.5', max_tokens: 8192, reasoning: { max_tokens: 16000 } }));
  t.equal(over.status, 400);
  t.match(over.json, { error: { message: 'Provider returned error', metadata: { provider_name: 'Anthropic' } } });
  t.equal((await answer(CHAT, chatBody({ model: 'anthropic/claude-sonnet-4.5', max_tokens: 8192, reasoning: { max_tokens: 6144 } }))).status, 200);
  t.equal((await answer(CHAT, chatBody({ model: 'anthropic/claude-sonnet-4.5', max_tokens: 8192, reasoning: { effort: 'high' } }))).status, 200, 'effort has no budget to judge');
});

t.test('responses: the stateless router refuses state (unit)', async (t) => {
  t.match(validate('responses', { model: 'openai/gpt-5', input: 'hi', previous_response_id: 'resp_1' }, {}), { status: 400 });
  t.match(validate('responses', { model: 'openai/gpt-5', input: 'hi', store: true }, {}), { status: 400 });
  t.equal(validate('responses', { model: 'openai/gpt-5', input: 'hi', store: false, max_output_tokens: 1000 }, {}), undefined);
  t.match(validate('responses', { model: 'openai/gpt-5', input: 'hi', max_output_tokens: 200000 }, {}), { status: 400 });
});
