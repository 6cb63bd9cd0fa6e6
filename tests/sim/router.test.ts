// Holds the simulated router's inference side to the wire facts of protocols.md §1-3 and §5.4 and
// to its x-sim directives: every inference route, both dialects, the catalog, and close(). The
// management side, generation lookups and faults have their own files beside this one. It talks
// to a real sim on port 0 over fetch; it must never sleep: abrupt ends are observed through the
// sim's 'request' and 'closed' events.

import { once } from 'node:events';
import t from 'tap';
import { SIM_CATALOG, SIM_TOOL_INPUT, startSimulatedRouter, type SimRequest } from '../../lib/sim/index.ts';
import { GEN_ID, SENTENCE, call, chatBody, chunksOf, contentOf, dataOf, eventFor, expectedCost, messagesBody, namedEvents, readSse } from './client.ts';

const sim = await startSimulatedRouter();
t.teardown(() => sim.close());

t.test('the catalog lists full items with per-token string prices', async (t) => {
  const res = await call(sim, '/api/v1/models', undefined, { key: null });
  t.equal(res.status, 200);
  const body = (await res.json()) as { data: any[] };
  t.same(body.data, SIM_CATALOG);
  const byId = new Map(body.data.map((m) => [m.id, m]));
  const want: Array<[string, string, string, number | null]> = [
    ['google/gemini-2.5-flash', '0.0000003', '0.0000025', 65535],
    ['google/gemini-2.5-flash-lite', '0.0000001', '0.0000004', 65535],
    ['openai/gpt-4.1-mini', '0.0000004', '0.0000016', 32768],
    ['anthropic/claude-sonnet-4.5', '0.000003', '0.000015', 64000],
    ['openai/gpt-5', '0.00000125', '0.00001', 128000],
    ['google/gemini-2.5-pro', '0.00000125', '0.00001', 65536],
    ['meta-llama/llama-3.3-70b-instruct', '0.00000013', '0.00000039', null],
  ];
  for (const [id, prompt, completion, maxOut] of want) {
    const m = byId.get(id);
    t.ok(m, `${id} listed`);
    t.match(m, {
      canonical_slug: String,
      name: String,
      created: Number,
      context_length: Number,
      architecture: { modality: String, input_modalities: Array, output_modalities: ['text'] },
      pricing: { prompt, completion, input_cache_read: String, input_cache_write: String },
      top_provider: { context_length: Number, is_moderated: Boolean },
      supported_parameters: Array,
      links: { details: `/api/v1/models/${id}/endpoints` },
    });
    t.equal(m.top_provider.max_completion_tokens, maxOut, `${id} max_completion_tokens`);
    for (const f of ['per_request_limits', 'default_parameters', 'supported_voices']) t.ok(f in m, `${id} has ${f}`);
    for (const v of Object.values(m.pricing)) t.match(v, /^\d+(\.\d+)?$/, `${id} prices are decimal strings`);
  }
});

t.test('chat completions, non-streamed', async (t) => {
  const body = chatBody();
  const res = await call(sim, '/api/v1/chat/completions', body, { key: 'sk-chat-json' });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^application\/json/);
  const j = (await res.json()) as any;
  t.match(j.id, GEN_ID);
  t.equal(res.headers.get('x-generation-id'), j.id);
  t.match(j, {
    provider: 'Google',
    model: 'google/gemini-2.5-flash',
    object: 'chat.completion',
    created: Number,
    choices: [{ index: 0, finish_reason: 'stop', native_finish_reason: 'STOP', message: { role: 'assistant', content: SENTENCE, tool_calls: [] } }],
  });
  const prompt = Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);
  t.same(j.usage.prompt_tokens_details, { cached_tokens: 0, cache_write_tokens: 0, audio_tokens: 0 });
  t.equal(j.usage.completion_tokens_details.reasoning_tokens, 0);
  t.match(j.usage, { prompt_tokens: prompt, completion_tokens: 5, total_tokens: prompt + 5, cost: expectedCost('google/gemini-2.5-flash', prompt, 5), is_byok: false });
  t.equal(sim.usageByKey('sk-chat-json'), j.usage.cost);
});

