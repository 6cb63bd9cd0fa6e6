// Holds GET /api/v1/generation to protocols.md §1.7: 404 until the generation delay has passed
// since the generation ended (on a settable clock, and in real time by polling), 400/401/404 for
// a bad lookup, and the record's total_cost equal to what the key was charged for every way a
// request can end, in both dialects: completed, cut by fail-/drop-/silent-after, or cancelled by
// the caller mid-stream. The generation id is in the first event, so a caller that left has it.

import t, { type Test } from 'tap';
import { SIM_CATALOG, startSimulatedRouter, type SimulatedRouter } from '../../lib/sim/index.ts';
import { GEN_ID, call, chatBody, chunksOf, contentOf, eventFor, messagesBody, namedEvents, readSse } from './client.ts';

const PROVISIONING = 'sk-or-v1-provisioning-gen';
const NOT_FOUND = { error: { code: 404, message: 'Generation not found' } };
const r10 = (x: number): number => Math.round(x * 1e10) / 1e10;

function costOf(model: string, prompt: number, completion: number): number {
  const p = SIM_CATALOG.find((m) => m.id === model)!.pricing;
  return r10(r10(prompt * Number(p.prompt)) + r10(completion * Number(p.completion)));
}
const promptOf = (body: unknown): number => Math.ceil(Buffer.byteLength(JSON.stringify(body)) / 4);
const lookup = (router: SimulatedRouter, id: string, key: string | null = 'sk-or-v1-looker'): Promise<Response> =>
  call(router, `/api/v1/generation?id=${encodeURIComponent(id)}`, undefined, { key });

t.test('a lookup is 404 until the delay has passed since the generation ended, then 200 (settable clock)', async (t) => {
  let now = Date.UTC(2026, 2, 3, 12, 0, 0);
  const sim = await startSimulatedRouter({ provisioningKey: PROVISIONING, now: () => now });
  t.teardown(() => sim.close());
  const body = chatBody();
  const j = (await (await call(sim, '/api/v1/chat/completions', body, { key: 'sk-or-v1-clocked' })).json()) as any;
  const first = await lookup(sim, j.id);
  t.equal(first.status, 404, 'right after the request');
  t.same(await first.json(), NOT_FOUND);
  now += 1499;
  t.equal((await lookup(sim, j.id)).status, 404, 'the default delay is 1500 ms');
  now += 1;
  const ok = await lookup(sim, j.id);
  t.equal(ok.status, 200);
  const { data } = (await ok.json()) as any;
  const prompt = promptOf(body);
  t.same(data, sim.generation(j.id), 'generation(id) gives the same record');
  t.match(data, {
    id: j.id, model: 'google/gemini-2.5-flash', provider_name: 'Google', total_cost: j.usage.cost, usage: j.usage.cost,
    tokens_prompt: prompt, tokens_completion: 5, native_tokens_prompt: prompt, native_tokens_completion: 5, native_tokens_cached: 0, native_tokens_reasoning: 0,
    finish_reason: 'stop', native_finish_reason: 'STOP', streamed: false, cancelled: false, is_byok: false, upstream_inference_cost: null,
    created_at: new Date(Date.UTC(2026, 2, 3, 12, 0, 0)).toISOString(), latency: 0, generation_time: 0, cache_discount: null,
  });

  sim.setGenerationDelay(10_000);
  t.equal((await lookup(sim, j.id)).status, 404, 'a longer delay hides it again');
  now += 8500;
  t.equal((await lookup(sim, j.id)).status, 200);

  now += 1e9;
  const unknown = await lookup(sim, 'gen-0-doesnotexist');
  t.equal(unknown.status, 404, 'an unknown id is 404 forever');
  t.same(await unknown.json(), NOT_FOUND);
  t.equal(sim.generation('gen-0-doesnotexist'), undefined);

  for (const path of ['/api/v1/generation', '/api/v1/generation?id=', '/api/v1/generation?other=1']) {
    const res = await call(sim, path, undefined);
    t.equal(res.status, 400, `${path}: no id`);
    t.match(await res.json(), { error: { code: 400, message: /id/ } });
  }
  const noKey = await lookup(sim, j.id, null);
  t.equal(noKey.status, 401);
  t.match(await noKey.json(), { error: { code: 401 } });
  const c = (await (await call(sim, '/api/v1/keys', { name: 'doomed' }, { key: PROVISIONING })).json()) as any;
  await call(sim, `/api/v1/keys/${c.data.hash}`, undefined, { key: PROVISIONING, method: 'DELETE' });
  t.equal((await lookup(sim, j.id, c.key)).status, 401, 'a deleted key cannot look up');
  t.equal((await call(sim, `/api/v1/generation?id=${j.id}`, {})).status, 405);

  t.throws(() => sim.setGenerationDelay(-1), TypeError);
  t.throws(() => sim.setGenerationDelay(Number.NaN), TypeError);
  await t.rejects(startSimulatedRouter({ generationDelayMs: -5 }), TypeError);
});

