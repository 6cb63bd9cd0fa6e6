// AutoRouter (lib/auto.ts, docs/http.md) against a tiny local decision server: the decision
// request's shape, the lenient reading of the answer, the default tier on an error status, a
// reply past decision_timeout_ms, garbage or no ladder tier named, the decision kept per
// session and profile, and the decision's own row. Also excerpt() and pickTier().

import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { AutoRouter, excerpt, pickTier } from '../../lib/auto.ts';
import type { Catalog } from '../../lib/catalog.ts';
import type { AutoConfig } from '../../lib/config.ts';
import type { ReadCtx } from '../../lib/context.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';
import type { RequestRow } from '../../lib/store/store.ts';

t.test('pickTier: the first ladder tier named, case-insensitive, as a word', async (t) => {
  const ladder = ['fast', 'agent', 'reasoning'];
  t.equal(pickTier('reasoning', ladder), 'reasoning');
  t.equal(pickTier('Reasoning, definitely', ladder), 'reasoning');
  t.equal(pickTier('  AGENT\n', ladder), 'agent');
  t.equal(pickTier('Tier: "fast".', ladder), 'fast');
  t.equal(pickTier('reasoning rather than fast', ladder), 'reasoning', 'the first one named wins');
  t.equal(pickTier('fast, or maybe reasoning', ladder), 'fast');
  t.equal(pickTier('breakfast agents', ladder), undefined, 'not inside other words');
  t.equal(pickTier('I cannot decide', ladder), undefined);
  t.equal(pickTier('', ladder), undefined);
  t.equal(pickTier('deep-think please', ['fast', 'deep-think']), 'deep-think', 'names with a dash');
});

t.test('excerpt: the last user turn with text, cut to a few thousand characters', async (t) => {
  t.equal(excerpt({ messages: [{ role: 'user', content: 'first' }, { role: 'assistant', content: 'x' }, { role: 'user', content: 'second' }] }), 'second');
  t.equal(excerpt({ messages: [{ role: 'user', content: [{ type: 'text', text: 'a' }, { type: 'image', source: {} }, { type: 'text', text: 'b' }] }] }), 'a\nb');
  t.equal(
    excerpt({ messages: [{ role: 'user', content: 'the task' }, { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'x', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'out' }] }] }),
    'the task', 'a user turn of tool results only is skipped',
  );
  t.equal(excerpt({}), '');
  const long = excerpt({ messages: [{ role: 'user', content: 'y'.repeat(10_000) }] });
  t.ok(long.length < 10_000 && long.length >= 1000, `cut (${long.length} characters)`);
  t.ok(long.startsWith('yyyy'));
});

t.test('excerpt: a Responses `input`, as a string or as items (what Codex sends)', async (t) => {
  t.equal(excerpt({ input: 'plain question' }), 'plain question');
  const codex = {
    input: [
      { type: 'message', role: 'developer', content: [{ type: 'input_text', text: 'You are a coding agent…' }] },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: '<environment_context>…</environment_context>' }] },
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'fix the failing test' }] },
      { type: 'function_call', call_id: 'c1', name: 'exec_command', arguments: '{}' },
      { type: 'function_call_output', call_id: 'c1', output: 'FAIL' },
    ],
  };
  t.equal(excerpt(codex), 'fix the failing test', 'the last user message, past tool calls and their outputs');
  t.equal(excerpt({ input: [{ role: 'user', content: 'short form' }] }), 'short form', 'an easy input message without type');
  t.equal(excerpt({ input: 42 }), '', 'a wrong type reads as nothing');
  t.equal(excerpt({ input: 'y'.repeat(10_000) }).length, excerpt({ messages: [{ role: 'user', content: 'y'.repeat(10_000) }] }).length, 'cut the same way');
  t.equal(excerpt({ messages: [{ role: 'user', content: 'chat wins' }], input: 'ignored' }), 'chat wins', 'a chat body is read as chat');
});

// ---------------------------------------------------------------------------------------------
// AutoRouter against a local decision server

type Mode = 'reply' | 'status' | 'hang' | 'garbage';
interface Seen { path: string; headers: IncomingHttpHeaders; json: any }

