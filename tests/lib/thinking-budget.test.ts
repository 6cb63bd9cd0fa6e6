// The thinking budget under a cap (lib/thinking-budget.ts): the reserve left for the answer, the
// drop when nothing fits, and, for any budget and cap, a result Anthropic's rule accepts
// (1024 ≤ budget < max_tokens) with a quarter of the cap, at least 1024 tokens, kept for the answer.

import fc from 'fast-check';
import t from 'tap';
import { fitMessagesThinking, fitReasoning, largestBudget, MIN_ANSWER_RESERVE, MIN_THINKING_BUDGET } from '../../lib/thinking-budget.ts';

t.test('largestBudget: a quarter of the cap for the answer, never less than 1024 tokens', async (t) => {
  t.equal(largestBudget(32000), 24000);
  t.equal(largestBudget(8192), 6144);
  t.equal(largestBudget(4096), 3072);
  t.equal(largestBudget(2048), 1024, 'the max-tokens stage keeps the smallest valid budget');
  t.equal(largestBudget(2047), null, 'below 2048 no budget of 1024 leaves 1024 for the answer');
  t.equal(largestBudget(1024), null);
});

t.test("messages: Claude Code's enabled thinking under each stage's cap", async (t) => {
  const body = { max_tokens: 8192, thinking: { type: 'enabled', budget_tokens: 31999, display: 'omitted' } };
  t.equal(fitMessagesThinking(body, 8192), 'thinking.budget_tokens 31999→6144 (cap 8192)');
  t.same(body.thinking, { type: 'enabled', budget_tokens: 6144, display: 'omitted' }, 'other thinking fields stay');

  const low = { max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 31999 } };
  fitMessagesThinking(low, 2048);
  t.equal(low.thinking.budget_tokens, 1024);

  const none: Record<string, any> = { max_tokens: 1500, thinking: { type: 'enabled', budget_tokens: 31999 } };
  t.match(fitMessagesThinking(none, 1500), /^thinking dropped/);
  t.notOk('thinking' in none, 'no valid budget fits: thinking goes');

  const small = { max_tokens: 8192, thinking: { type: 'enabled', budget_tokens: 2000 } };
  t.equal(fitMessagesThinking(small, 8192), null, 'a budget that already fits is left alone');
  t.equal(small.thinking.budget_tokens, 2000);

  const tiny = { max_tokens: 8192, thinking: { type: 'enabled', budget_tokens: 10 } };
  fitMessagesThinking(tiny, 8192);
  t.equal(tiny.thinking.budget_tokens, MIN_THINKING_BUDGET, 'raised to the minimum once sluice rewrites the request');

  for (const thinking of [{ type: 'adaptive' }, { type: 'disabled' }, 'enabled', null]) {
    const b = { max_tokens: 100, thinking };
    t.equal(fitMessagesThinking(b, 100), null, `${JSON.stringify(thinking)} has no budget`);
    t.same(b.thinking, thinking);
  }
});

t.test('chat and responses: reasoning.max_tokens follows the cap; effort stays', async (t) => {
  const body: Record<string, any> = { reasoning: { max_tokens: 16000, exclude: true } };
  t.equal(fitReasoning(body, 8192), 'reasoning.max_tokens 16000→6144 (cap 8192)');
  t.same(body.reasoning, { max_tokens: 6144, exclude: true });

  const effort = { reasoning: { effort: 'high' } };
  t.equal(fitReasoning(effort, 2048), null, 'effort needs no budget');
  t.same(effort.reasoning, { effort: 'high' });

  const gone: Record<string, any> = { reasoning: { max_tokens: 4000 } };
  t.match(fitReasoning(gone, 1000), /^reasoning dropped/);
  t.notOk('reasoning' in gone);
  t.equal(fitReasoning({ reasoning: [1] }, 1000), null, 'not an object: the router judges it');
});

t.test('property: whatever the budget and cap, the result is valid or thinking is gone', async (t) => {
  fc.assert(fc.property(fc.integer({ min: -5, max: 200_000 }), fc.integer({ min: 1, max: 200_000 }), (budget, cap) => {
    const body: Record<string, any> = { max_tokens: cap, thinking: { type: 'enabled', budget_tokens: budget } };
    fitMessagesThinking(body, cap);
    if (!('thinking' in body)) return largestBudget(cap) === null;
    const b = body.thinking.budget_tokens;
    return b >= MIN_THINKING_BUDGET && b < cap && cap - b >= MIN_ANSWER_RESERVE && (b === budget || b <= largestBudget(cap)!);
  }), { numRuns: 2000 });
  t.pass('2000 random budget and cap pairs');
});
