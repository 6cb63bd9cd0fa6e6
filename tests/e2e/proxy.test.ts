// The streaming proxy core seen from a plain HTTP client, in both dialects: client disconnects
// (upstream aborted, row kept), an unreachable, hanging, silent or dropping router (502/504 before
// the response, one error event of the dialect after it), the response headers sluice adds, a large
// stream passing intact, token counts in the row, and an unchanged body reaching the router byte
// for byte.

import { once } from 'node:events';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import t, { type Test } from 'tap';
import type { SimRequest, SimulatedRouter } from '../../lib/sim/index.ts';
import { startHarness, type Harness, type HarnessOptions } from '../helpers/gateway.ts';
import { sse } from '../helpers/sse.ts';
import { replay } from '../helpers/upstream.ts';

type Dialect = 'chat' | 'messages';
const DIALECTS: Dialect[] = ['chat', 'messages'];
const PATH: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages' };
const UPSTREAM_PATH: Record<Dialect, string> = { chat: '/api/v1/chat/completions', messages: '/api/v1/messages' };

async function setup(t: Test, opts: HarnessOptions = {}) {
  const h = await startHarness(t, opts);
  const key = await h.key('dev');
  return { h, key };
}

function body(dialect: Dialect, stream: boolean, extra: Record<string, unknown> = {}): Record<string, unknown> {
  const messages = [{ role: 'user', content: 'hi' }];
  return dialect === 'chat' ? { model: 'sluice/fast', stream, messages, ...extra } : { model: 'sluice/fast', max_tokens: 100, stream, messages, ...extra };
}

function post(h: Harness, key: string, dialect: Dialect, payload: Record<string, unknown> | string, sim?: string, signal?: AbortSignal): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  if (sim) headers['x-sim'] = sim;
  return fetch(h.url + PATH[dialect], { method: 'POST', headers, body: typeof payload === 'string' ? payload : JSON.stringify(payload), signal });
}

/** Resolves with the next sim request matching `pred` whose exchange has closed. */
function closedWhere(sim: SimulatedRouter, pred: (r: SimRequest) => boolean): Promise<SimRequest> {
  return new Promise((resolve) => {
    const on = (r: SimRequest): void => {
      if (!pred(r)) return;
      sim.events.off('closed', on);
      resolve(r);
    };
    sim.events.on('closed', on);
  });
}

const isInference = (r: SimRequest): boolean => r.path === UPSTREAM_PATH.chat || r.path === UPSTREAM_PATH.messages;

/** The error body of docs/http.md for an upstream failure sluice answers itself. */
function contractError(dialect: Dialect, code: 'upstream_unreachable' | 'upstream_timeout', message: string) {
  return dialect === 'messages'
    ? { type: 'error', error: { type: 'api_error', message } }
    : { error: { message, type: 'api_error', param: null, code } };
}

/** The events of a stream that failed after it began: the router's own, then exactly one error event of the dialect. */
function checkStreamError(t: Test, dialect: Dialect, events: EventSourceMessage[], code: string): void {
  if (dialect === 'chat') {
    const data = events.map((e) => e.data).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
    const errors = data.filter((d) => 'error' in d);
    t.equal(errors.length, 1, 'exactly one error event');
    t.match(errors[0], { error: { code, type: 'api_error', message: String } });
    t.equal(data.at(-1), errors[0], 'the error is the last event before [DONE]');
    t.equal(data.filter((d) => d.choices?.[0]?.delta?.content).length, 2, 'two pieces came before it');
  } else {
    const errors = events.filter((e) => e.event === 'error');
    t.equal(errors.length, 1, 'exactly one error event');
    t.equal(events.at(-1), errors[0], 'the error event ends the stream');
    t.match(JSON.parse(errors[0]!.data), { type: 'error', error: { type: 'api_error', message: String } });
    t.equal(events.filter((e) => e.event === 'content_block_delta').length, 2, 'two pieces came before it');
  }
}