t.test('latency and generation time come from the sim clock', async (t) => {
  let now = Date.UTC(2026, 2, 3, 12, 0, 0);
  const sim = await startSimulatedRouter({ now: () => (now += 10), generationDelayMs: 0 });
  t.teardown(() => sim.close());
  const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key: 'sk-or-v1-ticking' });
  const id = res.headers.get('x-generation-id')!;
  await readSse(res);
  const g = sim.generation(id)!;
  t.ok(g.latency > 0 && g.latency < g.generation_time, `first content after the start, before the end (${g.latency} < ${g.generation_time})`);
  t.equal(g.streamed, true);
});

t.test('in real time: polled until it appears, never before the delay', async (t) => {
  const sim = await startSimulatedRouter({ generationDelayMs: 300 });
  t.teardown(() => sim.close());
  const started = Date.now();
  const j = (await (await call(sim, '/api/v1/messages', messagesBody(), { key: 'sk-or-v1-realtime' })).json()) as any;
  const deadline = Date.now() + 10_000;
  let res = await lookup(sim, j.id);
  while (res.status === 404 && Date.now() < deadline) {
    await res.arrayBuffer();
    await new Promise((resolve) => setImmediate(resolve));
    res = await lookup(sim, j.id);
  }
  t.equal(res.status, 200);
  t.ok(Date.now() - started >= 300, 'not before the delay');
  t.equal(((await res.json()) as any).data.total_cost, j.usage.cost);
});

// One sim, no delay: every path below checks record, charge and HTTP lookup against each other.
const sim = await startSimulatedRouter({ generationDelayMs: 0 });
t.teardown(() => sim.close());
let bearerSeq = 0;
const freshKey = (): string => `sk-or-v1-gen-${++bearerSeq}`;

/** The record of `id` equals the lookup, and its cost is exactly what `key` was charged. */
async function recordFor(t: Test, id: string, key: string): Promise<any> {
  const g = sim.generation(id);
  t.ok(g, `a record for ${id}`);
  t.equal(g!.total_cost, sim.usageByKey(key), 'total_cost == the key\'s usage');
  t.equal(g!.usage, g!.total_cost);
  const res = await lookup(sim, id, key);
  t.equal(res.status, 200);
  t.same(((await res.json()) as any).data, g, 'the lookup shows the same record');
  return g;
}

