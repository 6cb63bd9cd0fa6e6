// The Responses API route end to end, with fetch through the real gateway against the simulated
// router: a Codex-shaped request streamed and as JSON (what went upstream, the bytes that came
// back, the row), a function call and reasoning, budget degradation at 70 % and 85 % and the block
// at 100 %, a revoked key, the stateful refusals, the upstream cut mid-stream (sluice's error and
// response.failed events, numbered on), and a client that leaves mid-stream (estimate, then the
// router's cost by generation id). docs/responses.md is what these hold.

import { randomUUID } from 'node:crypto';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import t, { type Test } from 'tap';
import { revokeKey } from '../../cli/keys.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { RECONCILE } from '../../lib/upstream/reconcile.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { until } from '../helpers/processes.ts';

const SESSION = '01a21037-d823-7521-b1bb-0db43948f683';
const FAST = 'google/gemini-2.5-flash';

/** What Codex CLI 0.169.0 sends (../shared/reference/codex-cli-request.json), shortened. */
function codexBody(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    model: 'sluice/agent', stream: true,
    input: [
      { type: 'message', id: 'msg_1', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent running in the Codex CLI.' }] },
      { type: 'message', id: 'msg_2', role: 'user', content: [{ type: 'input_text', text: '<environment_context>…</environment_context>' }] },
      { type: 'message', id: 'msg_3', role: 'user', content: [{ type: 'input_text', text: 'say hi' }] },
    ],
    tools: [
      { type: 'function', name: 'exec_command', description: 'Runs a command', strict: false, parameters: { type: 'object', properties: { cmd: { type: 'string' } } } },
      { type: 'namespace', name: 'multi_agent_v1', description: 'sub-agents', tools: [{ type: 'function', name: 'spawn_agent' }] },
      { type: 'web_search', external_web_access: false },
    ],
    tool_choice: 'auto', parallel_tool_calls: true, reasoning: { summary: 'auto' }, store: false,
    include: ['reasoning.encrypted_content'], prompt_cache_key: SESSION,
    client_metadata: { session_id: SESSION, 'x-codex-installation-id': 'ef0a798c-3eff-409d-a4c6-4b3746c9205c' },
    ...extra,
  };
}

const CODEX_HEADERS = {
  'session-id': SESSION, 'thread-id': SESSION, 'x-codex-beta-features': 'remote_compaction_v2', 'x-codex-window-id': `${SESSION}:0`,
  'x-codex-turn-metadata': JSON.stringify({ installation_id: 'ef0a798c', session_id: SESSION, request_kind: 'turn' }), originator: 'codex_exec',
};

function post(h: Harness, key: string, body: unknown, headers: Record<string, string> = {}, signal?: AbortSignal): Promise<Response> {
  return fetch(`${h.url}/v1/responses`, {
    method: 'POST', signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', accept: 'text/event-stream', ...headers },
    body: JSON.stringify(body),
  });
}

function events(text: string): EventSourceMessage[] {
  const out: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (e) => out.push(e) });
  parser.feed(text);
  return out;
}

/** The data of every typed event (the trailing [DONE] aside). */
function typed(text: string): any[] {
  return events(text).filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data));
}

const inference = (h: Harness) => h.sim.received.filter((r) => r.path.startsWith('/api/v1/responses'));

async function rowOf(h: Harness, res: Response, count: number): Promise<RequestRow> {
  const rows = await h.rows(count);
  const row = rows.find((r) => r.id === res.headers.get('x-sluice-request-id'));
  if (!row) throw new Error('no row for this request');
  return row;
}

/** The row's token split, from a response object's usage (input counts cached tokens; rows do not). */
function expectedTokens(usage: any) {
  const cached = usage.input_tokens_details?.cached_tokens ?? 0;
  const written = usage.input_tokens_details?.cache_write_tokens ?? 0;
  return {
    input_tokens: usage.input_tokens - cached - written, cache_read_tokens: cached, cache_write_tokens: written,
    output_tokens: usage.output_tokens, reasoning_tokens: usage.output_tokens_details?.reasoning_tokens ?? 0,
  };
}

