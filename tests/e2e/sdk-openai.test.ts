// The `openai` SDK against a real gateway and the simulated router: chat completions, plain and
// streamed, reach the router rewritten (tier model, fallbacks, max_tokens cap) with the profile's
// upstream key and never the client's; the SDK gets the router's bytes unchanged; each request
// leaves one row (upstream or estimated cost); models.list, an upstream 429 and a mid-stream
// failure surface through the SDK's own types.

import OpenAI from 'openai';
import t, { type Test } from 'tap';
import { startHarness } from '../helpers/gateway.ts';
import { sse } from '../helpers/sse.ts';
import { checkNoClientKey, checkUpstreamHeaders, inference, recordingFetch, replay } from '../helpers/upstream.ts';

async function setup(t: Test, opts: Parameters<typeof startHarness>[1] = {}) {
  const h = await startHarness(t, opts);
  const key = await h.key('dev');
  const rec = recordingFetch();
  const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0, fetch: rec.fetch });
  return { h, key, rec, client };
}

/** Two answers of the sim to the same request differ only in the generation id and its `created` second. */
function normalize(bytes: Buffer, generationId: string): string {
  const created = generationId.split('-')[1];
  return bytes.toString('utf8').replaceAll(generationId, 'gen-ID').replaceAll(`"created":${created}`, '"created":0');
}

t.test('non-streaming: rewritten upstream, the router JSON unchanged, one row with upstream cost', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const completion = await client.chat.completions.create(
    { model: 'sluice/fast', user: 'alice', max_completion_tokens: 100_000, messages: [{ role: 'user', content: 'Greet me. [[reply:Hi there, Alice!]]' }] },
    { headers: { 'x-sluice-session': 'conv-1', 'x-forwarded-for': '203.0.113.9' } },
  );
  t.equal(completion.choices[0]!.message.content, 'Hi there, Alice!');

  const [up] = inference(h.sim);
  t.equal(up!.path, '/api/v1/chat/completions');
  t.strictSame(up!.json, {
    ...JSON.parse(rec.calls[0]!.body),
    model: 'google/gemini-2.5-flash',
    models: ['openai/gpt-4.1-mini'],
    max_completion_tokens: 8192,
  }, 'tier model, tier fallbacks, max_completion_tokens capped; everything else as sent');
  checkUpstreamHeaders(t, up!.headers, 'dev');

  // The router's bytes reach the SDK unchanged: the same request sent straight to the sim gives the
  // same body but for the generation id, which the sim also sends as x-generation-id.
  const got = await rec.calls[0]!.bytes;
  t.equal(rec.calls[0]!.headers.get('x-generation-id'), completion.id);
  const direct = await replay(h.sim, up!);
  t.equal(normalize(got, completion.id), normalize(direct.bytes, direct.id), 'byte for byte the router answer');
  t.strictSame(completion, JSON.parse(got.toString('utf8')), 'the SDK returns the router JSON as it came');

  const [row] = await h.rows(1);
  const usage = completion.usage as OpenAI.CompletionUsage & { cost: number };
  t.match(row, {
    endpoint: 'chat', profile: 'dev', end_user: 'alice', session: 'conv-1', tier: 'fast', requested_model: 'sluice/fast',
    model: 'google/gemini-2.5-flash', stream: false, status: 200, outcome: 'ok',
    input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens,
    cost_usd: usage.cost, cost_source: 'upstream', provider: 'Google', generation_id: completion.id, degradation: 'none',
  });
  t.ok(usage.prompt_tokens > 0 && usage.completion_tokens > 0 && usage.cost > 0);
  t.equal(h.rowCount(), 1, 'exactly one row');
  checkNoClientKey(t, h, key);
});

t.test('streaming with include_usage: the answer, the bytes, the row', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const stream = await client.chat.completions.create(
    { model: 'sluice/fast', user: 'bob', stream: true, stream_options: { include_usage: true }, messages: [{ role: 'user', content: 'Count. [[reply:one two three four five six seven]]' }] },
    { headers: { 'x-api-key': key } },
  );
  const chunks: OpenAI.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  t.equal(chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''), 'one two three four five six seven');

  const [up] = inference(h.sim);
  t.strictSame(up!.json, {
    ...JSON.parse(rec.calls[0]!.body),
    model: 'google/gemini-2.5-flash',
    models: ['openai/gpt-4.1-mini'],
    max_tokens: 8192,
  }, 'max_tokens set to the cap when the client sent none');
  checkUpstreamHeaders(t, up!.headers, 'dev');

  const got = await rec.calls[0]!.bytes;
  const id = chunks[0]!.id;
  const direct = await replay(h.sim, up!);
  t.equal(normalize(got, id), normalize(direct.bytes, direct.id), 'the SSE bytes are the router bytes');
  const data = sse(got.toString('utf8')).map((ev) => ev.data);
  t.equal(data.at(-1), '[DONE]');
  t.strictSame(chunks, data.slice(0, -1).map((d) => JSON.parse(d)), 'every chunk the SDK yields is a router event as sent');

  const usage = chunks.at(-1)!.usage as OpenAI.CompletionUsage & { cost: number };
  const [row] = await h.rows(1);
  t.match(row, {
    endpoint: 'chat', end_user: 'bob', session: null, tier: 'fast', stream: true, status: 200, outcome: 'ok',
    input_tokens: usage.prompt_tokens, output_tokens: usage.completion_tokens, cost_usd: usage.cost,
    cost_source: 'upstream', provider: 'Google', generation_id: id,
  });
  t.equal(usage.completion_tokens, 7, 'one token per streamed piece');
  t.equal(h.rowCount(), 1, 'exactly one row');
  checkNoClientKey(t, h, key);
});

