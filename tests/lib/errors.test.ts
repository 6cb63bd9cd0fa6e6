// The error catalogue (docs/http.md): every entry rendered through a real HTTP response in all three
// dialects has the contract's status, headers and body (parsed and compared field by field; the
// Responses API uses the chat envelope), a custom message replaces only the text, and
// streamErrorEvent is parseable SSE in each dialect's shape (Responses: `error`, then
// `response.failed`, numbered on from the stream, then [DONE]).

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import t from 'tap';
import { CATALOGUE, errorBody, GatewayError, renderError, streamErrorEvent, type Dialect, type ErrorCode } from '../../lib/errors.ts';

// docs/http.md written out: status, messages type, chat type, headers.
const CONTRACT: Partial<Record<ErrorCode, { status: number; messagesType: string; chatType: string; headers: Record<string, string> }>> = {
  ip_blocked: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', headers: { 'retry-after': '600' } },
  invalid_api_key: { status: 401, messagesType: 'authentication_error', chatType: 'invalid_api_key', headers: { 'x-should-retry': 'false' } },
  ip_not_allowed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', headers: { 'x-should-retry': 'false' } },
  profile_removed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', headers: { 'x-should-retry': 'false' } },
  upstream_key_missing: { status: 503, messagesType: 'api_error', chatType: 'api_error', headers: {} },
  rate_limit_exceeded: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', headers: { 'retry-after': '5' } },
  budget_exhausted: { status: 429, messagesType: 'rate_limit_error', chatType: 'insufficient_quota', headers: { 'x-should-retry': 'false' } },
  invalid_body: { status: 400, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', headers: {} },
  request_too_large: { status: 413, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', headers: {} },
  upstream_unreachable: { status: 502, messagesType: 'api_error', chatType: 'api_error', headers: {} },
  upstream_timeout: { status: 504, messagesType: 'api_error', chatType: 'api_error', headers: {} },
};
// Anthropic's and OpenAI's own error types: entries beyond the contract's table use only these.
const MESSAGES_TYPES = ['invalid_request_error', 'authentication_error', 'permission_error', 'not_found_error', 'request_too_large', 'rate_limit_error', 'api_error', 'overloaded_error', 'timeout_error'];
const CODES = Object.keys(CATALOGUE) as ErrorCode[];
const HEADER_NAMES = ['retry-after', 'x-should-retry'];

interface Rendered { status: number; headers: Headers; json: any; raw: string }

t.test('every catalogue entry renders in both dialects', async (t) => {
  let next: { dialect: Dialect; err: GatewayError } | undefined;
  const server = createServer((_req, res) => renderError(res, next!.dialect, next!.err));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  const render = async (dialect: Dialect, err: GatewayError): Promise<Rendered> => {
    next = { dialect, err };
    const res = await fetch(url);
    const raw = await res.text();
    return { status: res.status, headers: res.headers, json: JSON.parse(raw), raw };
  };

  t.equal(Object.keys(CONTRACT).filter((c) => !(c in CATALOGUE)).length, 0, 'every contract condition is in the catalogue');
  for (const code of CODES) {
    const spec: { status: number; messagesType: string; chatType: string; message: string; headers?: Record<string, string> } = CATALOGUE[code];
    const want = CONTRACT[code];
    if (want) {
      t.equal(spec.status, want.status, `${code}: status`);
    } else {
      t.ok(MESSAGES_TYPES.includes(spec.messagesType), `${code}: a known messages type`);
      t.ok(spec.status >= 400 && spec.status < 600, `${code}: an error status`);
    }
    for (const dialect of ['messages', 'chat', 'responses'] as const) {
      const r = await render(dialect, new GatewayError(code));
      t.equal(r.status, spec.status, `${code} ${dialect}: status`);
      t.equal(r.headers.get('content-type'), 'application/json', `${code} ${dialect}: content-type`);
      t.equal(Number(r.headers.get('content-length')), Buffer.byteLength(r.raw), `${code} ${dialect}: content-length`);
      const headers = Object.fromEntries(HEADER_NAMES.filter((h) => r.headers.has(h)).map((h) => [h, r.headers.get(h)]));
      t.strictSame(headers, want?.headers ?? spec.headers ?? {}, `${code} ${dialect}: headers`);
      if (dialect === 'messages') {
        t.strictSame(r.json, { type: 'error', error: { type: want?.messagesType ?? spec.messagesType, message: spec.message } }, `${code} messages body`);
      } else {
        t.strictSame(r.json, { error: { message: spec.message, type: want?.chatType ?? spec.chatType, param: null, code } }, `${code} ${dialect} body`);
      }
      t.ok(spec.message.length > 0 && !/undefined|null/.test(spec.message), `${code}: a real message`);
    }
  }

  // A custom message (bad bodies) replaces only the text.
  const custom = await render('chat', new GatewayError('invalid_body', { message: 'model is required' }));
  t.strictSame(custom.json, { error: { message: 'model is required', type: 'invalid_request_error', param: null, code: 'invalid_body' } });
  const customM = await render('messages', new GatewayError('invalid_body', { message: 'body is not JSON' }));
  t.strictSame(customM.json, { type: 'error', error: { type: 'invalid_request_error', message: 'body is not JSON' } });
  t.equal(customM.status, 400);

  const customR = await render('responses', new GatewayError('invalid_body', { message: '`store: true` is not supported' }));
  t.strictSame(customR.json, { error: { message: '`store: true` is not supported', type: 'invalid_request_error', param: null, code: 'invalid_body' } });
  t.equal(customR.status, 400);

  // The budget block in the Responses dialect: Codex stops at once on type insufficient_quota (it waits out retry-after otherwise).
  const budgetR = await render('responses', new GatewayError('budget_exhausted', { headers: { 'retry-after': '3600' } }));
  t.strictSame([budgetR.status, budgetR.headers.get('retry-after'), budgetR.headers.get('x-should-retry'), budgetR.json.error.type], [429, '3600', 'false', 'insufficient_quota']);

  // The budget's retry-after is computed per request and joins the catalogue's headers.
  const budget = await render('chat', new GatewayError('budget_exhausted', { headers: { 'retry-after': '7200' } }));
  t.equal(budget.status, 429);
  t.equal(budget.headers.get('retry-after'), '7200');
  t.equal(budget.headers.get('x-should-retry'), 'false');
  t.strictSame(budget.json.error, { message: CATALOGUE.budget_exhausted.message, type: 'insufficient_quota', param: null, code: 'budget_exhausted' });
  t.strictSame(new GatewayError('budget_exhausted').headers, { 'x-should-retry': 'false' }, 'the catalogue headers are not changed by one request');

  // All bad-key conditions share one body, word for word.
  const a = await render('messages', new GatewayError('invalid_api_key'));
  const b = await render('messages', new GatewayError('invalid_api_key'));
  t.equal(a.raw, b.raw);
});

t.test('a response already started is left alone', async (t) => {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.write('partial');
    renderError(res, 'chat', new GatewayError('internal'));
    res.end(' end');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const res = await fetch(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`);
  t.equal(res.status, 200);
  t.equal(await res.text(), 'partial end');
});

t.test('GatewayError and errorBody', async (t) => {
  const e = new GatewayError('ip_not_allowed');
  t.ok(e instanceof Error);
  t.equal(e.code, 'ip_not_allowed');
  t.equal(e.status, 403);
  t.equal(e.message, CATALOGUE.ip_not_allowed.message);
  t.equal(e.custom, false);
  t.equal(new GatewayError('invalid_body', { message: 'x' }).custom, true);
  t.strictSame(JSON.parse(errorBody('messages', 'upstream_timeout', 'late')), { type: 'error', error: { type: 'api_error', message: 'late' } });
});

function sseEvents(text: string): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (ev) => events.push(ev) });
  parser.feed(text);
  return events;
}

t.test('streamErrorEvent', async (t) => {
  for (const code of CODES) {
    const spec = CATALOGUE[code];
    const m = sseEvents(streamErrorEvent('messages', code));
    t.equal(m.length, 1, `${code} messages: one event`);
    t.equal(m[0]!.event, 'error', `${code} messages: event: error`);
    t.strictSame(JSON.parse(m[0]!.data), { type: 'error', error: { type: spec.messagesType, message: spec.message } }, `${code} messages data`);
    const text = streamErrorEvent('messages', code);
    t.ok(text.endsWith('\n\n'), `${code} messages: the event is terminated`);

    const c = sseEvents(streamErrorEvent('chat', code));
    t.ok(c.length === 1 || (c.length === 2 && c[1]!.data === '[DONE]'), `${code} chat: one error event, then at most [DONE]`);
    t.equal(c[0]!.event, undefined, `${code} chat: a plain data event`);
    t.strictSame(JSON.parse(c[0]!.data), { error: { message: spec.message, type: spec.chatType, code } }, `${code} chat data`);

    const rText = streamErrorEvent('responses', code, { sequence: 7, responseId: 'gen-abc' });
    const r = sseEvents(rText);
    t.strictSame(r.map((e) => e.event ?? null), ['error', 'response.failed', null], `${code} responses: error, response.failed, then [DONE]`);
    t.strictSame(JSON.parse(r[0]!.data), { type: 'error', code, message: spec.message, param: null, sequence_number: 7 }, `${code} responses error event`);
    t.strictSame(JSON.parse(r[1]!.data), {
      type: 'response.failed', sequence_number: 8,
      response: { id: 'gen-abc', object: 'response', status: 'failed', error: { code, message: spec.message }, incomplete_details: null },
    }, `${code} responses: response.failed names the response and carries the code`);
    t.equal(r[2]!.data, '[DONE]');
    t.ok(rText.startsWith('event: error\n') && rText.endsWith('\n\n'), `${code} responses: whole events`);
  }
  const unnumbered = sseEvents(streamErrorEvent('responses', 'shutting_down'));
  t.strictSame([JSON.parse(unnumbered[0]!.data).sequence_number, JSON.parse(unnumbered[1]!.data).response.id], [0, null], 'a stream with no position starts at 0 and names no response');
});
