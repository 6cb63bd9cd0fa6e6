// The simulated router's Responses API (lib/sim/responses.ts): the JSON object and the event
// stream (sequence numbers in order, the generation id first, usage with cost in
// response.completed, then [DONE]), a reasoning item, one function call per tool= unless the
// input answers it, fail-after as response.failed, a caller charged for what it got, and the
// generation lookup agreeing with the usage.

import t from 'tap';
import { startSimulatedRouter } from '../../lib/sim/index.ts';
import { GEN_ID, SENTENCE, call, eventFor, expectedCost, readSse, type Sse } from './client.ts';

const sim = await startSimulatedRouter({ generationDelayMs: 0 });
t.teardown(() => sim.close());
const PATH = '/api/v1/responses';
/** The stream's events with their data unparsed ([DONE] is no JSON). */
const namedEvents = (s: Sse) => s.items.flatMap((i) => (i.kind === 'event' ? [{ event: i.event, data: i.data }] : []));
const body = (extra: Record<string, unknown> = {}) => ({ model: 'openai/gpt-5', input: [{ role: 'user', content: [{ type: 'input_text', text: 'ping' }] }], ...extra });

t.test('JSON: the response object, usage with cost, the generation lookup', async (t) => {
  const res = await call(sim, PATH, body({ instructions: 'be brief' }));
  t.equal(res.status, 200);
  const j = (await res.json()) as any;
  t.match(j, { object: 'response', status: 'completed', model: 'openai/gpt-5', instructions: 'be brief', store: false, previous_response_id: null });
  t.match(j.id, GEN_ID, 'the response id is the generation id');
  t.equal(j.output.length, 1);
  t.match(j.output[0], { type: 'message', role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: SENTENCE }] });
  t.equal(j.usage.output_tokens, 5);
  t.equal(j.usage.total_tokens, j.usage.input_tokens + 5);
  t.equal(j.usage.cost, expectedCost('openai/gpt-5', j.usage.input_tokens, 5));
  const g = sim.generation(j.id)!;
  t.equal(g.total_cost, j.usage.cost, 'the lookup charges what the usage says');
  const string = (await (await call(sim, PATH, { model: 'openai/gpt-5', input: 'say [[reply:two words]]' })).json()) as any;
  t.equal(string.output[0].content[0].text, 'two words', 'a string input is the user turn');
});

t.test('SSE: the event sequence of a text answer', async (t) => {
  const s = await readSse(await call(sim, PATH, body({ stream: true })));
  const events = namedEvents(s);
  const names = events.map((e) => e.event);
  t.same(names.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  t.same(names.slice(-5), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed', undefined]);
  t.equal(events.at(-1)!.data, '[DONE]', '[DONE] after response.completed');
  const json = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
  t.same(json.map((j) => j.sequence_number), json.map((_, i) => i), 'sequence numbers count up from 0');
  t.ok(json.every((j, i) => j.type === names[i]), 'each data type matches its event name');
  t.match(json[0].response.id, GEN_ID, 'the first event carries the generation id');
  t.equal(json.filter((j) => j.type === 'response.output_text.delta').map((j) => j.delta).join(''), SENTENCE);
  const done = json.at(-1);
  t.match(done.response, { status: 'completed', usage: { output_tokens: 5, cost: Number } });
  t.equal(done.response.output[0].content[0].text, SENTENCE);
});

t.test('tool=: one function call, then text once the input answers it; reasoning=; no-cost', async (t) => {
  const s = await readSse(await call(sim, PATH, body({ stream: true }), { sim: 'tool=exec_command;reasoning=7' }));
  const json = namedEvents(s).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
  const added = json.filter((j) => j.type === 'response.output_item.added').map((j) => j.item.type);
  t.same(added, ['reasoning', 'function_call'], 'a reasoning item, then the call; no message');
  const args = json.filter((j) => j.type === 'response.function_call_arguments.delta').map((j) => j.delta).join('');
  t.same(JSON.parse(args), { location: 'Oslo', unit: 'celsius' });
  const completed = json.at(-1).response;
  t.match(completed.output[1], { type: 'function_call', name: 'exec_command', status: 'completed', call_id: /^call_/ });
  t.equal(completed.usage.output_tokens_details.reasoning_tokens, 7);
  const answered = body({ input: [{ role: 'user', content: 'x' }, { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{}' }, { type: 'function_call_output', call_id: 'c1', output: 'ok' }] });
  const next = (await (await call(sim, PATH, answered, { sim: 'tool=exec_command;no-cost' })).json()) as any;
  t.equal(next.output[0].type, 'message', 'the call was answered: the model writes text');
  t.notOk('cost' in next.usage, 'no-cost leaves the cost out');
});

t.test('fail-after: response.failed then [DONE]; JSON: a failed response', async (t) => {
  const s = await readSse(await call(sim, PATH, body({ stream: true }), { sim: 'fail-after=2' }));
  const events = namedEvents(s);
  const failed = JSON.parse(events.at(-2)!.data);
  t.equal(failed.type, 'response.failed');
  t.match(failed.response, { status: 'failed', error: { code: 'server_error' } });
  t.equal(events.at(-1)!.data, '[DONE]');
  const j = (await (await call(sim, PATH, body(), { sim: 'fail-after=2' })).json()) as any;
  t.match(j, { status: 'failed', error: { code: 'server_error' } });
  t.equal(j.output[0].status, 'incomplete');
  t.equal(j.usage.output_tokens, 2, 'charged for the two pieces produced');
});

t.test('a caller that leaves mid-stream is charged for what it got; errors use the chat envelope', async (t) => {
  const ac = new AbortController();
  const closed = eventFor(sim, 'closed', 'leaver');
  const res = await call(sim, PATH, body({ stream: true }), { sim: 'chunks=50;chunk-delay-ms=20', id: 'leaver', signal: ac.signal });
  await readSse(res, (items) => items.filter((i) => i.kind === 'event' && i.event === 'response.output_text.delta').length >= 3).catch(() => undefined);
  ac.abort();
  const req = await closed;
  t.equal(req.aborted, true);
  const bad = await call(sim, PATH, body({ model: 'acme/none' }));
  t.equal(bad.status, 400);
  t.same(await bad.json(), { error: { message: 'acme/none is not a valid model ID', code: 400 } });
  const noKey = await call(sim, PATH, body(), { key: null });
  t.equal(noKey.status, 401);
  t.match(await noKey.json(), { error: { code: 401 } });
  t.equal((await call(sim, PATH, undefined, { method: 'GET' })).status, 405);
});