const tokensOf = (r: RequestRow) => ({
  input_tokens: r.input_tokens, cache_read_tokens: r.cache_read_tokens, cache_write_tokens: r.cache_write_tokens, output_tokens: r.output_tokens, reasoning_tokens: r.reasoning_tokens,
});

for (const store of ['sqlite', 'postgres'] as const) {
  t.test(`${store}: a Codex request, streamed and as JSON: what goes upstream, what comes back, the row`, async (t) => {
    const h = await startHarness(t, { store });
    const key = await h.key('dev');

    const res = await post(h, key, codexBody(), CODEX_HEADERS);
    t.equal(res.status, 200);
    t.match(res.headers.get('content-type'), /text\/event-stream/);
    t.strictSame([res.headers.get('x-sluice-tier'), res.headers.get('x-sluice-degradation')], ['agent', 'none']);
    const text = await res.text();
    const evs = typed(text);
    t.equal(evs[0].type, 'response.created', 'the stream opens with response.created');
    const done = evs.at(-1);
    t.equal(done.type, 'response.completed', 'and ends with response.completed');
    t.ok(text.trimEnd().endsWith('data: [DONE]'), 'then [DONE], as the router ends its streams');
    t.strictSame(evs.map((e) => e.sequence_number), evs.map((_, i) => evs[0].sequence_number + i), 'sequence numbers untouched');

    const sent = inference(h).at(-1)!;
    t.equal(sent.path, '/api/v1/responses');
    t.equal(sent.headers.authorization, 'Bearer sk-or-v1-devdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdevdev0', "the profile's upstream key");
    for (const h_ of ['session-id', 'thread-id', 'x-codex-beta-features', 'x-codex-window-id', 'x-codex-turn-metadata', 'x-sluice-session']) {
      t.notOk(h_ in sent.headers, `${h_} is consumed, not forwarded`);
    }
    t.equal(sent.headers.originator, 'codex_exec', 'other headers pass');
    t.equal(sent.json.model, 'anthropic/claude-sonnet-4.5', 'sluice/agent resolved');
    t.notOk('client_metadata' in sent.json, 'client_metadata dropped');
    const body = codexBody();
    for (const k of ['input', 'tools', 'store', 'include', 'prompt_cache_key', 'tool_choice', 'parallel_tool_calls']) t.strictSame(sent.json[k], body[k], `${k} forwarded as sent`);
    t.type(sent.json.max_output_tokens, 'number', 'an output limit is set');

    const row = await rowOf(h, res, 1);
    t.match(row, {
      endpoint: 'responses', profile: 'dev', tier: 'agent', requested_model: 'sluice/agent', stream: true, status: 200, outcome: 'ok',
      session: SESSION, end_user: null, generation_id: done.response.id, cost_source: 'upstream', degradation: 'none',
    });
    t.match(done.response.id, /^gen-/, 'the response id is a generation id');
    t.strictSame(tokensOf(row), expectedTokens(done.response.usage), 'the row carries the usage of response.completed');
    t.equal(row.cost_usd, done.response.usage.cost, "the router's cost");

    // The same as JSON, with a user: the body passes whole, the row reads it.
    const json = await post(h, key, codexBody({ stream: false, user: 'alice' }));
    t.equal(json.status, 200);
    const answer: any = await json.json();
    t.equal(answer.object, 'response');
    const jrow = await rowOf(h, json, 2);
    t.match(jrow, { stream: false, end_user: 'alice', session: null, generation_id: answer.id, outcome: 'ok', cost_usd: answer.usage.cost });
    t.strictSame(tokensOf(jrow), expectedTokens(answer.usage));
  });
}

t.test('a function call and reasoning: the tool name and the reasoning tokens reach the row', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  for (const stream of [true, false]) {
    const res = await post(h, key, codexBody({ stream }), { 'x-sim': 'tool=exec_command;reasoning=12;cached=20' });
    t.equal(res.status, 200);
    const text = await res.text();
    const final = stream ? typed(text).at(-1).response : JSON.parse(text);
    t.ok(final.output.some((i: any) => i.type === 'function_call' && i.name === 'exec_command'), `${stream ? 'SSE' : 'JSON'}: the sim called the tool`);
    const row = await rowOf(h, res, stream ? 1 : 2);
    t.strictSame(row.tools, ['exec_command'], 'the tool is recorded by name');
    t.equal(row.reasoning_tokens, 12);
    t.equal(row.cache_read_tokens, 20);
    t.strictSame(tokensOf(row), expectedTokens(final.usage));
  }
});

