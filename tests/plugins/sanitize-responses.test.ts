// The Responses-dialect sanitizer (docs/responses.md, the field table): each stateful field a
// stateless router cannot honour answers 400 in the dialect with what to send instead; Codex's
// request (../shared/reference/codex-cli-request.json's shape) passes with only client_metadata
// removed, its `input` judged from the scan and never decoded, and every other member's bytes kept.

import t from 'tap';
import type { ReadCtx } from '../../lib/context.ts';
import { GatewayError } from '../../lib/errors.ts';
import { scanJson } from '../../lib/json-scan.ts';
import { bodyChanged, bodyFromScan, encodeBody } from '../../lib/request-body.ts';
import { sanitizeResponses } from '../../plugins/sanitize-responses.ts';

const plugin = sanitizeResponses();

/** A context whose body was read from bytes the way plugins/read-body.ts reads it. */
function fromBytes(json: string): ReadCtx {
  const raw = Buffer.from(json);
  const scan = scanJson(raw, { maxDepth: 512, watch: new Set(['messages', 'tools', 'input']), entryKeys: ['role', 'type', 'strict', 'defer_loading'] })!;
  return { id: 'unit', dialect: 'responses', route: 'responses', raw, body: bodyFromScan(raw, scan), removed: [] as string[] } as unknown as ReadCtx;
}

function refusal(body: Record<string, unknown>): GatewayError | undefined {
  try {
    plugin.run(fromBytes(JSON.stringify(body)));
  } catch (err) {
    if (err instanceof GatewayError) return err;
    throw err;
  }
  return undefined;
}

// What Codex CLI 0.169.0 sends (texts shortened; a long developer prompt keeps `input` over the eager-decode size).
const codex = {
  model: 'sluice/agent', stream: true,
  input: [
    { type: 'message', id: 'msg_1', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent. '.repeat(60) }] },
    { type: 'message', id: 'msg_2', role: 'user', content: [{ type: 'input_text', text: 'say hi' }] },
    { type: 'function_call', call_id: 'call_1', name: 'exec_command', arguments: '{"cmd":"ls"}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'README.md' },
    { type: 'reasoning', summary: [], encrypted_content: 'gAAAA' },
  ],
  tools: [
    { type: 'function', name: 'exec_command', description: 'Runs a command', strict: false, parameters: { type: 'object', properties: {} } },
    { type: 'namespace', name: 'multi_agent_v1', description: 'sub-agents', tools: [{ type: 'function', name: 'spawn_agent' }] },
    { type: 'web_search', external_web_access: false },
  ],
  tool_choice: 'auto', parallel_tool_calls: true, reasoning: { summary: 'auto' }, store: false,
  include: ['reasoning.encrypted_content'], prompt_cache_key: '01a21037-d823-7521-b1bb-0db43948f683',
  client_metadata: { session_id: '01a21037-d823-7521-b1bb-0db43948f683', 'x-codex-installation-id': 'ef0a798c-3eff-409d-a4c6-4b3746c9205c' },
};

t.test('runs on the responses route only', async (t) => {
  t.same([...plugin.routes], ['responses']);
});

t.test("Codex's request: client_metadata goes, nothing else changes, input is never decoded", async (t) => {
  const json = JSON.stringify(codex);
  const ctx = fromBytes(json);
  plugin.run(ctx);
  t.same(ctx.removed, ['client_metadata']);
  t.equal(bodyChanged(ctx.body!), true);
  t.type(Object.getOwnPropertyDescriptor(ctx.body!, 'input')?.get, 'function', 'input is still the lazy accessor: judged from the scan');
  const sent = JSON.parse(Buffer.concat(encodeBody(ctx.body!)).toString());
  const { client_metadata: _gone, ...rest } = codex;
  t.strictSame(sent, rest, 'every other member arrives as sent');
  t.ok(Buffer.concat(encodeBody(ctx.body!)).includes(Buffer.from(JSON.stringify(codex.input))), 'input keeps its original bytes');
});

t.test('a request with nothing to remove is left alone', async (t) => {
  for (const body of [{ model: 'm', input: 'hi' }, { model: 'm', input: [{ role: 'user', content: 'hi' }], store: false, background: false }, { model: 'm' }, { model: 'm', store: null, previous_response_id: null, conversation: null }]) {
    const ctx = fromBytes(JSON.stringify(body));
    plugin.run(ctx);
    t.same(ctx.removed, [], JSON.stringify(body));
    t.equal(bodyChanged(ctx.body!), false);
  }
});

t.test('stateful fields answer 400 in the dialect, saying what to send instead', async (t) => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['previous_response_id', { previous_response_id: 'resp_123' }, /previous_response_id.*stateless.*whole conversation in `input`/],
    ['previous_response_id of another type', { previous_response_id: 7 }, /previous_response_id/],
    ['store: true', { store: true }, /store: true.*stateless.*store: false/],
    ['conversation (id)', { conversation: 'conv_1' }, /conversation.*stateless/],
    ['conversation (object)', { conversation: { id: 'conv_1' } }, /conversation.*stateless/],
    ['background: true', { background: true }, /background: true.*stream: true/],
    ['an item_reference', { input: [{ role: 'user', content: 'hi' }, { type: 'item_reference', id: 'msg_9' }] }, /item_reference.*Send the items themselves/],
    ["Codex's compaction_trigger", { input: [...codex.input, { type: 'compaction_trigger' }] }, /compaction_trigger.*remote_compaction.*compacts locally/],
  ];
  for (const [name, extra, message] of cases) {
    const err = refusal({ ...codex, ...extra });
    t.ok(err, `${name}: refused`);
    t.equal(err?.code, 'invalid_body', `${name}: invalid_body`);
    t.equal(err?.status, 400, `${name}: 400`);
    t.match(err?.message, message, `${name}: says what to do`);
  }
});

t.test('wrong types answer 400 without decoding a large input', async (t) => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['store as a string', { store: 'yes' }, /`store` must be a boolean/],
    ['background as a number', { background: 1 }, /`background` must be a boolean/],
    ['input as a number', { input: 42 }, /`input` must be a string or an array/],
    ['input as an object', { input: { role: 'user', content: 'x'.repeat(2000) } }, /`input` must be a string or an array/],
    ['input as null', { input: null }, /`input` must be a string or an array/],
  ];
  for (const [name, extra, message] of cases) t.match(refusal({ model: 'm', ...extra })?.message, message, name);
  t.equal(refusal({ model: 'm', input: 'x'.repeat(5000) }), undefined, 'a long string input passes');
  t.equal(refusal({ model: 'm', input: [] }), undefined, 'an empty item list passes (the router judges it)');
});

t.test('a body built in code (no scan) is judged the same way', async (t) => {
  const ctx = { id: 'unit', dialect: 'responses', route: 'responses', body: { model: 'm', input: [{ type: 'item_reference', id: 'x' }] }, removed: [] } as unknown as ReadCtx;
  t.throws(() => plugin.run(ctx), { code: 'invalid_body' });
  const ok = { id: 'unit', dialect: 'responses', route: 'responses', body: structuredClone(codex), removed: [] as string[] } as unknown as ReadCtx;
  plugin.run(ok);
  t.same(ok.removed, ['client_metadata']);
});
