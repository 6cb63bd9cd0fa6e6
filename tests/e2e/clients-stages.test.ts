// Real clients at every budget stage (issue 15): Claude Code (`claude -p` with sonnet 4.5, which
// sends enabled thinking), a chat request with reasoning and a `models` list of aliases and ids,
// and the Vercel AI SDK (its Anthropic provider with thinking, its OpenAI provider's `.chat()`),
// through sluice against the strict simulated router. Each stage is reached by spending through
// the gateway. What went upstream (model, models, max_tokens, the budget) and the row are asserted,
// and every request sluice changed is one the router accepts (it would answer 400 otherwise).

import { EventEmitter, once } from 'node:events';
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, generateText } from 'ai';
import t, { type Test } from 'tap';
import type { SimRequest } from '../../lib/sim/index.ts';
import type { Degradation } from '../../lib/store/store.ts';
import { claude } from '../helpers/clients.ts';
import { startHarness } from '../helpers/gateway.ts';

const FAST = 'google/gemini-2.5-flash';
const AGENT = 'anthropic/claude-sonnet-4.5';
const DAILY = 1;
const PROFILE = `  stages:
    default_tier: agent
    router: sim
    budget: { daily_usd: ${DAILY}, monthly_usd: 30 }
`;

interface Stage { name: Degradation; maxTokens: number; model: string; budget: number }
// What Claude Code (max_tokens 32000, budget 31999) must become at each stage.
const STAGES: Stage[] = [
  { name: 'none', maxTokens: 32000, model: AGENT, budget: 31999 },
  { name: 'fast-only', maxTokens: 8192, model: FAST, budget: 6144 },
  { name: 'max-tokens', maxTokens: 2048, model: FAST, budget: 1024 },
];

