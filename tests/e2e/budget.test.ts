// Budget degradation end to end (spec "Budget degradation", docs/http.md) on profile `tiny`
// (0.001 USD a day, 0.02 a month) with the harness clock: below 70 % nothing changes, from 70 %
// every request goes to the fast tier, from 85 % also max_tokens 2048, at 100 % a 429 with
// retry-after to the blocking window's reset; count_tokens is never checked; midnight and the 1st
// unblock; and how far 32 concurrent requests overshoot 100 % (each checked before its cost is known).

import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import t, { type Test } from 'tap';
import type { Budget } from '../../lib/budget.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import type { SimRequest } from '../../lib/sim/index.ts';

const FAST = 'google/gemini-2.5-flash';
const DAILY = 0.001;
const MONTHLY = 0.02;

/** A finished request of `tiny` already in the store, as if recorded before this process started. */
function spentRow(usd: number, ts: string): RequestRow {
  return {
    id: randomUUID(), ts: new Date(Date.parse(ts)).toISOString(), endpoint: 'chat', profile: 'tiny', key_prefix: 'sluice_tiny_…seed',
    end_user: null, session: null, run: 'seed', tier: 'fast', requested_model: 'sluice/fast', model: FAST, stream: false, status: 200,
    outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: usd,
    cost_source: 'upstream', provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2, overhead_ms: 0.1, tools: [],
  };
}

/** Spend counted by the budget (not only queued as a row): tests wait on this, never on time. */
function watchSpend(budget: Budget) {
  let added = 0;
  const events = new EventEmitter();
  const add = budget.add.bind(budget);
  budget.add = async (...args: Parameters<Budget['add']>) => {
    await add(...args);
    added++;
    events.emit('added');
  };
  return {
    /** Resolves once `n` costs have been added in all. */
    async counted(n: number): Promise<void> {
      while (added < n) await once(events, 'added');
    },
  };
}

interface Setup {
  h: Harness;
  key: string;
  spend: ReturnType<typeof watchSpend>;
  chat(body: object, headers?: Record<string, string>): Promise<Response>;
  messages(body: object, headers?: Record<string, string>): Promise<Response>;
  countTokens(): Promise<Response>;
  /** The last inference request the sim received. */
  upstreamLast(): SimRequest;
  upstreamCount(): number;
}

