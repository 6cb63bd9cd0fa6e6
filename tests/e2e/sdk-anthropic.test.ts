// The `@anthropic-ai/sdk` client (and plain fetch for what the SDK cannot send) against a real
// gateway and the simulated router: messages plain and streamed reach the router with the tier
// model, the profile key and `system` intact, and come back as the router sent them; tool calls
// land in the row; a Claude Code request is sanitized per the spec table and logged; count_tokens,
// mid-stream failures and upstream overload errors pass through unwrapped.

import Anthropic from '@anthropic-ai/sdk';
import t, { type Test } from 'tap';
import { startHarness } from '../helpers/gateway.ts';
import { sse } from '../helpers/sse.ts';
import { checkNoClientKey, checkUpstreamHeaders, inference, recordingFetch, replay } from '../helpers/upstream.ts';

async function setup(t: Test, profile = 'dev') {
  const h = await startHarness(t);
  const key = await h.key(profile);
  const rec = recordingFetch();
  const client = new Anthropic({ baseURL: h.url, apiKey: key, maxRetries: 0, fetch: rec.fetch });
  return { h, key, rec, client };
}

/** Two answers of the sim to the same (tool-free) request differ only in the generation id. */
function normalize(bytes: Buffer, generationId: string): string {
  return bytes.toString('utf8').replaceAll(generationId, 'gen-ID');
}

const SYSTEM: Anthropic.TextBlockParam[] = [
  { type: 'text', text: 'You are a terse assistant.' },
  { type: 'text', text: 'Project rules: be kind.', cache_control: { type: 'ephemeral' } },
];

t.test('messages.create: default tier model, system intact, the router JSON unchanged, one row', async (t) => {
  // The assistant profile's default tier is fast: a claude-… name means google/gemini-2.5-flash, capped at 8192.
  const { h, key, rec, client } = await setup(t, 'assistant');
  const msg = await client.messages.create({
    model: 'claude-sonnet-5-5', max_tokens: 20_000, system: SYSTEM, metadata: { user_id: 'user-42' },
    messages: [{ role: 'user', content: 'Greet me. [[reply:Hello, user 42.]]' }],
  });
  const text = msg.content.map((b) => (b.type === 'text' ? b.text : '')).join('');
  t.equal(text, 'Hello, user 42.');

  const [up] = inference(h.sim);
  t.equal(up!.path, '/api/v1/messages');
  t.strictSame(up!.json, { ...JSON.parse(rec.calls[0]!.body), model: 'google/gemini-2.5-flash', max_tokens: 8192 },
    'the default tier model and the capped max_tokens; nothing else changed');
  t.strictSame(up!.json.system, SYSTEM, 'system forwarded intact, cache_control included');
  t.notOk('models' in up!.json, 'no fallback list on the messages dialect');
  checkUpstreamHeaders(t, up!.headers, 'assistant');
  t.ok(rec.calls[0]!.sent.get('anthropic-version'));
  t.equal(up!.headers['anthropic-version'], rec.calls[0]!.sent.get('anthropic-version'), 'the SDK anthropic-version passes unchanged');

  const got = await rec.calls[0]!.bytes;
  const direct = await replay(h.sim, up!);
  t.equal(normalize(got, msg.id), normalize(direct.bytes, direct.id), 'byte for byte the router answer');
  t.strictSame(msg, JSON.parse(got.toString('utf8')), 'the SDK returns the router JSON as it came');

  const usage = msg.usage as Anthropic.Usage & { cost: number };
  const [row] = await h.rows(1);
  t.match(row, {
    endpoint: 'messages', profile: 'assistant', end_user: 'user-42', session: null, tier: 'fast', requested_model: 'claude-sonnet-5-5',
    model: 'google/gemini-2.5-flash', stream: false, status: 200, outcome: 'ok',
    input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, cost_usd: usage.cost, cost_source: 'upstream',
    provider: 'Google', generation_id: msg.id, tools: [],
  });
  t.ok(usage.cost > 0);
  t.equal(h.rowCount(), 1);
  checkNoClientKey(t, h, key);
});