for (const dialect of DIALECTS) {
  t.test(`${dialect}: a client that disconnects mid-stream aborts the upstream and leaves a row`, async (t) => {
    const { h, key } = await setup(t);
    const closed = closedWhere(h.sim, isInference);
    const ac = new AbortController();
    const res = await post(h, key, dialect, body(dialect, true), 'chunks=50;chunk-delay-ms=20', ac.signal);
    t.equal(res.status, 200);
    // Read until the first event, then leave.
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let first: EventSourceMessage | undefined;
    const parser = createParser({ onEvent: (ev) => (first ??= ev) });
    while (first === undefined) {
      const { value, done } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
    t.ok(first, 'an event arrived');
    ac.abort();
    await reader.read().catch(() => {});
    const upstream = await closed;
    t.equal(upstream.aborted, true, 'sluice closed the upstream request');
    const [row] = await h.rows(1);
    t.match(row, { endpoint: dialect, outcome: 'client_disconnect', stream: true, status: 200 });
    t.ok(row!.output_tokens < 50, 'not the whole answer');
    if (dialect === 'messages') {
      // message_start carries the input tokens and the first output token: what was seen so far.
      const usage = JSON.parse(first!.data).message.usage;
      t.match(row, { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens, generation_id: JSON.parse(first!.data).message.id });
      t.ok(usage.input_tokens > 0);
    } else {
      // Chat reports usage only at the end: nothing was seen but the generation.
      t.match(row, { input_tokens: 0, output_tokens: 0, generation_id: JSON.parse(first!.data).id });
    }
    // The aborted exchange leaves nothing behind that spoils the next request.
    const next = await post(h, key, dialect, body(dialect, false));
    t.equal(next.status, 200);
    await next.arrayBuffer();
    const rows = await h.rows(2);
    t.match(rows.find((r) => r.id !== row!.id), { outcome: 'ok' });
  });
}

t.test('a client that leaves before the response starts aborts the upstream and leaves a 499 row', async (t) => {
  const { h, key } = await setup(t);
  const ac = new AbortController();
  const arrived = once(h.sim.events, 'request');
  const closed = closedWhere(h.sim, isInference);
  const pending = post(h, key, 'chat', body('chat', false), 'hang', ac.signal).then(() => 'answered', () => 'aborted');
  await arrived; // the request is upstream and the router says nothing
  ac.abort();
  t.equal(await pending, 'aborted');
  t.equal((await closed).aborted, true, 'sluice closed the upstream request');
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'client_disconnect', status: 499, ttfb_ms: null, input_tokens: 0, output_tokens: 0 });
  t.equal(h.rowCount(), 1);
});

t.test('the upstream timeout bounds silence, not the length of a stream', async (t) => {
  const { h, key } = await setup(t, { upstreamTimeoutMs: 300 });
  // Ten pieces 60 ms apart: longer than the timeout in all, never silent that long.
  const res = await post(h, key, 'chat', body('chat', true), 'chunks=10;chunk-delay-ms=60');
  const data = sse(await res.text()).map((e) => e.data);
  t.equal(data.at(-1), '[DONE]');
  t.notOk(data.some((d) => d !== '[DONE]' && 'error' in JSON.parse(d)), 'no error event');
  const [row] = await h.rows(1);
  t.match(row, { outcome: 'ok', output_tokens: 10 });
  t.ok(row!.duration_ms > 300, `the stream lasted ${row!.duration_ms} ms`);
});

t.test('concurrent streams in both dialects never cross', async (t) => {
  const { h, key } = await setup(t);
  const n = 8;
  const answers = await Promise.all(Array.from({ length: n }, async (_, i) => {
    const dialect = DIALECTS[i % 2]!;
    const res = await post(h, key, dialect, body(dialect, true, { messages: [{ role: 'user', content: `[[reply:answer number ${i} here]]` }] }), 'chunk-delay-ms=5');
    const events = sse(await res.text());
    let text = '';
    for (const ev of events) {
      if (ev.data === '[DONE]') continue;
      const d = JSON.parse(ev.data);
      text += dialect === 'chat' ? (d.choices?.[0]?.delta?.content ?? '') : (d.delta?.text ?? '');
    }
    return { text, id: res.headers.get('x-generation-id') };
  }));
  t.strictSame(answers.map((a) => a.text), Array.from({ length: n }, (_, i) => `answer number ${i} here`));
  const rows = await h.rows(n);
  t.strictSame(rows.map((r) => r.generation_id).sort(), answers.map((a) => a.id).sort(), 'one row per stream, each with its own generation');
  for (const row of rows) t.match(row, { outcome: 'ok', output_tokens: 4 });
});