async function decisionServer(t: Test) {
  const s = { mode: 'reply' as Mode, reply: 'fast', cost: 0.00002 as number | null, seen: [] as Seen[] };
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      s.seen.push({ path: req.url ?? '', headers: req.headers, json: JSON.parse(body) });
      if (s.mode === 'hang') return; // never answers
      if (s.mode === 'status') return void res.writeHead(500, { 'content-type': 'application/json' }).end('{"error":{"message":"Internal Server Error","code":500}}');
      if (s.mode === 'garbage') return void res.writeHead(200, { 'content-type': 'application/json' }).end('not json at all {');
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
        id: 'gen-decision-1', provider: 'Google', model: 'google/gemini-2.5-flash-lite', object: 'chat.completion',
        choices: [{ index: 0, message: { role: 'assistant', content: s.reply }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 120, completion_tokens: 3, total_tokens: 123, ...(s.cost === null ? {} : { cost: s.cost }) },
      }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    server.closeAllConnections();
    return new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return Object.assign(s, { url: new URL(`http://127.0.0.1:${(server.address() as AddressInfo).port}`) });
}

const AUTO: AutoConfig = { decision_model: 'google/gemini-2.5-flash-lite', ladder: ['fast', 'agent', 'reasoning'], session_ttl_minutes: 60, decision_timeout_ms: 5000 };
const UPSTREAM = 'sk-or-v1-unit-upstream-key';

function setup(t: Test, srvUrl: URL, auto: AutoConfig = AUTO) {
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const ttls: number[] = [];
  const setText = counters.setText.bind(counters);
  counters.setText = (key, value, ttlS) => {
    ttls.push(ttlS);
    return setText(key, value, ttlS);
  };
  const rows: RequestRow[] = [];
  const lines: string[] = [];
  const log = createLogger('debug', new Writable({ write(c, _e, cb) { lines.push(String(c)); cb(); } }));
  const catalog = { prices: () => ({ prompt: 0.0000001, completion: 0.0000004, cacheRead: 0.00000001, cacheWrite: 0.0000001 }) } as unknown as Catalog;
  const router = new AutoRouter({ auto, counters, catalog, log, record: (r) => rows.push(r), now: () => Date.parse('2025-06-01T12:00:00Z') });
  const ctx = (o: { profile?: string; defaultTier?: string; session?: string | null; text?: string } = {}) => ({
    id: 'req-1',
    profile: { name: o.profile ?? 'dev', default_tier: o.defaultTier ?? 'agent', router: 'r' },
    router: { name: 'r', url: srvUrl },
    upstreamKey: UPSTREAM,
    key: { row: { prefix: 'sluice_dev_…abcd' } },
    body: { model: 'sluice/auto', messages: [{ role: 'user', content: o.text ?? 'Prove the Riemann hypothesis.' }] },
    session: o.session ?? null,
    endUser: 'user-7',
    run: null,
    degradation: 'none',
  }) as unknown as ReadCtx;
  return { router, rows, ttls, lines, ctx };
}

t.test('a decision: the request sent, the answer read, the row recorded', async (t) => {
  const srv = await decisionServer(t);
  const { router, rows, ctx } = setup(t, srv.url);
  srv.reply = 'Reasoning, definitely.';
  t.equal(await router.decide(ctx({ text: 'Design a distributed consensus protocol.' })), 'reasoning');
  t.equal(srv.seen.length, 1);
  const req = srv.seen[0];
  t.equal(req.path, '/api/v1/chat/completions');
  t.equal(req.headers.authorization, `Bearer ${UPSTREAM}`, "the profile's upstream key");
  t.equal(req.json.model, 'google/gemini-2.5-flash-lite');
  const prompt = JSON.stringify(req.json.messages);
  for (const tier of AUTO.ladder) t.ok(prompt.includes(tier), `the prompt names ${tier}`);
  t.ok(prompt.includes('Design a distributed consensus protocol.'), 'the prompt carries the excerpt');
  t.notOk(req.json.stream, 'not streamed');

  t.equal(rows.length, 1);
  t.match(rows[0], {
    endpoint: 'chat', tier: 'auto-decision', profile: 'dev', key_prefix: 'sluice_dev_…abcd', end_user: 'user-7',
    requested_model: 'google/gemini-2.5-flash-lite', model: 'google/gemini-2.5-flash-lite', status: 200, outcome: 'ok',
    input_tokens: 120, output_tokens: 3, cost_usd: 0.00002, cost_source: 'upstream', provider: 'Google',
    generation_id: 'gen-decision-1', degradation: 'none', stream: false, ts: '2025-06-01T12:00:00.000Z',
  });

  srv.cost = null;
  srv.reply = 'agent';
  t.equal(await router.decide(ctx()), 'agent');
  t.match(rows[1], { tier: 'auto-decision', cost_source: 'estimate' });
  t.ok(Math.abs(rows[1].cost_usd - (120 * 0.0000001 + 3 * 0.0000004)) < 1e-12, 'estimated from the catalog prices');
});