async function setup(t: Test, start: string, rows: Array<[number, string]>): Promise<Setup> {
  const h = await startHarness(t, { clockStart: Date.parse(start) });
  await h.store.insertRequests(rows.map(([usd, ts]) => spentRow(usd, ts)));
  const key = await h.key('tiny');
  const post = (path: string, body: object, headers: Record<string, string>) =>
    fetch(`${h.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const inference = () => h.sim.received.filter((r) => r.path === '/api/v1/chat/completions' || r.path.startsWith('/api/v1/messages?') || r.path === '/api/v1/messages');
  return {
    h, key,
    spend: watchSpend(h.gateway.deps.budget),
    chat: (body, headers = {}) => post('/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], ...body }, { authorization: `Bearer ${key}`, ...headers }),
    messages: (body, headers = {}) =>
      post('/v1/messages', { max_tokens: 100, messages: [{ role: 'user', content: 'hi' }], ...body }, { 'x-api-key': key, 'anthropic-version': '2023-06-01', ...headers }),
    countTokens: () => post('/v1/messages/count_tokens', { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }] }, { 'x-api-key': key, 'anthropic-version': '2023-06-01' }),
    upstreamLast: () => inference().at(-1)!,
    upstreamCount: () => inference().length,
  };
}

/** A 200 with the degradation header; returns what the sim was sent. */
async function forwarded(t: Test, s: Setup, res: Response, degradation: string, what: string): Promise<Record<string, any>> {
  t.equal(res.status, 200, what);
  t.equal(res.headers.get('x-sluice-degradation'), degradation, `${what}: x-sluice-degradation ${degradation}`);
  await res.arrayBuffer();
  return s.upstreamLast().json;
}

function secondsTo(now: number, reset: string): number {
  return Math.max(3600, Math.ceil((Date.parse(reset) - now) / 1000));
}

/** The budget 429 in the chat dialect (docs/http.md). */
async function chatBlocked(t: Test, res: Response, retryAfter: number, what: string): Promise<void> {
  t.equal(res.status, 429, what);
  t.equal(res.headers.get('retry-after'), String(retryAfter), `${what}: retry-after ${retryAfter}`);
  t.ok(retryAfter >= 3600 && Number.isInteger(retryAfter));
  t.equal(res.headers.get('x-should-retry'), 'false');
  const body = (await res.json()) as Record<string, any>;
  t.match(body, { error: { message: String, type: 'insufficient_quota', param: null, code: 'budget_exhausted' } }, `${what}: chat body`);
}

/** The budget 429 in the messages dialect. */
async function messagesBlocked(t: Test, res: Response, retryAfter: number, what: string): Promise<void> {
  t.equal(res.status, 429, what);
  t.equal(res.headers.get('retry-after'), String(retryAfter), `${what}: retry-after ${retryAfter}`);
  t.equal(res.headers.get('x-should-retry'), 'false');
  const body = (await res.json()) as Record<string, any>;
  t.match(body, { type: 'error', error: { type: 'rate_limit_error', message: String } }, `${what}: messages body`);
  t.same(Object.keys(body).sort(), ['error', 'type']);
}

t.test('below 70 %: requests go as asked', async (t) => {
  // 65 % of the month spent earlier in the month; today nothing yet.
  const s = await setup(t, '2025-03-15T10:00:00Z', [[0.65 * MONTHLY, '2025-03-10T12:00:00Z']]);
  let sent = await forwarded(t, s, await s.chat({ model: 'openai/gpt-4.1-mini', max_tokens: 5000 }), 'none', 'chat, explicit model');
  t.equal(sent.model, 'openai/gpt-4.1-mini');
  t.equal(sent.max_tokens, 5000, 'max_tokens as asked (under the caps)');
  sent = await forwarded(t, s, await s.messages({ model: 'sluice/agent', max_tokens: 4096 }), 'none', 'messages, agent tier');
  t.equal(sent.model, 'anthropic/claude-sonnet-4.5');
  t.equal(sent.max_tokens, 4096);
  const decisions = () => s.h.sim.received.filter((r) => r.json?.model === 'google/gemini-2.5-flash-lite').length;
  const res = await s.chat({ model: 'sluice/auto', messages: [{ role: 'user', content: 'think hard [[reply:reasoning]]' }] });
  sent = await forwarded(t, s, res, 'none', 'chat, sluice/auto');
  t.equal(decisions(), 1, 'auto asked the decision model');
  t.equal(sent.model, 'google/gemini-2.5-pro', 'and followed it');
});

t.test('from 70 %: every request goes to the fast tier, auto asks no one', async (t) => {
  const s = await setup(t, '2025-03-15T10:00:00Z', [[0.75 * MONTHLY, '2025-03-10T12:00:00Z']]);
  const asked: Array<[string, Response]> = [];
  asked.push(['chat, explicit model', await s.chat({ model: 'openai/gpt-5', max_tokens: 5000 })]);
  t.equal(s.upstreamLast().json.max_tokens, 5000, 'max_tokens is not capped to 2048 yet');
  asked.push(['chat, agent tier', await s.chat({ model: 'sluice/agent' })]);
  asked.push(['chat, sluice/auto', await s.chat({ model: 'sluice/auto', messages: [{ role: 'user', content: '[[reply:reasoning]]' }] }, { 'x-sluice-session': 's1' })]);
  asked.push(['messages, explicit model', await s.messages({ model: 'anthropic/claude-opus-4.1' })]);
  asked.push(['messages, claude-… (default tier)', await s.messages({ model: 'claude-opus-4-1' })]);
  asked.push(['messages, agent tier', await s.messages({ model: 'sluice/agent', max_tokens: 4096 })]);
  t.equal(s.upstreamLast().json.max_tokens, 4096);
  asked.push(['messages, sluice/auto', await s.messages({ model: 'sluice/auto', messages: [{ role: 'user', content: '[[reply:reasoning]]' }] })]);
  t.equal(s.upstreamCount(), asked.length, 'one upstream call each: no decision call');
  const models = s.h.sim.received.filter((r) => r.json?.model !== undefined).map((r) => r.json.model);
  t.same([...new Set(models)], [FAST], 'the sim saw only the fast model');
  for (const [what, res] of asked) {
    t.equal(res.status, 200, what);
    t.equal(res.headers.get('x-sluice-degradation'), 'fast-only', what);
    t.equal(res.headers.get('x-sluice-tier'), 'fast', what);
    t.equal(res.headers.get('x-sluice-model'), FAST, what);
    await res.arrayBuffer();
  }
});

t.test('from 85 %: the fast tier and max_tokens 2048, in both dialects', async (t) => {
  const s = await setup(t, '2025-03-15T10:00:00Z', [[0.9 * MONTHLY, '2025-03-10T12:00:00Z']]);
  let sent = await forwarded(t, s, await s.chat({ model: 'sluice/agent', max_tokens: 5000 }), 'max-tokens', 'chat max_tokens 5000');
  t.match(sent, { model: FAST, max_tokens: 2048 });
  sent = await forwarded(t, s, await s.chat({ model: 'sluice/agent' }), 'max-tokens', 'chat without max_tokens');
  t.equal(sent.max_tokens, 2048, 'set when absent');
  sent = await forwarded(t, s, await s.chat({ model: 'openai/gpt-5', max_completion_tokens: 4000 }), 'max-tokens', 'chat max_completion_tokens');
  t.match(sent, { model: FAST, max_completion_tokens: 2048 });
  t.notOk('max_tokens' in sent, 'the field the client used is the one capped');
  sent = await forwarded(t, s, await s.chat({ model: 'sluice/fast', max_tokens: 1000 }), 'max-tokens', 'chat asking less');
  t.equal(sent.max_tokens, 1000, 'a smaller ask stays');
  sent = await forwarded(t, s, await s.messages({ model: 'sluice/agent', max_tokens: 4096 }), 'max-tokens', 'messages max_tokens 4096');
  t.match(sent, { model: FAST, max_tokens: 2048 });
  sent = await forwarded(t, s, await s.messages({ model: 'sluice/auto', max_tokens: 64_000, stream: true }), 'max-tokens', 'messages auto, streamed');
  t.match(sent, { model: FAST, max_tokens: 2048 });
});

t.test('at 100 % of the day: 429 until the next UTC midnight, count_tokens still passes', async (t) => {
  const start = Date.parse('2025-03-15T10:00:00Z');
  const s = await setup(t, '2025-03-15T10:00:00Z', [[DAILY, '2025-03-15T09:00:00Z']]);
  const before = s.upstreamCount();
  await chatBlocked(t, await s.chat({ model: 'sluice/fast' }), 50_400, 'chat at 10:00');
  t.equal(secondsTo(start, '2025-03-16T00:00:00Z'), 50_400, 'that is the time to midnight');
  await messagesBlocked(t, await s.messages({ model: 'claude-sonnet-4-5', stream: true }), 50_400, 'messages at 10:00');
  t.equal(s.upstreamCount(), before, 'nothing went upstream');
  const ct = await s.countTokens();
  t.equal(ct.status, 404, 'count_tokens is forwarded (the sim has none), not budget-checked');
  await ct.arrayBuffer();
  t.equal(s.h.sim.received.filter((r) => r.path === '/api/v1/messages/count_tokens').length, 1);

  s.h.clock.now = Date.parse('2025-03-15T23:30:00Z');
  await chatBlocked(t, await s.chat({ model: 'sluice/fast' }), 3600, 'chat at 23:30: the floor');
  s.h.clock.now = Date.parse('2025-03-15T23:59:59.500Z');
  await messagesBlocked(t, await s.messages({ model: 'sluice/fast' }), 3600, 'messages half a second before midnight');

  s.h.clock.now = Date.parse('2025-03-16T00:00:00Z');
  await forwarded(t, s, await s.chat({ model: 'sluice/fast' }), 'none', 'chat after midnight');
  await forwarded(t, s, await s.messages({ model: 'sluice/fast' }), 'none', 'messages after midnight');
});

t.test('at 100 % of the month: still blocked after midnight, open on the 1st', async (t) => {
  const s = await setup(t, '2025-03-15T10:00:00Z', [[0.5 * MONTHLY, '2025-03-02T12:00:00Z'], [0.5 * MONTHLY, '2025-03-14T12:00:00Z']]);
  const toApril = secondsTo(s.h.clock.now, '2025-04-01T00:00:00Z');
  t.equal(toApril, 16 * 86_400 + 14 * 3600);
  await chatBlocked(t, await s.chat({ model: 'sluice/agent' }), toApril, 'chat on the 15th');
  await messagesBlocked(t, await s.messages({ model: 'sluice/agent' }), toApril, 'messages on the 15th');
  s.h.clock.now = Date.parse('2025-03-16T00:00:01Z');
  const fromSixteenth = secondsTo(s.h.clock.now, '2025-04-01T00:00:00Z');
  await chatBlocked(t, await s.chat({ model: 'sluice/agent' }), fromSixteenth, 'chat after midnight: the day reset does not help');
  await messagesBlocked(t, await s.messages({ model: 'sluice/agent' }), fromSixteenth, 'messages after midnight');
  s.h.clock.now = Date.parse('2025-03-31T23:00:00Z');
  await chatBlocked(t, await s.chat({ model: 'sluice/agent' }), 3600, 'an hour before the 1st');
  t.equal(s.upstreamCount(), 0, 'nothing went upstream');
  s.h.clock.now = Date.parse('2025-04-01T00:00:00Z');
  const sent = await forwarded(t, s, await s.chat({ model: 'sluice/agent' }), 'none', 'chat on the 1st');
  t.equal(sent.model, 'anthropic/claude-sonnet-4.5', 'no longer degraded');
  await forwarded(t, s, await s.messages({ model: 'sluice/agent' }), 'none', 'messages on the 1st');
});

t.test('spend from real requests moves the state; the header follows the windows', async (t) => {
  // 30 March: 68 % of the day, 74 % of the month (most of it earlier in the month).
  const s = await setup(t, '2025-03-30T10:00:00Z', [[0.68 * DAILY, '2025-03-30T09:00:00Z'], [0.74 * MONTHLY - 0.68 * DAILY, '2025-03-05T09:00:00Z']]);
  let costs = 0;
  // Month 74 % already: fast-only from the first request on.
  await forwarded(t, s, await s.chat({ model: 'sluice/fast' }), 'fast-only', 'month at 74 %');
  // A request whose prompt alone costs ~20 % of the day: bodies are billed by size.
  const big = 'x'.repeat(2600);
  await forwarded(t, s, await s.chat({ model: 'sluice/fast', messages: [{ role: 'user', content: big }] }), 'fast-only', 'a costly request');
  await s.spend.counted((costs += 2));
  const rows = (await s.h.rows(2)).filter((r) => r.run !== 'seed');
  const day = rows.reduce((sum, r) => sum + r.cost_usd, 0.68 * DAILY);
  t.ok(day >= 0.85 * DAILY && day < DAILY, `the day is now at ${((day / DAILY) * 100).toFixed(1)} %`);
  await forwarded(t, s, await s.messages({ model: 'sluice/agent', max_tokens: 4096 }), 'max-tokens', 'the next request sees the day past 85 %');
  t.equal(s.upstreamLast().json.max_tokens, 2048);
  await s.spend.counted(++costs);
  await forwarded(t, s, await s.chat({ model: 'sluice/fast', messages: [{ role: 'user', content: big }] }), 'max-tokens', 'one more costly request');
  await s.spend.counted(++costs);
  await chatBlocked(t, await s.chat({ model: 'sluice/fast' }), 50_400, 'the day is spent');

  s.h.clock.now = Date.parse('2025-03-31T00:00:00Z');
  await forwarded(t, s, await s.chat({ model: 'sluice/agent' }), 'fast-only', 'a new day; the month still at 74 %+');
  s.h.clock.now = Date.parse('2025-04-01T00:00:00Z');
  const sent = await forwarded(t, s, await s.chat({ model: 'sluice/agent' }), 'none', 'a new month');
  t.equal(sent.model, 'anthropic/claude-sonnet-4.5');
});

t.test('overshoot: 32 concurrent requests just below 100 %', async (t) => {
  const s = await setup(t, '2025-03-15T10:00:00Z', [[0.999 * DAILY, '2025-03-15T09:00:00Z']]);
  // Each request is checked before it goes upstream and its cost is learned at its end: with
  // every request in flight at once (the sim holds each 200 ms), all 32 see 99.9 %.
  const wave = () => Promise.all(Array.from({ length: 32 }, () => s.chat({ model: 'sluice/fast' }, { 'x-sim': 'delay-ms=200' })));
  const first = await wave();
  const admitted = first.filter((r) => r.status === 200).length;
  for (const r of first) await r.arrayBuffer();
  t.ok(admitted >= 1, `${admitted} of 32 admitted`);
  t.equal(first.filter((r) => r.status !== 200 && r.status !== 429).length, 0, 'the rest were budget refusals');
  const rows = (await s.h.rows(admitted)).filter((r) => r.run !== 'seed');
  t.equal(rows.length, admitted, 'one row per admitted request');
  await s.spend.counted(admitted);
  const spent = await s.h.store.spendSince('tiny', '2025-03-15T00:00:00.000Z');
  const largest = Math.max(...rows.map((r) => r.cost_usd));
  const overshoot = spent - DAILY;
  t.ok(overshoot > 0, 'spend passed 100 %');
  t.ok(overshoot <= 32 * largest, `overshoot ${overshoot.toFixed(7)} USD <= 32 × the largest single cost (${(32 * largest).toFixed(7)} USD)`);
  t.comment(
    `budget overshoot: ${admitted}/32 concurrent requests admitted at 99.9 % of a ${DAILY} USD day; ` +
      `spend reached ${((spent / DAILY) * 100).toFixed(1)} % (overshoot ${overshoot.toFixed(6)} USD = ` +
      `${(overshoot / largest).toFixed(1)} × the largest single request cost of ${largest.toFixed(6)} USD; bound 32 ×)`,
  );
  // Once the costs are counted, the next wave is refused whole: the overshoot does not compound.
  const second = await wave();
  t.same(second.map((r) => r.status), Array(32).fill(429), 'a second wave is refused entirely');
  for (const r of second) await r.arrayBuffer();
  t.equal(await s.h.store.spendSince('tiny', '2025-03-15T00:00:00.000Z'), spent, 'and spends nothing');
});