t.test('router unreachable: 502 in each dialect, the documented body, a row', async (t) => {
  const { h, key } = await setup(t);
  await h.sim.close();
  for (const dialect of DIALECTS) {
    for (const stream of [false, true]) {
      const res = await post(h, key, dialect, body(dialect, stream));
      t.equal(res.status, 502, `${dialect} stream=${stream}`);
      t.match(res.headers.get('content-type'), /^application\/json/);
      t.strictSame(await res.json(), contractError(dialect, 'upstream_unreachable', 'The upstream router could not be reached.'));
    }
  }
  const rows = await h.rows(4);
  t.equal(rows.length, 4);
  for (const row of rows) t.match(row, { outcome: 'upstream_error', status: 502, input_tokens: 0, output_tokens: 0, cost_usd: 0 });
});

t.test('router hangs: 504 in each dialect after the upstream timeout', async (t) => {
  const { h, key } = await setup(t, { upstreamTimeoutMs: 300 });
  await Promise.all(DIALECTS.map(async (dialect) => {
    const closed = closedWhere(h.sim, (r) => r.path === UPSTREAM_PATH[dialect]);
    const res = await post(h, key, dialect, body(dialect, true), 'hang');
    t.equal(res.status, 504, dialect);
    t.strictSame(await res.json(), contractError(dialect, 'upstream_timeout', 'The upstream router did not answer in time.'));
    t.equal((await closed).aborted, true, 'the hanging upstream request was given up');
  }));
  const rows = await h.rows(2);
  for (const row of rows) t.match(row, { outcome: 'upstream_error', status: 504 });
});