t.test("failures and non-answers give the profile's default tier", async (t) => {
  const srv = await decisionServer(t);
  const { router, rows, ctx } = setup(t, srv.url);

  srv.reply = 'I would rather not say.';
  t.equal(await router.decide(ctx()), 'agent', 'no ladder tier named');
  t.equal(await router.decide(ctx({ profile: 'assistant', defaultTier: 'fast' })), 'fast', 'another default');

  srv.mode = 'status';
  const before = rows.length;
  t.equal(await router.decide(ctx()), 'agent', 'an error status');
  t.equal(rows.length, before + 1, 'the failed decision leaves a row');
  t.match(rows.at(-1), { tier: 'auto-decision', status: 500, outcome: 'upstream_error' });

  srv.mode = 'garbage';
  t.equal(await router.decide(ctx()), 'agent', 'an answer that is not JSON');

  srv.mode = 'hang';
  const quick = setup(t, srv.url, { ...AUTO, decision_timeout_ms: 300 });
  // A 250 ms timer set first must fire before the 300 ms decision timeout (timers fire in the
  // order they end, however late a busy machine runs them); a stopwatch would measure the load.
  let marked = false;
  const mark = setTimeout(() => (marked = true), 250);
  const started = performance.now();
  t.equal(await quick.router.decide(quick.ctx({ defaultTier: 'reasoning' })), 'reasoning', 'no answer within decision_timeout_ms');
  const waited = performance.now() - started;
  clearTimeout(mark);
  t.ok(marked, 'not before the timeout');
  t.ok(waited < 4000, `gave up after about decision_timeout_ms (${Math.round(waited)} ms)`);
  t.equal(srv.seen.length, 5, 'one decision request each');
});

t.test('the decision is kept per session and profile', async (t) => {
  const srv = await decisionServer(t);
  const { router, ttls, ctx } = setup(t, srv.url);
  srv.reply = 'reasoning';
  t.equal(await router.decide(ctx({ session: 's-1' })), 'reasoning');
  t.same(ttls, [AUTO.session_ttl_minutes * 60], 'kept for session_ttl_minutes');
  srv.reply = 'fast';
  t.equal(await router.decide(ctx({ session: 's-1', text: 'something trivial' })), 'reasoning', 'same session: the kept decision');
  t.equal(srv.seen.length, 1, 'no second decision request');

  t.equal(await router.decide(ctx({ session: 's-2' })), 'fast', 'another session decides anew');
  t.equal(await router.decide(ctx({ session: 's-1', profile: 'assistant' })), 'fast', 'the same session id under another profile decides anew');
  t.equal(srv.seen.length, 3);

  t.equal(await router.decide(ctx()), 'fast');
  t.equal(await router.decide(ctx()), 'fast');
  t.equal(srv.seen.length, 5, 'without a session every request decides');
});

t.test('a failed decision falls back to the default tier for the session, even off the ladder', async (t) => {
  const srv = await decisionServer(t);
  const { router, ctx } = setup(t, srv.url, { ...AUTO, ladder: ['fast', 'reasoning'] });
  srv.mode = 'garbage';
  t.equal(await router.decide(ctx({ session: 's-9', defaultTier: 'agent' })), 'agent');
  srv.mode = 'reply';
  srv.reply = 'reasoning';
  t.equal(await router.decide(ctx({ session: 's-9', defaultTier: 'agent' })), 'agent', 'kept for the session');
  t.equal(srv.seen.length, 1, 'no second decision request');
});
