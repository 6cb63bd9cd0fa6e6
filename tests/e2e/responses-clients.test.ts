// Real Responses API clients through sluice against the simulated router (issue 17): Codex CLI
// (`codex exec` with a custom provider whose base_url is sluice and env_key names the client key)
// for a plain answer and a turn with a tool call, the openai SDK's `responses.create` streamed and
// not, and the Vercel AI SDK's default OpenAI provider, each by base URL alone, on both stores;
// rows with the right tokens and tool names; a revoked key and an exhausted budget stop each.

import { createOpenAI } from '@ai-sdk/openai';
import { APICallError, generateText } from 'ai';
import OpenAI from 'openai';
import t from 'tap';
import { codex } from '../helpers/clients.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const ANSWER = 'Hello from the simulated router.';

const responsesCalls = (h: Harness) => h.sim.received.filter((r) => r.path === '/api/v1/responses');

for (const store of ['sqlite', 'postgres'] as const) {
  t.test(`${store}: Codex CLI answers through sluice, with and without a tool call`, async (t) => {
    const h = await startHarness(t, { store });
    const key = await h.key('dev');
    const plain = await codex(t, h.url, key, 'say hi');
    t.equal(plain.code, 0, `codex exited 0 (${plain.stderr.split('\n').filter((l) => l.startsWith('ERROR')).join(' ')})`);
    t.match(plain.stdout, ANSWER, 'the answer is printed');
    const sent = responsesCalls(h).at(-1)!;
    t.equal(sent.json.model, 'anthropic/claude-sonnet-4.5', 'sluice/agent resolved');
    t.equal(sent.json.max_output_tokens, 32000, 'the cap set, as chat sets max_tokens');
    t.notOk('previous_response_id' in sent.json);
    t.notOk('session-id' in sent.headers, "Codex's session header is consumed");
    const [row] = await h.rows(1);
    t.match(row, { endpoint: 'responses', tier: 'agent', model: 'anthropic/claude-sonnet-4.5', stream: true, status: 200, outcome: 'ok' });
    t.ok(row.input_tokens > 1000 && row.output_tokens === 5 && row.cost_usd > 0, `tokens ${row.input_tokens}/${row.output_tokens}, cost ${row.cost_usd}`);
    t.ok(row.generation_id?.startsWith('gen-'), 'the response id is the generation id');
    t.match(row.session, /^[0-9a-f-]{36}$/, "Codex's session-id is the session");

    // A turn with a tool call: the model calls exec_command once, Codex runs it and sends the output back.
    const tool = await codex(t, h.url, key, 'what is the weather', { 'x-sim': 'tool=exec_command' });
    const calls = responsesCalls(h).length;
    t.ok(calls >= 3, `the tool turn took ${calls - 1} requests`);
    const rows = await h.rows(calls);
    const toolRow = rows.find((r) => r.tools.includes('exec_command'));
    t.ok(toolRow, 'a row names the tool the model called');
    t.equal(toolRow?.endpoint, 'responses');
    t.ok(responsesCalls(h).at(-1)!.json.input.some((i: any) => i.type === 'function_call_output'), 'Codex sent the tool output back');
    t.equal(tool.code, 0, 'codex finished the turn');
  });
}

for (const store of ['sqlite', 'postgres'] as const) t.test(`${store}: the openai SDK responses.create, streamed and not, and the AI SDK default provider`, async (t) => {
  const h = await startHarness(t, { store });
  const key = await h.key('dev');
  const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key, maxRetries: 0 });
  const json = await client.responses.create({ model: 'sluice/fast', input: 'hi', user: 'end-user-7' });
  t.equal(json.output_text, ANSWER);
  t.match(json.id, /^gen-/);
  const stream = await client.responses.create({ model: 'sluice/fast', input: [{ role: 'user', content: 'hi' }], stream: true });
  let text = '';
  let completed = false;
  for await (const ev of stream) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') completed = true;
  }
  t.equal(text, ANSWER);
  t.ok(completed, 'response.completed arrived');

  const openai = createOpenAI({ baseURL: `${h.url}/v1`, apiKey: key });
  const ai = await generateText({ model: openai('sluice/fast'), prompt: 'hi', maxOutputTokens: 500, maxRetries: 0 });
  t.equal(ai.text, ANSWER, 'the AI SDK default (responses) provider answered');
  t.equal(responsesCalls(h).at(-1)!.json.max_output_tokens, 500, 'a smaller client limit is kept');

  const rows = await h.rows(3);
  t.ok(rows.every((r) => r.endpoint === 'responses' && r.model === 'google/gemini-2.5-flash' && r.outcome === 'ok'));
  t.ok(rows.some((r) => r.end_user === 'end-user-7'), '`user` is the end user');
});

t.test('a revoked key and an exhausted budget stop every Responses client at once', async (t) => {
  const h = await startHarness(t);
  const seen = { n: 0 };
  h.gateway.server.on('request', (req) => void (req.url?.startsWith('/v1/responses') && seen.n++));

  // Unknown key: a 401 the clients do not retry (Codex with stream_max_retries = 0, as docs/responses.md advises).
  const bad = 'sluice_dev_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA';
  const cx = await codex(t, h.url, bad, 'say hi');
  t.not(cx.code, 0);
  t.match(cx.stderr, /401/);
  const client = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: bad });
  const err = await client.responses.create({ model: 'sluice/fast', input: 'hi' }).then(() => null, (e: unknown) => e);
  t.equal((err as { status?: number }).status, 401, 'openai SDK: 401');
  const aiErr = await generateText({ model: createOpenAI({ baseURL: `${h.url}/v1`, apiKey: bad })('sluice/fast'), prompt: 'hi' }).then(() => null, (e: unknown) => e);
  t.ok(APICallError.isInstance(aiErr) && aiErr.statusCode === 401, 'AI SDK: 401, not retried');
  t.equal(seen.n, 3, 'one request each: nobody retried a 401');

  // Exhausted budget: 429 with type insufficient_quota, which Codex treats as final.
  const key = await h.key('tiny');
  await h.gateway.deps.budget.add('tiny', 0.002, h.clock.now);
  seen.n = 0;
  const before = responsesCalls(h).length;
  const quota = await codex(t, h.url, key, 'say hi');
  t.not(quota.code, 0);
  t.match(quota.stderr, /Quota exceeded/, 'Codex shows the quota message and stops');
  const qErr = await new OpenAI({ baseURL: `${h.url}/v1`, apiKey: key }).responses.create({ model: 'sluice/fast', input: 'hi' }).then(() => null, (e: unknown) => e);
  t.equal((qErr as { status?: number }).status, 429);
  t.equal(seen.n, 2, 'Codex and the openai SDK made one request each (x-should-retry: false)');
  t.equal(responsesCalls(h).length, before, 'nothing went upstream');
});