t.test('chat: cost == key usage for completed, cut and cancelled generations', async (t) => {
  const model = 'google/gemini-2.5-flash';
  t.test('non-streamed, completed', async (t) => {
    const key = freshKey();
    const body = chatBody();
    const j = (await (await call(sim, '/api/v1/chat/completions', body, { key })).json()) as any;
    const g = await recordFor(t, j.id, key);
    t.equal(g.total_cost, j.usage.cost, 'what the answer said it cost');
    t.equal(g.total_cost, costOf(model, promptOf(body), 5));
  });
  t.test('streamed, completed; the id is in the first event', async (t) => {
    const key = freshKey();
    const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key });
    const chunks = chunksOf(await readSse(res));
    t.match(chunks[0].id, GEN_ID);
    t.equal(chunks[0].id, res.headers.get('x-generation-id'));
    const g = await recordFor(t, chunks[0].id, key);
    t.equal(g.total_cost, chunks.at(-1).usage.cost);
    t.match(g, { streamed: true, cancelled: false, finish_reason: 'stop', tokens_completion: 5 });
  });
  t.test('no-cost: the stream carries no cost, the record does', async (t) => {
    const key = freshKey();
    const chunks = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key, sim: 'no-cost;cached=4' })));
    t.notOk('cost' in chunks.at(-1).usage);
    const g = await recordFor(t, chunks[0].id, key);
    t.ok(g.total_cost > 0);
    t.equal(g.native_tokens_cached, 4);
    t.ok(g.cache_discount > 0, 'cache reads cost less than the prompt price');
  });
  for (const [directive, pieces] of [['fail-after=2', 2], ['drop-after=3', 3]] as const) {
    t.test(`streamed, cut by ${directive}`, async (t) => {
      const key = freshKey();
      const body = chatBody({ stream: true });
      const closed = eventFor(sim, 'closed', `chat-${directive}`);
      const s = await readSse(await call(sim, '/api/v1/chat/completions', body, { key, sim: directive, id: `chat-${directive}` }));
      await closed;
      const g = await recordFor(t, chunksOf(s)[0].id, key);
      t.match(g, { finish_reason: 'error', cancelled: false, streamed: true, tokens_completion: pieces });
      t.equal(g.total_cost, costOf(model, promptOf(body), pieces));
    });
  }
  t.test('non-streamed, cut by fail-after', async (t) => {
    const key = freshKey();
    const j = (await (await call(sim, '/api/v1/chat/completions', chatBody(), { key, sim: 'fail-after=3' })).json()) as any;
    const g = await recordFor(t, j.id, key);
    t.match(g, { finish_reason: 'error', tokens_completion: 3 });
    t.equal(g.total_cost, j.usage.cost);
  });
  t.test('streamed, the caller leaves after three chunks', async (t) => {
    const key = freshKey();
    const id = 'chat-cancel';
    const ac = new AbortController();
    const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key, id, signal: ac.signal, sim: 'chunks=40;chunk-delay-ms=20' });
    const s = await readSse(res, (items) => contentOf(chunksOf({ items, error: undefined })) !== '' && chunksOf({ items, error: undefined }).length >= 4);
    const genId = chunksOf(s)[0].id;
    const closed = eventFor(sim, 'closed', id);
    ac.abort();
    t.equal((await closed).aborted, true);
    const g = await recordFor(t, genId, key);
    t.match(g, { cancelled: true, finish_reason: null, streamed: true });
    t.ok(g.tokens_completion >= 3 && g.tokens_completion < 40, `charged what went out (${g.tokens_completion} pieces)`);
    t.ok(g.total_cost > 0);
  });
  t.test('streamed, silent-after until the caller leaves', async (t) => {
    const key = freshKey();
    const id = 'chat-silent';
    const ac = new AbortController();
    const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key, id, signal: ac.signal, sim: 'silent-after=2' });
    const s = await readSse(res, (items) => chunksOf({ items, error: undefined }).length >= 3);
    t.equal(sim.generation(chunksOf(s)[0].id), undefined, 'no record while the generation runs');
    const closed = eventFor(sim, 'closed', id);
    ac.abort();
    await closed;
    t.match(await recordFor(t, chunksOf(s)[0].id, key), { cancelled: true, tokens_completion: 2 });
  });
  t.test('non-streamed, the caller leaves while it is produced', async (t) => {
    const key = freshKey();
    const id = 'chat-json-cancel';
    const body = chatBody();
    const ac = new AbortController();
    const requested = eventFor(sim, 'request', id);
    const closed = eventFor(sim, 'closed', id);
    const pending = call(sim, '/api/v1/chat/completions', body, { key, id, signal: ac.signal, sim: 'chunks=40;chunk-delay-ms=20' });
    await requested;
    ac.abort();
    await t.rejects(pending);
    await closed;
    const charged = sim.usageByKey(key);
    const pieces = Array.from({ length: 40 }, (_, i) => i).filter((k) => costOf(model, promptOf(body), k) === charged);
    t.equal(pieces.length, 1, `charged the prompt and the pieces produced so far (${charged})`);
    t.ok(pieces[0]! < 40);
  });
});

