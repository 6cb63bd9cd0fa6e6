// The messages-dialect sanitizer (spec "Request processing rules" 6, docs/http.md), row by row of
// the spec table on a Ctx-like object; then end to end through /v1/messages: what the simulated
// router received, the one log line per request naming the removals, and byte identity of a
// body that needs no change.

import t from 'tap';
import type { ReadCtx } from '../../lib/context.ts';
import { bodyChanged } from '../../lib/request-body.ts';
import { sanitize } from '../../plugins/sanitize.ts';
import { scannedBody } from '../helpers/body.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const plugin = sanitize();

function run(body: Record<string, any>): ReadCtx {
  const ctx = { id: 'unit', dialect: 'messages', route: 'messages', body: scannedBody(body), removed: [] as string[] } as unknown as ReadCtx;
  plugin.run(ctx);
  return ctx;
}

const clone = <T>(v: T): T => structuredClone(v);

/** The gateway's log lines, parsed (read from logText: array methods on `h.logs` see no items). */
function logLines(h: Harness): Array<Record<string, any>> {
  return h.logText().split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

t.test('runs on the messages route only', async (t) => {
  t.same([...plugin.routes], ['messages']);
});

t.test('thinking: dropped when adaptive, kept otherwise', async (t) => {
  const adaptive = run({ model: 'm', thinking: { type: 'adaptive' }, messages: [] });
  t.notOk('thinking' in adaptive.body!);
  t.same(adaptive.removed, ['thinking']);
  t.equal(bodyChanged(adaptive.body!), true);

  for (const thinking of [{ type: 'enabled', budget_tokens: 2048 }, { type: 'disabled' }]) {
    const ctx = run({ model: 'm', thinking: clone(thinking), messages: [] });
    t.same(ctx.body!.thinking, thinking, `${thinking.type} kept`);
    t.same(ctx.removed, []);
    t.equal(bodyChanged(ctx.body!), false);
  }
});

t.test('context_management and output_config: dropped', async (t) => {
  const ctx = run({
    model: 'm',
    context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
    output_config: { effort: 'high' },
    messages: [{ role: 'user', content: 'hi' }],
  });
  t.same(ctx.body, { model: 'm', messages: [{ role: 'user', content: 'hi' }] });
  t.same(ctx.removed.slice().sort(), ['context_management', 'output_config']);
  t.equal(bodyChanged(ctx.body!), true);
});

t.test('tools[].strict and tools[].defer_loading: dropped from every tool, nothing else', async (t) => {
  const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
  const ctx = run({
    model: 'm',
    tools: [
      { name: 'a', description: 'A', input_schema: schema, strict: true },
      { name: 'b', input_schema: schema, defer_loading: true, cache_control: { type: 'ephemeral' } },
      { name: 'c', input_schema: schema, strict: false, defer_loading: false },
      { name: 'd', input_schema: schema },
    ],
    messages: [],
  });
  t.same(ctx.body!.tools, [
    { name: 'a', description: 'A', input_schema: schema },
    { name: 'b', input_schema: schema, cache_control: { type: 'ephemeral' } },
    { name: 'c', input_schema: schema },
    { name: 'd', input_schema: schema },
  ]);
  t.same(ctx.removed.slice().sort(), ['tools[].defer_loading', 'tools[].strict'], 'each removal named once');
});

t.test('role: system entries become user turns (role and content only) and user turns merge in order', async (t) => {
  const ctx = run({
    model: 'm',
    messages: [
      { role: 'user', content: 'first' },
      { role: 'assistant', content: [{ type: 'text', text: 'answer' }] },
      { role: 'system', content: 'be brief', output_config: { effort: 'low' }, cache_control: { type: 'ephemeral' } },
      { role: 'user', content: [{ type: 'text', text: 'second', cache_control: { type: 'ephemeral' } }, { type: 'image', source: { type: 'url', url: 'https://x/y.png' } }] },
      { role: 'system', content: [{ type: 'text', text: 'rule two' }] },
      { role: 'assistant', content: 'ok' },
      { role: 'user', content: 'third' },
    ],
  });
  t.same(ctx.body!.messages, [
    { role: 'user', content: 'first' },
    { role: 'assistant', content: [{ type: 'text', text: 'answer' }] },
    {
      role: 'user',
      content: [
        { type: 'text', text: 'be brief' },
        { type: 'text', text: 'second', cache_control: { type: 'ephemeral' } },
        { type: 'image', source: { type: 'url', url: 'https://x/y.png' } },
        { type: 'text', text: 'rule two' },
      ],
    },
    { role: 'assistant', content: 'ok' },
    { role: 'user', content: 'third' },
  ]);
  t.ok(ctx.removed.length > 0, 'the conversion is named among the removals');
  t.equal(bodyChanged(ctx.body!), true);
});

t.test('a conversation ending on a system entry ends on a user turn', async (t) => {
  const alone = run({ model: 'm', messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'system', content: 'now summarise' }] });
  t.same(alone.body!.messages, [{ role: 'user', content: 'q' }, { role: 'assistant', content: 'a' }, { role: 'user', content: 'now summarise' }]);

  const merged = run({ model: 'm', messages: [{ role: 'user', content: 'q' }, { role: 'system', content: 'reminder', output_config: {} }] });
  t.same(merged.body!.messages, [{ role: 'user', content: [{ type: 'text', text: 'q' }, { type: 'text', text: 'reminder' }] }]);
  t.equal(merged.body!.messages.at(-1).role, 'user');
});