/** A finished request of `tiny` already in the store, so the budget starts where the test needs it. */
function spent(usd: number, at: number): RequestRow {
  return {
    id: randomUUID(), ts: new Date(at).toISOString(), endpoint: 'responses', profile: 'tiny', key_prefix: 'sluice_tiny_…seed',
    end_user: null, session: null, run: null, tier: 'fast', requested_model: 'sluice/fast', model: FAST, stream: false, status: 200, outcome: 'ok',
    input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: usd, cost_source: 'upstream',
    provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2, overhead_ms: 0.1, tools: [],
  };
}

t.test('budget stages on the Responses route: 70 % fast tier, 85 % 2048 output tokens, 100 % a 429 Codex stops on', async (t) => {
  const stages: Array<[number, string]> = [[0.00075, 'fast-only'], [0.0009, 'max-tokens']];
  for (const [usd, stage] of stages) {
    t.test(stage, async (t) => {
      const h = await startHarness(t);
      await h.store.insertRequests([spent(usd, h.clock.now)]);
      const key = await h.key('tiny');
      const res = await post(h, key, codexBody({ model: 'sluice/agent', max_output_tokens: 30000, reasoning: { max_tokens: 20000 } }));
      t.equal(res.status, 200);
      await res.text();
      t.equal(res.headers.get('x-sluice-degradation'), stage);
      const sent = inference(h).at(-1)!.json;
      t.equal(sent.model, FAST, 'the fast tier, whatever was asked');
      if (stage === 'max-tokens') t.equal(sent.max_output_tokens, 2048, 'max_output_tokens 2048');
      else t.ok(sent.max_output_tokens <= 8192, "the fast tier's cap");
      t.ok(sent.reasoning?.max_tokens === undefined || sent.reasoning.max_tokens < sent.max_output_tokens, 'the reasoning budget fits under the cap');
      const row = await rowOf(h, res, 1);
      t.match(row, { endpoint: 'responses', tier: 'fast', degradation: stage });
    });
  }
  t.test('blocked', async (t) => {
    const h = await startHarness(t);
    await h.store.insertRequests([spent(0.001, h.clock.now)]);
    const key = await h.key('tiny');
    const before = inference(h).length;
    const res = await post(h, key, codexBody(), CODEX_HEADERS);
    t.equal(res.status, 429);
    t.ok(Number(res.headers.get('retry-after')) >= 3600, 'retry-after at least an hour');
    t.equal(res.headers.get('x-should-retry'), 'false');
    const body: any = await res.json();
    t.strictSame([body.error.type, body.error.code, body.error.param], ['insufficient_quota', 'budget_exhausted', null], 'the type Codex stops on at once');
    t.equal(inference(h).length, before, 'nothing went upstream');
  });
});

t.test('a revoked key: 401 in the dialect, x-should-retry false, nothing upstream', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev', { name: 'codex' });
  t.equal((await post(h, key, codexBody({ stream: false }))).status, 200, 'the key works first');
  await revokeKey(h.store, { profile: 'dev', name: 'codex' }, h.clock.now);
  h.clock.now += 61_000; // past the key cache
  const before = inference(h).length;
  const res = await post(h, key, codexBody(), CODEX_HEADERS);
  t.equal(res.status, 401);
  t.equal(res.headers.get('x-should-retry'), 'false');
  const body: any = await res.json();
  t.strictSame(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
  t.strictSame([body.error.type, body.error.code], ['invalid_api_key', 'invalid_api_key']);
  t.equal(inference(h).length, before);
});