t.test('chat completions, streamed', async (t) => {
  const body = chatBody({ stream: true });
  const res = await call(sim, '/api/v1/chat/completions', body);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^text\/event-stream/);
  const s = await readSse(res);
  t.equal(s.error, undefined);
  t.same(s.items[0], { kind: 'comment', text: 'OPENROUTER PROCESSING' }, 'the keep-alive comment comes first');
  const data = dataOf(s);
  t.equal(data.at(-1), '[DONE]');
  const chunks = chunksOf(s);
  const genId = res.headers.get('x-generation-id');
  t.match(genId, GEN_ID);
  for (const c of chunks) t.match(c, { id: genId, provider: 'Google', model: 'google/gemini-2.5-flash', object: 'chat.completion.chunk', created: Number });
  t.same(chunks[0].choices[0].delta, { role: 'assistant', content: '' });
  t.equal(chunks.length, 1 + 5 + 1 + 1, 'role, five content chunks, finish, usage');
  t.equal(contentOf(chunks), SENTENCE);
  const finish = chunks.at(-2);
  t.match(finish.choices[0], { finish_reason: 'stop', native_finish_reason: 'STOP' });
  const usage = chunks.at(-1);
  t.same(usage.choices, [], 'the usage chunk has no choices');
  const prompt = Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);
  t.match(usage.usage, {
    prompt_tokens: prompt,
    completion_tokens: 5,
    total_tokens: prompt + 5,
    prompt_tokens_details: { cached_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: 0 },
    cost: expectedCost('google/gemini-2.5-flash', prompt, 5),
  });
  for (const c of chunks.slice(0, -1)) t.notOk('usage' in c, 'usage only in the last chunk');
});

t.test('usage=choice puts usage on a chunk with one empty choice after the finish chunk', async (t) => {
  const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'usage=choice' });
  const chunks = chunksOf(await readSse(res));
  const last = chunks.at(-1);
  t.match(last.choices, [{ index: 0, delta: {}, finish_reason: null }]);
  t.equal(last.choices.length, 1);
  t.same(last.choices[0].delta, {});
  t.type(last.usage.cost, 'number');
  t.equal(chunks.at(-2).choices[0].finish_reason, 'stop');
});

t.test('chat tool calls', async (t) => {
  t.test('streamed in OpenAI fragments', async (t) => {
    const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true, model: 'openai/gpt-4.1-mini' }), { sim: 'tool=get_weather;chunks=0' });
    const chunks = chunksOf(await readSse(res));
    const calls = chunks.flatMap((c) => c.choices?.[0]?.delta?.tool_calls ?? []);
    t.ok(calls.length >= 2);
    t.match(calls[0], { index: 0, id: /^call_/, type: 'function', function: { name: 'get_weather', arguments: '' } });
    for (const f of calls.slice(1)) {
      t.same(Object.keys(f).sort(), ['function', 'index']);
      t.same(Object.keys(f.function), ['arguments']);
    }
    t.same(JSON.parse(calls.map((c: any) => c.function.arguments).join('')), SIM_TOOL_INPUT);
    t.match(chunks.at(-2).choices[0], { finish_reason: 'tool_calls', native_finish_reason: 'tool_calls' });
    t.equal(chunks.at(-1).usage.completion_tokens, 3, 'the argument fragments are the completion');
  });
  t.test('non-streamed as message.tool_calls', async (t) => {
    const res = await call(sim, '/api/v1/chat/completions', chatBody(), { sim: 'tool=get_weather' });
    const j = (await res.json()) as any;
    const choice = j.choices[0];
    t.equal(choice.finish_reason, 'tool_calls');
    t.equal(choice.message.content, SENTENCE);
    t.match(choice.message.tool_calls, [{ id: /^call_/, type: 'function', function: { name: 'get_weather', arguments: String } }]);
    t.same(JSON.parse(choice.message.tool_calls[0].function.arguments), SIM_TOOL_INPUT);
  });
});