t.test('the top-level system array and every other field are untouched', async (t) => {
  const system = [
    { type: 'text', text: 'You are Claude Code.', cache_control: { type: 'ephemeral' } },
    { type: 'text', text: 'Project rules.', cache_control: { type: 'ephemeral', ttl: '1h' } },
  ];
  const rest = {
    model: 'claude-sonnet-4-5',
    max_tokens: 32000,
    stream: true,
    system,
    metadata: { user_id: 'u1' },
    temperature: 1,
    tool_choice: { type: 'auto' },
    unknown_future_field: { nested: [1, 2, 3] },
  };
  const ctx = run({ ...clone(rest), thinking: { type: 'adaptive' }, output_config: { effort: 'high' }, context_management: {}, messages: [{ role: 'user', content: 'hi' }] });
  t.same(ctx.body, { ...rest, messages: [{ role: 'user', content: 'hi' }] });
  t.same(Object.keys(ctx.body!), [...Object.keys(rest), 'messages'], 'key order kept');
});

t.test('a body with none of these fields is left alone', async (t) => {
  const body = {
    model: 'm',
    system: [{ type: 'text', text: 's', cache_control: { type: 'ephemeral' } }],
    thinking: { type: 'enabled', budget_tokens: 1024 },
    tools: [{ name: 'a', input_schema: { type: 'object' } }],
    messages: [{ role: 'user', content: 'a' }, { role: 'user', content: 'b' }, { role: 'assistant', content: 'c' }],
  };
  const ctx = run(clone(body));
  t.same(ctx.body, body, 'consecutive user turns without a system entry are not touched');
  t.same(ctx.removed, []);
  t.equal(bodyChanged(ctx.body!), false);
});

t.test('e2e: /v1/messages forwards the sanitized body and logs the removals once', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const system = [{ type: 'text', text: 'You are a helper.', cache_control: { type: 'ephemeral' } }];
  const tool = { name: 'get_weather', description: 'weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } };
  const body = {
    // An explicit catalog model with a small max_tokens: model-resolve changes nothing.
    model: 'anthropic/claude-sonnet-4.5',
    max_tokens: 100,
    system,
    thinking: { type: 'adaptive' },
    context_management: { edits: [] },
    output_config: { effort: 'medium' },
    tools: [{ ...tool, strict: true, defer_loading: true }, { ...tool, name: 'other', strict: false }],
    metadata: { user_id: 'end-user-7' },
    messages: [
      { role: 'user', content: 'hello' },
      { role: 'system', content: 'extra rule', output_config: { effort: 'low' } },
    ],
  };
  const res = await fetch(`${h.url}/v1/messages?beta=true`, {
    method: 'POST',
    headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'anthropic-beta': 'context-management-2025-06-27' },
    body: JSON.stringify(body),
  });
  t.equal(res.status, 200);
  await res.json();
  const id = res.headers.get('x-sluice-request-id');
  const sent = h.sim.received.filter((r) => r.path.startsWith('/api/v1/messages')).at(-1)!;
  t.equal(sent.path, '/api/v1/messages?beta=true');
  t.equal(sent.headers['anthropic-beta'], 'context-management-2025-06-27', 'headers pass unchanged');
  t.same(sent.json, {
    model: 'anthropic/claude-sonnet-4.5',
    max_tokens: 100,
    system,
    tools: [tool, { ...tool, name: 'other' }],
    metadata: { user_id: 'end-user-7' },
    messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }, { type: 'text', text: 'extra rule' }] }],
  });
  await h.rows(1);
  const lines = logLines(h).filter((l) => l.req === id && Array.isArray(l.removed));
  t.equal(lines.length, 1, 'one log line for the request');
  t.same(lines[0].removed.filter((r: string) => !r.startsWith('messages')).sort(), ['context_management', 'output_config', 'thinking', 'tools[].defer_loading', 'tools[].strict']);
  t.ok(lines[0].removed.some((r: string) => r.startsWith('messages')), 'the system-turn conversion is logged too');
  t.match(lines[0].prefix, /^sluice_dev_…/);

  // No sanitizer fields and nothing for model-resolve to change: the bytes go through as sent.
  const plain = `{"model":"anthropic/claude-sonnet-4.5",  "max_tokens":2000,"system":[{"type":"text","text":"S","cache_control":{"type":"ephemeral"}}],"thinking":{"type":"enabled","budget_tokens":1024},"messages":[{"role":"user","content":"hi"},{"role":"user","content":"again"}]}`;
  const res2 = await fetch(`${h.url}/v1/messages`, {
    method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' }, body: plain,
  });
  t.equal(res2.status, 200);
  await res2.json();
  t.equal(h.sim.received.filter((r) => r.path.startsWith('/api/v1/messages')).at(-1)!.body, plain);
  await h.rows(2);
  t.equal(logLines(h).filter((l) => l.req === res2.headers.get('x-sluice-request-id') && 'removed' in l).length, 0, 'nothing logged as removed');
});