t.test('stateful fields: 400 before any spend, even for sluice/auto (no decision call)', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const before = h.sim.received.length;
  for (const extra of [{ previous_response_id: 'resp_1' }, { store: true }, { conversation: 'conv_1' }, { background: true }]) {
    const res = await post(h, key, codexBody({ model: 'sluice/auto', ...extra }), CODEX_HEADERS);
    t.equal(res.status, 400, JSON.stringify(extra));
    const body: any = await res.json();
    t.equal(body.error.code, 'invalid_body');
    t.match(body.error.message, /stateless/);
  }
  t.equal(h.sim.received.length, before, 'no decision call, nothing upstream');
  t.equal(h.rowCount(), 0, 'no row');
});

t.test('the upstream cut mid-stream: error and response.failed, numbered on, naming the response; the row an upstream error', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const res = await post(h, key, codexBody(), { 'x-sim': 'chunks=8;drop-after=3' });
  t.equal(res.status, 200);
  const text = await res.text();
  const all = events(text);
  const evs = typed(text);
  const created = evs[0];
  t.equal(created.type, 'response.created');
  const tail = all.slice(-3);
  t.strictSame(tail.map((e) => e.event ?? null), ['error', 'response.failed', null], 'error, response.failed, [DONE]');
  const [err, failed] = evs.slice(-2);
  t.match(err, { type: 'error', code: 'upstream_stream_failed', param: null });
  t.match(failed, { type: 'response.failed', response: { id: created.response.id, status: 'failed', error: { code: 'upstream_stream_failed' } } });
  const upstreamEvents = evs.slice(0, -2);
  t.equal(err.sequence_number, upstreamEvents.length, "the error continues the router's numbering");
  t.equal(failed.sequence_number, err.sequence_number + 1);
  const row = await rowOf(h, res, 1);
  t.match(row, { outcome: 'upstream_error', generation_id: created.response.id });
});

t.test("the router's own in-stream failure passes through and marks the row", async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const res = await post(h, key, codexBody(), { 'x-sim': 'chunks=6;fail-after=2' });
  const evs = typed(await res.text());
  t.ok(evs.some((e) => e.type === 'error' || e.type === 'response.failed'), 'the sim failed the response in-stream');
  t.notOk(evs.some((e) => e.code === 'upstream_stream_failed'), 'sluice added nothing: the stream ended cleanly');
  t.equal((await rowOf(h, res, 1)).outcome, 'upstream_error');
});

async function disconnect(t: Test, store: 'sqlite' | 'postgres') {
  const h = await startHarness(t, { store, env: { SLUICE_RECONCILE_POLL_S: '0.1', SLUICE_MANAGEMENT_TIMEOUT_S: '1' } });
  const key = await h.key('dev');
  h.sim.setGenerationDelay(0); // the record is there at once: the first lookup (ring 1's timing is tested in ring1.test.ts) finds it
  const ac = new AbortController();
  const res = await post(h, key, codexBody(), { 'x-sim': 'chunks=60;chunk-delay-ms=25' }, ac.signal);
  const reader = res.body!.getReader();
  let text = '';
  while (text.split('response.output_text.delta').length < 4) text += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  await reader.read().catch(() => {});
  const row = await rowOf(h, res, 1);
  const created = typed(text.slice(0, text.lastIndexOf('\n\n') + 2))[0];
  t.match(row, { outcome: 'client_disconnect', cost_source: 'estimate', generation_id: created.response.id, endpoint: 'responses' });
  // The router's figure replaces the estimate once the generation can be looked up.
  const record = await until('the generation record at the router', async () => h.sim.generation(row.generation_id!));
  h.clock.now = Date.parse(row.ts) + RECONCILE.firstLookupMs;
  const reconciled = await until("the row to carry the router's cost", async () =>
    (await h.store.listRequests(100)).find((r) => r.id === row.id && r.cost_source === 'upstream'));
  t.ok(record.total_cost > 0, 'the router charged the part that streamed');
  t.equal(reconciled.cost_usd, record.total_cost);
}

for (const store of ['sqlite', 'postgres'] as const) {
  t.test(`${store}: a client that leaves mid-stream: an estimate with the generation id, then the router's cost`, (t) => disconnect(t, store));
}