t.test('messages, streamed: Anthropic event order, provider, cost', async (t) => {
  const body = messagesBody({ stream: true });
  const res = await call(sim, '/api/v1/messages?beta=true', body);
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^text\/event-stream/);
  const events = namedEvents(await readSse(res));
  t.same(events.map((e) => e.event), [
    'message_start', 'content_block_start', 'ping',
    'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta', 'content_block_delta',
    'content_block_stop', 'message_delta', 'message_stop',
  ]);
  for (const e of events) t.equal(e.data.type, e.event, 'data.type mirrors the event name');
  const start = events[0]!.data.message;
  t.match(start, { id: GEN_ID, type: 'message', role: 'assistant', model: 'anthropic/claude-sonnet-4.5', provider: 'Anthropic', content: [], stop_reason: null });
  t.equal(res.headers.get('x-generation-id'), start.id);
  const prompt = Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);
  t.match(start.usage, { input_tokens: prompt, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
  t.same(events[1]!.data.content_block, { type: 'text', text: '' });
  t.equal(events.filter((e) => e.event === 'content_block_delta').map((e) => e.data.delta.text).join(''), SENTENCE);
  const delta = events.find((e) => e.event === 'message_delta')!.data;
  t.match(delta, { delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 5, input_tokens: prompt } });
  t.equal(delta.usage.cost, expectedCost('anthropic/claude-sonnet-4.5', prompt, 5));
});

t.test('messages tool_use', async (t) => {
  t.test('streamed with input_json_delta fragments', async (t) => {
    const res = await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { sim: 'tool=get_weather;chunks=1' });
    const events = namedEvents(await readSse(res));
    const toolStart = events.find((e) => e.event === 'content_block_start' && e.data.content_block.type === 'tool_use')!;
    t.match(toolStart.data, { index: 1, content_block: { type: 'tool_use', id: /^toolu_/, name: 'get_weather', input: {} } });
    const fragments = events.filter((e) => e.event === 'content_block_delta' && e.data.index === 1).map((e) => e.data.delta);
    for (const f of fragments) t.equal(f.type, 'input_json_delta');
    t.same(JSON.parse(fragments.map((f) => f.partial_json).join('')), SIM_TOOL_INPUT);
    const names = events.map((e) => e.event);
    t.ok(names.indexOf('content_block_stop') < names.lastIndexOf('content_block_start'), 'the text block closes before the tool block opens');
    t.same(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    t.equal(events.at(-2)!.data.delta.stop_reason, 'tool_use');
  });
  t.test('non-streamed as a tool_use block', async (t) => {
    const res = await call(sim, '/api/v1/messages', messagesBody(), { sim: 'tool=get_weather' });
    const j = (await res.json()) as any;
    t.equal(j.stop_reason, 'tool_use');
    t.match(j.content, [{ type: 'text', text: SENTENCE }, { type: 'tool_use', id: /^toolu_/, name: 'get_weather' }]);
    t.same(j.content[1].input, SIM_TOOL_INPUT);
  });
});

t.test('messages, non-streamed', async (t) => {
  const body = messagesBody({ model: 'anthropic/claude-haiku-4.5' });
  const res = await call(sim, '/api/v1/messages', body, { sim: 'cached=3;cache-write=2' });
  t.equal(res.status, 200);
  const j = (await res.json()) as any;
  t.equal(res.headers.get('x-generation-id'), j.id);
  t.match(j, { id: GEN_ID, type: 'message', role: 'assistant', provider: 'Anthropic', model: 'anthropic/claude-haiku-4.5', stop_reason: 'end_turn', content: [{ type: 'text', text: SENTENCE }] });
  const prompt = Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);
  t.match(j.usage, { input_tokens: prompt - 5, output_tokens: 5, cache_read_input_tokens: 3, cache_creation_input_tokens: 2 });
  const p = SIM_CATALOG.find((m) => m.id === 'anthropic/claude-haiku-4.5')!.pricing;
  const cost = (prompt - 5) * Number(p.prompt) + 3 * Number(p.input_cache_read) + 2 * Number(p.input_cache_write) + 5 * Number(p.completion);
  t.ok(Math.abs(j.usage.cost - cost) < 1e-9, 'cache reads and writes are priced at their own rates');
});