t.test('messages.stream and create({stream: true}): the text, the events as sent, the rows', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const params = {
    model: 'sluice/fast', max_tokens: 1000, system: SYSTEM,
    messages: [{ role: 'user' as const, content: 'Count. [[reply:one two three four five]]' }],
  };
  const stream = client.messages.stream(params);
  const final = await stream.finalMessage();
  t.equal(final.content.map((b) => (b.type === 'text' ? b.text : '')).join(''), 'one two three four five');

  const [up] = inference(h.sim);
  t.strictSame(up!.json, { ...JSON.parse(rec.calls[0]!.body), model: 'google/gemini-2.5-flash' }, 'max_tokens under the cap is kept');
  t.equal(up!.json.stream, true);
  checkUpstreamHeaders(t, up!.headers, 'dev');
  const got = await rec.calls[0]!.bytes;
  const direct = await replay(h.sim, up!);
  t.equal(normalize(got, final.id), normalize(direct.bytes, direct.id), 'the SSE bytes are the router bytes');

  // The raw stream yields each event as parsed from the wire: the same objects the router sent.
  const raw = await client.messages.create({ ...params, stream: true });
  const events: Anthropic.RawMessageStreamEvent[] = [];
  for await (const ev of raw) events.push(ev);
  const wire = sse((await rec.calls[1]!.bytes).toString('utf8'));
  t.strictSame(events, wire.filter((e) => e.event !== 'ping').map((e) => JSON.parse(e.data)), 'every event as the router sent it');
  t.strictSame(wire.map((e) => e.event), [
    'message_start', 'content_block_start', 'ping', ...Array(5).fill('content_block_delta'), 'content_block_stop', 'message_delta', 'message_stop',
  ]);

  const delta = events.find((e) => e.type === 'message_delta') as Anthropic.MessageDeltaEvent;
  const second = (events[0] as Anthropic.RawMessageStartEvent).message.id;
  const rows = await h.rows(2);
  t.match(rows.find((r) => r.generation_id === final.id), { endpoint: 'messages', tier: 'fast', model: 'google/gemini-2.5-flash', stream: true, status: 200, outcome: 'ok' });
  t.match(rows.find((r) => r.generation_id === second), {
    endpoint: 'messages', stream: true, outcome: 'ok', input_tokens: delta.usage.input_tokens, output_tokens: 5,
    cost_usd: (delta.usage as unknown as { cost: number }).cost, cost_source: 'upstream', provider: 'Google',
  });
  t.equal(delta.usage.output_tokens, 5);
  t.equal(h.rowCount(), 2);
  checkNoClientKey(t, h, key);
});

t.test('tool_use, plain and streamed, is recorded in the row tools', async (t) => {
  const { h, key, client } = await setup(t);
  const tools: Anthropic.Tool[] = [{ name: 'get_weather', description: 'Weather for a place', input_schema: { type: 'object', properties: { location: { type: 'string' } } } }];
  const opts = { headers: { 'x-sim': 'tool=get_weather' } };
  const plain = await client.messages.create({ model: 'sluice/fast', max_tokens: 500, tools, messages: [{ role: 'user', content: 'Weather in Oslo?' }] }, opts);
  t.match(plain.content.find((b) => b.type === 'tool_use'), { name: 'get_weather', input: { location: 'Oslo', unit: 'celsius' } });
  const streamed = await client.messages.create({ model: 'sluice/fast', max_tokens: 500, tools, stream: true, messages: [{ role: 'user', content: 'Weather in Oslo?' }] }, opts);
  const starts: string[] = [];
  for await (const ev of streamed) if (ev.type === 'content_block_start') starts.push(ev.content_block.type);
  t.strictSame(starts, ['text', 'tool_use']);
  const rows = await h.rows(2);
  t.equal(rows.length, 2);
  for (const row of rows) t.match(row, { outcome: 'ok', tools: ['get_weather'] });
  t.strictSame(rows.map((r) => r.stream).sort(), [false, true]);
  checkNoClientKey(t, h, key);
});