t.test('no cost from the router: the row estimates from the tier prices', async (t) => {
  const { h, key, client } = await setup(t);
  const completion = await client.chat.completions.create(
    { model: 'sluice/fast', user: 'carol', messages: [{ role: 'user', content: 'hello' }] },
    { headers: { 'x-sim': 'no-cost', 'x-claude-code-session-id': 'c0ffee00-0000-4000-8000-000000000001' } },
  );
  t.notOk('cost' in completion.usage!, 'the router reported no cost');
  const [up] = inference(h.sim);
  checkUpstreamHeaders(t, up!.headers, 'dev');
  const [row] = await h.rows(1);
  const expected = (row!.input_tokens * 0.3 + row!.output_tokens * 2.5) / 1e6;
  t.match(row, {
    cost_source: 'estimate', end_user: 'cc:c0ffee00-0000-4000-8000-000000000001',
    input_tokens: completion.usage!.prompt_tokens, output_tokens: completion.usage!.completion_tokens,
  });
  t.ok(row!.cost_usd > 0, 'a positive estimate');
  t.ok(Math.abs(row!.cost_usd - expected) < 1e-12, `estimate ${row!.cost_usd} ≈ ${expected}`);
  checkNoClientKey(t, h, key);
});

t.test('models.list gives the aliases and the tier models', async (t) => {
  const { h, client } = await setup(t);
  const ids: string[] = [];
  for await (const m of client.models.list()) ids.push(m.id);
  t.strictSame(ids, [
    'sluice/auto', 'sluice/fast', 'sluice/agent', 'sluice/reasoning',
    'google/gemini-2.5-flash', 'anthropic/claude-sonnet-4.5', 'google/gemini-2.5-pro',
  ]);
  t.equal(inference(h.sim).length, 0, 'nothing went upstream');
  t.equal(h.rowCount(), 0);
});

t.test('an upstream 429 is the SDK RateLimitError with the router body, unwrapped', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const err = await client.chat.completions
    .create({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-sim': 'status=429' } })
    .then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof OpenAI.RateLimitError, 'RateLimitError');
  const e = err as InstanceType<typeof OpenAI.RateLimitError>;
  t.equal(e.status, 429);
  t.equal(e.headers?.get('retry-after'), '7', 'the router headers pass');
  const got = await rec.calls[0]!.bytes;
  const direct = await replay(h.sim, inference(h.sim)[0]!);
  t.equal(got.toString('utf8'), direct.bytes.toString('utf8'), 'the router error body, byte for byte');
  t.strictSame(e.error, JSON.parse(got.toString('utf8')).error);
  t.match(e.error, { message: 'Provider returned error', code: 429, metadata: { error_type: 'rate_limit_exceeded' } });
  t.equal(e.message, '429 Provider returned error');
  const [row] = await h.rows(1);
  t.match(row, { status: 429, outcome: 'upstream_error', stream: false, input_tokens: 0, output_tokens: 0 });
  t.equal(rec.calls.length, 1, 'no retry');
  checkNoClientKey(t, h, key);
});

t.test('a mid-stream failure makes the SDK stream throw an APIError', async (t) => {
  const { h, key, client } = await setup(t);
  const stream = await client.chat.completions.create(
    { model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'hi' }] },
    { headers: { 'x-sim': 'fail-after=2' } },
  );
  const seen: string[] = [];
  const err = await (async () => {
    for await (const c of stream) seen.push(c.choices[0]?.delta.content ?? '');
  })().then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof OpenAI.APIError, 'APIError');
  t.match((err as InstanceType<typeof OpenAI.APIError>).error, { code: 502, message: 'Provider disconnected unexpectedly' });
  t.strictSame(seen, ['', 'Hello ', 'from '], 'the role chunk and two pieces came first');
  const [row] = await h.rows(1);
  t.match(row, { stream: true, status: 200, outcome: 'upstream_error' });
  checkNoClientKey(t, h, key);
});