t.test('count_tokens does not exist upstream', async (t) => {
  const res = await call(sim, '/api/v1/messages/count_tokens', messagesBody());
  t.equal(res.status, 404);
  t.same(await res.json(), { error: { message: 'Not Found', code: 404 } });
});

t.test('plain HTTP errors', async (t) => {
  const noKey = await call(sim, '/api/v1/chat/completions', chatBody(), { key: null });
  t.equal(noKey.status, 401);
  t.same(await noKey.json(), { error: { message: 'Missing Authentication header', code: 401 } });
  const noKeyMessages = await call(sim, '/api/v1/messages', messagesBody(), { key: null });
  t.equal(noKeyMessages.status, 401);
  t.match(await noKeyMessages.json(), { type: 'error', error: { type: 'authentication_error' }, request_id: null });
  const unknown = await call(sim, '/api/v1/nope', undefined);
  t.equal(unknown.status, 404);
  t.same(await unknown.json(), { error: { message: 'Not Found', code: 404 } });
  const wrongMethod = await call(sim, '/api/v1/chat/completions', undefined);
  t.equal(wrongMethod.status, 405);
  t.match(await wrongMethod.json(), { error: { code: 405 } });
  const badJson = await call(sim, '/api/v1/chat/completions', undefined, { raw: '{nope' });
  t.equal(badJson.status, 400);
  t.match(await badJson.json(), { error: { code: 400 } });
});

t.test('status directive', async (t) => {
  t.test('chat dialect, with retry-after on 429 and 503', async (t) => {
    for (const code of [429, 503]) {
      const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: `status=${code}` });
      t.equal(res.status, code);
      t.equal(res.headers.get('retry-after'), '7');
      t.match(res.headers.get('content-type'), /^application\/json/);
      t.match(await res.json(), { error: { code, message: String, metadata: { error_type: code === 429 ? 'rate_limit_exceeded' : 'provider_overloaded', provider_name: 'Google' } } });
    }
    const res = await call(sim, '/api/v1/chat/completions', chatBody(), { sim: 'status=402' });
    t.equal(res.status, 402);
    t.equal(res.headers.get('retry-after'), null);
    t.match(await res.json(), { error: { code: 402, metadata: { error_type: 'payment_required' } } });
  });
  t.test('messages dialect, Anthropic types', async (t) => {
    const want: Array<[number, string]> = [[400, 'invalid_request_error'], [401, 'authentication_error'], [402, 'billing_error'], [403, 'permission_error'], [404, 'not_found_error'], [429, 'rate_limit_error'], [500, 'api_error'], [502, 'api_error'], [503, 'overloaded_error'], [504, 'timeout_error'], [529, 'overloaded_error']];
    for (const [code, type] of want) {
      const res = await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { sim: `status=${code}` });
      t.equal(res.status, code);
      t.equal(res.headers.get('retry-after'), code === 429 || code === 503 ? '7' : null, `retry-after on ${code}`);
      const j = (await res.json()) as any;
      t.match(j, { type: 'error', error: { type, message: String, error_type: String }, request_id: null }, `${code} → ${type}`);
    }
  });
  t.test('the catalog honours it too', async (t) => {
    const res = await call(sim, '/api/v1/models', undefined, { sim: 'status=503' });
    t.equal(res.status, 503);
    t.match(await res.json(), { error: { code: 503 } });
  });
});