t.test('the x-api-key header works too and never goes upstream', async (t) => {
  const { h, key } = await setup(t);
  const res = await fetch(`${h.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'sluice/fast', max_tokens: 50, messages: [{ role: 'user', content: 'hi [[reply:hey]]' }] }),
  });
  t.equal(res.status, 200);
  const body = await res.json() as Anthropic.Message;
  t.match(body, { type: 'message', content: [{ type: 'text', text: 'hey' }] });
  checkUpstreamHeaders(t, inference(h.sim)[0]!.headers, 'dev');
  const [row] = await h.rows(1);
  t.match(row, { endpoint: 'messages', outcome: 'ok', generation_id: body.id });
  checkNoClientKey(t, h, key);
});

t.test('a Claude Code request is sanitized per the spec table, logged, and keyed to its session', async (t) => {
  const { h, key } = await setup(t);
  const session = '5f0c3c2e-7a41-4d0e-9f57-3b7d1c2a9e10';
  const beta = 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27';
  const system = [
    { type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: { type: 'ephemeral' } },
    { type: 'text', text: 'Working directory: /src/app', cache_control: { type: 'ephemeral', ttl: '1h' } },
  ];
  const schema = { type: 'object', properties: { file_path: { type: 'string' } }, required: ['file_path'] };
  const sent = {
    model: 'claude-opus-5-5',
    max_tokens: 64000,
    stream: true,
    temperature: 1,
    system,
    metadata: { user_id: JSON.stringify({ device_id: 'a1b2c3', account_uuid: '0b6f0a7e-1111-4222-8333-444455556666', session_id: session }) },
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Fix the failing test.' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Looking at it.' }] },
      { role: 'user', content: [{ type: 'text', text: 'It is in tests/x.test.ts', cache_control: { type: 'ephemeral' } }] },
      { role: 'system', content: '<system-reminder>Plan mode is off.</system-reminder>', output_config: { effort: 'low' } },
    ],
    tools: [
      { name: 'Read', description: 'Read a file', input_schema: schema, strict: true },
      { name: 'WebSearch', description: 'Search the web', input_schema: { type: 'object', properties: {} }, defer_loading: true },
    ],
    thinking: { type: 'adaptive' },
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    output_config: { effort: 'high' },
  };
  const res = await fetch(`${h.url}/v1/messages?beta=true`, {
    method: 'POST',
    headers: {
      authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01',
      'anthropic-beta': beta, 'x-claude-code-session-id': session, 'x-app': 'cli',
    },
    body: JSON.stringify(sent),
  });
  t.equal(res.status, 200);
  const events = sse(await res.text());
  t.equal(events.at(-1)?.event, 'message_stop', 'the stream completed');

  const [up] = inference(h.sim);
  t.equal(up!.path, '/api/v1/messages?beta=true', 'the query string is kept');
  t.strictSame(up!.json, {
    model: 'anthropic/claude-sonnet-4.5',
    max_tokens: 32000,
    stream: true,
    temperature: 1,
    system,
    metadata: sent.metadata,
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'Fix the failing test.' }] },
      { role: 'assistant', content: [{ type: 'text', text: 'Looking at it.' }] },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'It is in tests/x.test.ts', cache_control: { type: 'ephemeral' } },
          { type: 'text', text: '<system-reminder>Plan mode is off.</system-reminder>' },
        ],
      },
    ],
    tools: [
      { name: 'Read', description: 'Read a file', input_schema: schema },
      { name: 'WebSearch', description: 'Search the web', input_schema: { type: 'object', properties: {} } },
    ],
  }, 'the sanitized body: fields dropped, the system turn merged into the last user turn');
  checkUpstreamHeaders(t, up!.headers, 'dev');
  t.equal(up!.headers['anthropic-beta'], beta);
  t.equal(up!.headers['anthropic-version'], '2023-06-01');
  t.equal(up!.headers['x-app'], 'cli', 'other headers pass');

  const [row] = await h.rows(1);
  t.match(row, { end_user: `cc:${session}`, session, tier: 'agent', requested_model: 'claude-opus-5-5', model: 'anthropic/claude-sonnet-4.5', stream: true, outcome: 'ok' });
  const line = h.logs.find((l) => l.msg === 'sanitized request');
  t.ok(line, 'the removals are logged');
  t.strictSame([...line!.removed].sort(), ['context_management', 'messages[role=system]', 'output_config', 'thinking', 'tools[].defer_loading', 'tools[].strict']);
  t.equal(line!.req, row!.id, 'the log line names the request');
  checkNoClientKey(t, h, key);
});

t.test('count_tokens: the router 404 comes back as it is, with a row', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const params = { model: 'claude-sonnet-5-5', messages: [{ role: 'user' as const, content: 'how long is this?' }] };
  const err = await client.messages.countTokens(params).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof Anthropic.NotFoundError, 'NotFoundError');
  const [up] = inference(h.sim);
  t.equal(up!.path, '/api/v1/messages/count_tokens');
  t.strictSame(up!.json, JSON.parse(rec.calls[0]!.body), 'forwarded as sent: no model rewrite');
  checkUpstreamHeaders(t, up!.headers, 'dev');
  const direct = await replay(h.sim, up!);
  const got = await rec.calls[0]!.bytes;
  t.equal(got.toString('utf8'), direct.bytes.toString('utf8'), 'the router 404 body, byte for byte');
  t.strictSame((err as InstanceType<typeof Anthropic.NotFoundError>).error, JSON.parse(got.toString('utf8')));

  const res = await fetch(`${h.url}/v1/messages/count_tokens`, {
    method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json' }, body: JSON.stringify(params),
  });
  t.equal(res.status, 404);
  t.strictSame(await res.json(), JSON.parse(direct.bytes.toString('utf8')));
  const rows = await h.rows(2);
  for (const row of rows) t.match(row, { endpoint: 'count_tokens', status: 404, requested_model: 'claude-sonnet-5-5' });
  checkNoClientKey(t, h, key);
});

t.test('a mid-stream failure makes the SDK throw', async (t) => {
  const { h, key, client } = await setup(t);
  const stream = client.messages.stream({ model: 'sluice/fast', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-sim': 'fail-after=2' } });
  const texts: string[] = [];
  stream.on('text', (d) => texts.push(d));
  const err = await stream.finalMessage().then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof Anthropic.APIError, 'APIError');
  t.match((err as InstanceType<typeof Anthropic.APIError>).error, { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } });
  t.strictSame(texts, ['Hello ', 'from '], 'two pieces arrived before the failure');
  const [row] = await h.rows(1);
  t.match(row, { stream: true, status: 200, outcome: 'upstream_error' });
  checkNoClientKey(t, h, key);
});

t.test('an upstream 529 overloaded error passes through unchanged', async (t) => {
  const { h, key, rec, client } = await setup(t);
  const err = await client.messages
    .create({ model: 'sluice/fast', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] }, { headers: { 'x-sim': 'status=529' } })
    .then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof Anthropic.OverloadedError, 'OverloadedError');
  const e = err as InstanceType<typeof Anthropic.OverloadedError>;
  t.equal(e.status, 529);
  const got = await rec.calls[0]!.bytes;
  const direct = await replay(h.sim, inference(h.sim)[0]!);
  t.equal(got.toString('utf8'), direct.bytes.toString('utf8'), 'the router error body, byte for byte');
  t.strictSame(e.error, { type: 'error', error: { type: 'overloaded_error', message: 'Provider returned error', error_type: 'provider_overloaded' }, request_id: null });
  t.equal(rec.calls.length, 1, 'no retry');
  const [row] = await h.rows(1);
  t.match(row, { status: 529, outcome: 'upstream_error' });
  checkNoClientKey(t, h, key);
});