t.test('messages: cost == key usage for completed, cut and cancelled generations', async (t) => {
  const model = 'anthropic/claude-sonnet-4.5';
  t.test('non-streamed, completed', async (t) => {
    const key = freshKey();
    const j = (await (await call(sim, '/api/v1/messages', messagesBody(), { key })).json()) as any;
    t.match(j.id, GEN_ID);
    const g = await recordFor(t, j.id, key);
    t.match(g, { total_cost: j.usage.cost, finish_reason: 'stop', native_finish_reason: 'end_turn', provider_name: 'Anthropic', streamed: false });
  });
  t.test('streamed with a tool call; the id is in message_start', async (t) => {
    const key = freshKey();
    const res = await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { key, sim: 'tool=get_weather;chunks=0' });
    const events = namedEvents(await readSse(res));
    t.equal(events[0]!.event, 'message_start');
    const id = events[0]!.data.message.id;
    t.equal(id, res.headers.get('x-generation-id'));
    const g = await recordFor(t, id, key);
    t.equal(g.total_cost, events.find((e) => e.event === 'message_delta')!.data.usage.cost);
    t.match(g, { finish_reason: 'tool_calls', native_finish_reason: 'tool_use', tokens_completion: 3 });
  });
  for (const [directive, pieces] of [['fail-after=1', 1], ['drop-after=2', 2]] as const) {
    t.test(`streamed, cut by ${directive}`, async (t) => {
      const key = freshKey();
      const body = messagesBody({ stream: true });
      const closed = eventFor(sim, 'closed', `messages-${directive}`);
      const events = namedEvents(await readSse(await call(sim, '/api/v1/messages', body, { key, sim: directive, id: `messages-${directive}` })));
      await closed;
      const g = await recordFor(t, events[0]!.data.message.id, key);
      t.match(g, { finish_reason: 'error', cancelled: false, tokens_completion: pieces });
      t.equal(g.total_cost, costOf(model, promptOf(body), pieces));
    });
  }
  t.test('non-streamed, cut by fail-after: 502 naming the generation', async (t) => {
    const key = freshKey();
    const res = await call(sim, '/api/v1/messages', messagesBody(), { key, sim: 'fail-after=1' });
    t.equal(res.status, 502);
    const j = (await res.json()) as any;
    t.match(j.request_id, GEN_ID);
    t.match(await recordFor(t, j.request_id, key), { finish_reason: 'error', tokens_completion: 1 });
  });
  t.test('streamed, the caller leaves after three deltas', async (t) => {
    const key = freshKey();
    const id = 'messages-cancel';
    const ac = new AbortController();
    const res = await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { key, id, signal: ac.signal, sim: 'chunks=40;chunk-delay-ms=20' });
    const s = await readSse(res, (items) => items.filter((i) => i.kind === 'event' && i.event === 'content_block_delta').length >= 3);
    const genId = namedEvents(s)[0]!.data.message.id;
    const closed = eventFor(sim, 'closed', id);
    ac.abort();
    await closed;
    const g = await recordFor(t, genId, key);
    t.match(g, { cancelled: true, streamed: true });
    t.ok(g.tokens_completion >= 3 && g.tokens_completion < 40, `charged what went out (${g.tokens_completion} pieces)`);
  });
});

t.test('a caller that stops reading and then leaves is charged what went out', async (t) => {
  // 1 MB pieces overrun the socket buffers, so the sim waits for drain until the caller leaves.
  const key = freshKey();
  const id = 'backpressure';
  const ac = new AbortController();
  const res = await call(sim, '/api/v1/chat/completions', chatBody({ stream: true }), { key, id, signal: ac.signal, sim: 'bytes=8000000;chunks=8' });
  const s = await readSse(res, (items) => chunksOf({ items, error: undefined }).length >= 1);
  const closed = eventFor(sim, 'closed', id);
  ac.abort();
  await closed;
  const g = await recordFor(t, chunksOf(s)[0].id, key);
  t.match(g, { cancelled: true, streamed: true });
  t.ok(g.tokens_completion < 8, `not the whole answer (${g.tokens_completion} of 8 pieces)`);
});

t.test('requests refused before routing leave no generation and no charge', async (t) => {
  const key = freshKey();
  for (const directive of ['status=429', 'status=502']) {
    const res = await call(sim, '/api/v1/chat/completions', chatBody(), { key, sim: directive });
    t.equal(res.headers.get('x-generation-id'), null);
    await res.arrayBuffer();
  }
  t.equal(sim.usageByKey(key), 0);
});