t.test('chunks, bytes, no-cost, provider, reasoning', async (t) => {
  const twenty = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'chunks=20' })));
  t.equal(twenty.filter((c) => typeof c.choices[0]?.delta?.content === 'string' && c.choices[0].delta.content !== '').length, 20);
  t.equal(twenty.at(-1).usage.completion_tokens, 20);

  const big = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'bytes=10000;chunks=8' })));
  const text = contentOf(big);
  t.ok(Math.abs(Buffer.byteLength(text) - 10000) <= 8, `about 10000 bytes (got ${text.length})`);
  t.equal(big.length, 1 + 8 + 2);

  const j = (await (await call(sim, '/api/v1/chat/completions', chatBody(), { sim: 'no-cost; provider=Together ;reasoning=4' })).json()) as any;
  t.equal(j.provider, 'Together');
  t.notOk('cost' in j.usage);
  t.equal(j.usage.completion_tokens, 9, 'reasoning tokens count inside completion tokens');
  t.equal(j.usage.completion_tokens_details.reasoning_tokens, 4);

  const events = namedEvents(await readSse(await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { sim: 'no-cost' })));
  t.notOk('cost' in events.find((e) => e.event === 'message_delta')!.data.usage);

  const slow = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'delay-ms=1;chunk-delay-ms=1;chunks=3' })));
  t.equal(contentOf(slow), 'Hello from the');
});

t.test('fail-after ends the stream with an in-band error', async (t) => {
  t.test('chat', async (t) => {
    const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'fail-after=2' });
    t.equal(res.status, 200);
    const s = await readSse(res);
    t.equal(s.error, undefined, 'the response ends cleanly');
    t.notOk(dataOf(s).includes('[DONE]'), 'no [DONE] after the error');
    const chunks = chunksOf(s);
    t.equal(contentOf(chunks), 'Hello from ');
    const last = chunks.at(-1);
    t.match(last, { id: GEN_ID, provider: 'Google', error: { code: 502, message: String }, choices: [{ finish_reason: 'error' }] });
  });
  t.test('chat, non-streamed: 200 with the partial message', async (t) => {
    const j = (await (await call(sim, '/api/v1/chat/completions', chatBody(), { sim: 'fail-after=3' })).json()) as any;
    t.match(j.choices[0], { finish_reason: 'error', message: { content: 'Hello from the ' }, error: { code: 502 } });
  });
  t.test('messages', async (t) => {
    const res = await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { sim: 'fail-after=1' });
    const events = namedEvents(await readSse(res));
    t.same(events.map((e) => e.event), ['message_start', 'content_block_start', 'ping', 'content_block_delta', 'error']);
    t.match(events.at(-1)!.data, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  });
  t.test('messages, non-streamed: an error status', async (t) => {
    const res = await call(sim, '/api/v1/messages', messagesBody(), { sim: 'fail-after=1' });
    t.equal(res.status, 502);
    t.match(await res.json(), { type: 'error', error: { type: 'api_error' } });
  });
});

t.test('drop-after cuts the connection after n chunks', async (t) => {
  const id = 'drop-chat';
  const closed = eventFor(sim, 'closed', id);
  const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'drop-after=3', id });
  const s = await readSse(res);
  t.ok(s.error, 'reading the body fails');
  t.equal(contentOf(chunksOf(s)), 'Hello from the ', 'the chunks before the cut arrived');
  t.notOk(dataOf(s).includes('[DONE]'));
  t.equal((await closed).aborted, false, 'the sim cut it, the caller did not abort');

  const mid = 'drop-messages';
  const closedM = eventFor(sim, 'closed', mid);
  const sm = await readSse(await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { sim: 'drop-after=0', id: mid }));
  t.ok(sm.error);
  t.same(namedEvents(sm).map((e) => e.event), ['message_start', 'content_block_start', 'ping']);
  await closedM;

  const jid = 'drop-json';
  const closedJ = eventFor(sim, 'closed', jid);
  await t.rejects(call(sim, '/api/v1/chat/completions', chatBody(), { sim: 'drop-after=1', id: jid }));
  t.equal((await closedJ).aborted, false);
});