t.test('Claude Code, a chat client and the AI SDK at every budget stage', async (t) => {
  const h = await startHarness(t, { extraProfiles: PROFILE, env: { SLUICE_UPSTREAM_KEY_STAGES: 'sk-or-v1-stagesstagesstagesstagesstagesstagesstagesstagesstages0' } });
  const key = await h.key('stages');
  const profile = h.config.profiles.get('stages')!;
  const budget = h.gateway.deps.budget;
  // Spend counted by the budget, not only queued as a row: the test waits on this, never on time.
  const added = new EventEmitter();
  let counted = 0;
  const add = budget.add.bind(budget);
  budget.add = async (...args: Parameters<typeof budget.add>) => {
    await add(...args);
    counted++;
    added.emit('added');
  };
  async function settled(n: number): Promise<void> {
    while (counted < n) await once(added, 'added');
  }
  const inference = (prefix: string) => h.sim.received.filter((r) => r.path.startsWith(prefix) && r.method === 'POST');
  const last = (prefix: string): SimRequest => inference(prefix).at(-1)!;

  /** Spends through sluice (a fast-tier answer with reasoning tokens) until the day reaches `pct` %. */
  async function spendTo(pct: number): Promise<void> {
    const state = await budget.state(profile);
    const usd = (pct / 100) * DAILY - state.day_usd;
    // gemini-2.5-flash: 2.5e-6 USD per output token in the sim's catalog.
    const tokens = Math.ceil(usd / 2.5e-6);
    const before = h.rowCount();
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': `reasoning=${tokens}` },
      body: JSON.stringify({ model: FAST, messages: [{ role: 'user', content: 'spend' }] }),
    });
    t.equal(res.status, 200, `spending to ${pct} %`);
    await res.arrayBuffer();
    await h.rows(before + 1);
    await settled(before + 1);
  }

  async function stage(t: Test, s: Stage): Promise<void> {
    t.equal((await budget.state(profile)).degradation, s.name, `the profile is at ${s.name}`);

    // Claude Code: an answer at every stage, its thinking budget kept valid.
    const rowsBefore = h.rowCount();
    const cc = await claude(t, h.url, key, 'say hi', { ANTHROPIC_MODEL: 'claude-sonnet-4-5-20250929' });
    t.equal(cc.code, 0, `${s.name}: claude answered`);
    t.equal(cc.out.result, 'Hello from the simulated router.');
    const sent = last('/api/v1/messages').json;
    t.equal(sent.model, s.model, `${s.name}: model upstream`);
    t.equal(sent.max_tokens, s.maxTokens, `${s.name}: max_tokens upstream`);
    t.same(sent.thinking, { type: 'enabled', budget_tokens: s.budget, display: 'omitted' }, `${s.name}: thinking budget upstream`);
    t.ok(sent.thinking.budget_tokens >= 1024 && sent.thinking.budget_tokens < sent.max_tokens, 'the router would accept it');
    const [ccRow] = await h.rows(rowsBefore + 1);
    t.match(ccRow, { endpoint: 'messages', degradation: s.name, model: s.model, status: 200, outcome: 'ok' });
    if (s.name !== 'none') {
      const line = h.logs.findLast((l) => l.msg === 'sanitized request' && l.adjusted?.length > 0);
      t.match(line?.adjusted, [`thinking.budget_tokens 31999→${s.budget} (cap ${s.maxTokens})`], 'the adjustment is logged');
    }

    // A chat request with reasoning and a models list of aliases and explicit ids.
    const chat = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'sluice/agent', models: ['sluice/fast', 'claude-x', 'openai/gpt-5', 'sluice/reasoning'], max_tokens: 48000,
        reasoning: { max_tokens: 16000 }, messages: [{ role: 'user', content: 'hi' }],
      }),
    });
    t.equal(chat.status, 200, `${s.name}: chat answered`);
    await chat.json();
    const c = last('/api/v1/chat/completions').json;
    if (s.name === 'none') {
      t.match(c, { model: AGENT, models: [FAST, 'openai/gpt-5', 'google/gemini-2.5-pro'], max_tokens: 32000, reasoning: { max_tokens: 16000 } });
    } else {
      t.match(c, { model: FAST, models: ['openai/gpt-4.1-mini'], max_tokens: s.maxTokens, reasoning: { max_tokens: s.budget } }, `${s.name}: only fast models`);
    }

    // The AI SDK: its Anthropic provider with thinking, and its OpenAI provider's chat model.
    const anthropic = createAnthropic({ baseURL: `${h.url}/v1`, apiKey: key });
    const a = await generateText({
      model: anthropic('claude-sonnet-4-5'), prompt: 'hi', maxOutputTokens: 20000, maxRetries: 0,
      providerOptions: { anthropic: { thinking: { type: 'enabled', budgetTokens: 12000 } } },
    });
    t.equal(a.text, 'Hello from the simulated router.', `${s.name}: AI SDK (anthropic) answered`);
    const am = last('/api/v1/messages').json;
    t.equal(am.model, s.model);
    t.ok(am.max_tokens <= s.maxTokens && am.thinking.budget_tokens >= 1024 && am.thinking.budget_tokens < am.max_tokens,
      `${s.name}: max_tokens ${am.max_tokens}, budget ${am.thinking.budget_tokens}`);

    const openai = createOpenAI({ baseURL: `${h.url}/v1`, apiKey: key });
    const o = await generateText({ model: openai.chat('sluice/agent'), prompt: 'hi', maxOutputTokens: 50000, maxRetries: 0 });
    t.equal(o.text, 'Hello from the simulated router.', `${s.name}: AI SDK (openai .chat) answered`);
    const om = last('/api/v1/chat/completions').json;
    t.equal(om.model, s.model);
    t.equal(om.max_tokens, s.maxTokens);
  }

  for (const [i, s] of STAGES.entries()) {
    if (i === 1) await spendTo(72);
    if (i === 2) await spendTo(87);
    await t.test(`stage ${s.name}`, (t) => stage(t, s));
  }

  await spendTo(101);
  await t.test('blocked: every client is stopped at once', async (t) => {
    t.equal((await budget.state(profile)).blocked, true);
    const upstream = h.sim.received.length;
    const seen = { n: 0 };
    h.gateway.server.on('request', () => seen.n++);
    const cc = await claude(t, h.url, key, 'say hi', { ANTHROPIC_MODEL: 'claude-sonnet-4-5-20250929' });
    t.not(cc.code, 0);
    t.equal(cc.out.api_error_status, 429);
    t.match(String(cc.out.result), /quota of profile stages exhausted; resets at 00:00 UTC/);
    t.equal(seen.n, 1, 'claude made exactly one request');

    const anthropic = createAnthropic({ baseURL: `${h.url}/v1`, apiKey: key });
    const err = await generateText({ model: anthropic('claude-sonnet-4-5'), prompt: 'hi', maxRetries: 0 }).then(() => null, (e: unknown) => e);
    t.ok(APICallError.isInstance(err), 'the AI SDK raises an API call error');
    t.equal((err as APICallError).statusCode, 429);
    t.equal(h.sim.received.length, upstream, 'nothing went upstream');
  });
});