for (const dialect of DIALECTS) {
  t.test(`${dialect}: a router silent mid-stream ends the stream with one timeout error event`, async (t) => {
    const { h, key } = await setup(t, { upstreamTimeoutMs: 300 });
    const closed = closedWhere(h.sim, isInference);
    const res = await post(h, key, dialect, body(dialect, true), 'silent-after=2');
    t.equal(res.status, 200);
    const events = sse(await res.text());
    checkStreamError(t, dialect, events, 'upstream_timeout');
    if (dialect === 'chat') t.equal(events.at(-1)!.data, '[DONE]');
    t.equal((await closed).aborted, true, 'the silent upstream request was given up');
    const [row] = await h.rows(1);
    t.match(row, { outcome: 'upstream_error', stream: true });
  });

  t.test(`${dialect}: a router that drops the connection mid-stream ends it with one error event`, async (t) => {
    const { h, key } = await setup(t);
    const res = await post(h, key, dialect, body(dialect, true), 'drop-after=2');
    t.equal(res.status, 200);
    const events = sse(await res.text());
    checkStreamError(t, dialect, events, 'upstream_stream_failed');
    const [row] = await h.rows(1);
    t.match(row, { outcome: 'upstream_error', stream: true });
  });

  t.test(`${dialect}: sluice adds its headers and keeps the router's`, async (t) => {
    const { h, key } = await setup(t);
    for (const stream of [false, true]) {
      const res = await post(h, key, dialect, body(dialect, stream));
      t.equal(res.status, 200);
      const text = await res.text();
      const id = stream ? (dialect === 'chat' ? JSON.parse(sse(text)[0]!.data).id : JSON.parse(sse(text)[0]!.data).message.id) : JSON.parse(text).id;
      t.equal(res.headers.get('x-generation-id'), id, 'the router header passes');
      t.match(res.headers.get('content-type'), stream ? /^text\/event-stream/ : /^application\/json/);
      t.equal(res.headers.get('x-sluice-tier'), 'fast');
      t.equal(res.headers.get('x-sluice-model'), 'google/gemini-2.5-flash');
      t.equal(res.headers.get('x-sluice-degradation'), 'none');
      const timing = /^sluice;dur=(\d+(?:\.\d+)?)$/.exec(res.headers.get('server-timing') ?? '');
      t.ok(timing, `server-timing ${res.headers.get('server-timing')}`);
      t.ok(Number(timing?.[1]) >= 0);
    }
    await h.rows(2);
  });

  t.test(`${dialect}: a 300 kB stream passes intact`, async (t) => {
    const { h, key } = await setup(t);
    const res = await post(h, key, dialect, body(dialect, true), 'bytes=300000;chunks=40');
    t.equal(res.status, 200);
    const got = Buffer.from(await res.arrayBuffer());
    const direct = await replay(h.sim, h.sim.received.find(isInference)!);
    t.equal(got.length, direct.bytes.length, 'the same byte count as the router sends');
    const events = sse(got.toString('utf8'));
    let text = '';
    for (const ev of events) {
      if (ev.data === '[DONE]') continue;
      const d = JSON.parse(ev.data); // every event parses
      text += dialect === 'chat' ? (d.choices?.[0]?.delta?.content ?? '') : (d.delta?.text ?? '');
    }
    t.equal(text.length, 300_000);
    t.equal(text, sse(direct.bytes.toString('utf8')).map((ev) => {
      if (ev.data === '[DONE]') return '';
      const d = JSON.parse(ev.data);
      return dialect === 'chat' ? (d.choices?.[0]?.delta?.content ?? '') : (d.delta?.text ?? '');
    }).join(''), 'the same text as the router sends');
    const [row] = await h.rows(1);
    t.match(row, { outcome: 'ok', output_tokens: 40 });
  });

  t.test(`${dialect}: a 20-chunk stream's row has the router's token counts`, async (t) => {
    const { h, key } = await setup(t);
    const res = await post(h, key, dialect, body(dialect, true), 'chunks=20');
    const events = sse(await res.text());
    let usage: { input: number; output: number; cost: number };
    if (dialect === 'chat') {
      const u = events.map((e) => e.data).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d)).find((d) => d.usage)!.usage;
      usage = { input: u.prompt_tokens, output: u.completion_tokens, cost: u.cost };
    } else {
      const u = JSON.parse(events.find((e) => e.event === 'message_delta')!.data).usage;
      usage = { input: u.input_tokens, output: u.output_tokens, cost: u.cost };
    }
    t.equal(usage.output, 20);
    const [row] = await h.rows(1);
    t.match(row, { outcome: 'ok', input_tokens: usage.input, output_tokens: usage.output, cost_usd: usage.cost, cost_source: 'upstream' });
  });

  t.test(`${dialect}: a body no plugin changed reaches the router byte for byte`, async (t) => {
    const { h, key } = await setup(t);
    // An explicit model without a tier or a catalog cap, asking for less than the default tier's
    // cap, no sanitizer field: nothing to rewrite.
    const sent = dialect === 'chat'
      ? '{ "model" : "meta-llama/llama-3.3-70b-instruct",\n  "messages": [ {"role":"user", "content":"h\\u00e9llo, wörld"} ],\t"temperature": 0.50, "max_tokens" : 100 }\n'
      : '{"model":"meta-llama/llama-3.3-70b-instruct" , "max_tokens":100,\n "messages":[{"role":"user","content":[{"type":"text","text":"h\\u00e9llo, wörld"}]}]  }';
    const received = once(h.sim.events, 'request');
    const res = await post(h, key, dialect, sent);
    t.equal(res.status, 200);
    await res.arrayBuffer();
    const [upstream] = (await received) as [SimRequest];
    t.equal(upstream.path, UPSTREAM_PATH[dialect]);
    t.equal(upstream.body, sent, 'the exact bytes the client sent');
    t.equal(upstream.headers['content-length'], String(Buffer.byteLength(sent)));
    const [row] = await h.rows(1);
    t.match(row, { tier: null, model: 'meta-llama/llama-3.3-70b-instruct', outcome: 'ok', provider: 'DeepInfra' });
  });
}