t.test('silent-after goes quiet until the caller closes', async (t) => {
  const id = 'silent';
  const ac = new AbortController();
  const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { sim: 'silent-after=2', id, signal: ac.signal });
  const s = await readSse(res, (items) => chunksOf({ items, error: undefined }).length >= 3);
  t.equal(contentOf(chunksOf(s)), 'Hello from ');
  const closed = eventFor(sim, 'closed', id);
  ac.abort();
  const r = await closed;
  t.equal(r.aborted, true, 'the caller closed before the response finished');
  t.equal(r.json.model, 'google/gemini-2.5-flash');
});

t.test('hang reads the body and never answers', async (t) => {
  for (const path of ['/api/v1/chat/completions', '/api/v1/messages']) {
    const id = `hang${path}`;
    const ac = new AbortController();
    const requested = eventFor(sim, 'request', id);
    const closed = eventFor(sim, 'closed', id);
    const pending = call(sim, path, chatBody({ stream: true }), { sim: 'hang', id, signal: ac.signal });
    const r = await requested;
    t.equal(r.json.stream, true, 'the body was read');
    ac.abort();
    await t.rejects(pending, { name: 'AbortError' }, 'no headers ever came');
    t.equal((await closed).aborted, true);
  }
});

t.test('[[reply:…]] sets the answer from the last user message', async (t) => {
  const messages = [
    { role: 'user', content: 'earlier [[reply:ignored]]' },
    { role: 'assistant', content: 'ok' },
    { role: 'user', content: [{ type: 'text', text: 'Pick one. ' }, { type: 'text', text: '[[reply:agent]]' }] },
  ];
  const j = (await (await call(sim, '/api/v1/chat/completions', { model: 'google/gemini-2.5-flash-lite', messages })).json()) as any;
  t.equal(j.choices[0].message.content, 'agent');
  t.equal(j.usage.completion_tokens, 1);
  const s = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', { model: 'meta-llama/llama-3.3-70b-instruct', stream: true, messages: [{ role: 'user', content: '[[reply:two words]]' }] })));
  t.equal(contentOf(s), 'two words');
  t.equal(s.at(-1).usage.completion_tokens, 2);
  t.equal(s[0].provider, 'DeepInfra', 'open-weight models are served by DeepInfra');
  const m = (await (await call(sim, '/api/v1/messages', messagesBody({ messages }))).json()) as any;
  t.same(m.content, [{ type: 'text', text: 'agent', citations: null }]);
});

t.test('received records requests unless record is false', async (t) => {
  const id = 'recorded';
  await (await call(sim, '/api/v1/chat/completions', chatBody(), { id })).json();
  const r = sim.received.find((x) => x.headers['x-test-id'] === id)!;
  t.match(r, { method: 'POST', path: '/api/v1/chat/completions', aborted: false });
  t.same(JSON.parse(r.body), r.json);
  t.equal(r.headers.authorization, 'Bearer sk-or-v1-test-inference');

  const quiet = await startSimulatedRouter({ record: false });
  t.teardown(() => quiet.close());
  const requested = eventFor(quiet, 'request', 'q');
  await (await call(quiet, '/api/v1/messages?beta=true', messagesBody(), { id: 'q' })).json();
  t.equal((await requested).path, '/api/v1/messages?beta=true');
  t.same(quiet.received, []);
});

t.test('close() ends hung exchanges at once, and they do not count as caller aborts', async (t) => {
  const doomed = await startSimulatedRouter();
  t.teardown(() => doomed.close());
  const requested = once(doomed.events, 'request');
  const pending = call(doomed, '/api/v1/chat/completions', chatBody(), { sim: 'hang' });
  await requested;
  const closed = once(doomed.events, 'closed');
  await doomed.close();
  const [r] = (await closed) as [SimRequest];
  t.equal(r.aborted, false);
  await t.rejects(pending);
});
