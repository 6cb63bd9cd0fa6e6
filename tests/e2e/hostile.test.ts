// Hostile input against the live gateway: bodies that are not usable JSON, deep nesting, bad
// UTF-8, oversized and stalled bodies, clients that vanish, malformed and smuggling-shaped HTTP,
// unknown paths and methods, pipelining. Each group proves the process neither crashes nor hangs,
// answers in the request's dialect (docs/http.md), sends nothing upstream for a refused request and
// still serves a valid request afterwards. Raw sockets carry what fetch would refuse to send.

import { once } from 'node:events';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import net from 'node:net';
import t, { type Test } from 'tap';
import type { Harness, HarnessOptions } from '../helpers/gateway.ts';
import { roomyHarness } from '../helpers/upstream.ts';
import type { RequestRow } from '../../lib/store/store.ts';

type Dialect = 'chat' | 'messages' | 'responses';
const DIALECTS: readonly Dialect[] = ['chat', 'messages', 'responses'];
const PATH: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };
const MiB = 1024 * 1024;

/** docs/http.md: status, chat type (also the Responses API's) and messages type of each refusal these tests provoke. */
const EXPECT = {
  invalid_body: { status: 400, chat: 'invalid_request_error', messages: 'invalid_request_error' },
  request_too_large: { status: 413, chat: 'invalid_request_error', messages: 'invalid_request_error' },
  body_timeout: { status: 408, chat: 'invalid_request_error', messages: 'invalid_request_error' },
  not_found: { status: 404, chat: 'invalid_request_error', messages: 'not_found_error' },
  method_not_allowed: { status: 405, chat: 'invalid_request_error', messages: 'invalid_request_error' },
} as const;
type Code = keyof typeof EXPECT;

interface Setup {
  h: Harness;
  key: string;
  port: number;
  /** Every row the gateway recorded, in order, as the recorder queued it (independent of store flushes). */
  rows: RequestRow[];
}

async function setup(t: Test, opts: HarnessOptions = {}): Promise<Setup> {
  const { h, key, port } = await roomyHarness(t, opts);
  const rows: RequestRow[] = [];
  h.gateway.deps.recorder.events.on('row', (r: RequestRow) => rows.push(r));
  return { h, key, port, rows };
}

function auth(dialect: Dialect, key: string): Record<string, string> {
  return dialect === 'messages' ? { 'x-api-key': key, 'anthropic-version': '2023-06-01' } : { authorization: `Bearer ${key}` };
}

function validBody(dialect: Dialect, extra: Record<string, unknown> = {}): Record<string, unknown> {
  if (dialect === 'responses') return { model: 'sluice/fast', input: [{ role: 'user', content: 'hi' }], max_output_tokens: 50, store: false, ...extra };
  return dialect === 'chat'
    ? { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }], ...extra }
    : { model: 'claude-sonnet-4-5', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }], ...extra };
}

/** The user's turn in a dialect's body: `messages` for chat and messages, `input` for responses. */
function turn(dialect: Dialect, content: string): Record<string, unknown> {
  return { [dialect === 'responses' ? 'input' : 'messages']: [{ role: 'user', content }] };
}

interface Reply { status: number; headers: Record<string, string>; text: string }

/** POST through fetch: any bytes as the body; content-type only when given. */
async function post(s: Setup, dialect: Dialect, body: string | Uint8Array, headers: Record<string, string> = {}): Promise<Reply> {
  const res = await fetch(`${s.h.url}${PATH[dialect]}`, {
    method: 'POST', headers: { ...auth(dialect, s.key), ...headers }, body: typeof body === 'string' ? new TextEncoder().encode(body) : body,
  });
  return { status: res.status, headers: Object.fromEntries(res.headers), text: await res.text() };
}

/** A request through node:http, which (unlike fetch) sends the path exactly as written. */
function request(s: Setup, method: string, path: string, headers: Record<string, string> = {}, body?: string): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: s.port, method, path, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers as Record<string, string>, text: Buffer.concat(parts).toString('utf8') }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Asserts a complete sluice error body of `dialect` for `code`, exactly as docs/http.md draws it. */
function expectError(t: Test, r: { status: number; text: string }, dialect: Dialect, code: Code, what = ''): void {
  const want = EXPECT[code];
  t.equal(r.status, want.status, `${what} status ${want.status}`);
  let body: any;
  try {
    body = JSON.parse(r.text);
  } catch {
    t.fail(`${what} body is JSON: ${r.text.slice(0, 120)}`);
    return;
  }
  if (dialect !== 'messages') { // chat and responses share the envelope
    t.same(Object.keys(body), ['error'], `${what} chat body has only error`);
    t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
    t.equal(body.error.type, want.chat, `${what} chat type`);
    t.equal(body.error.code, code, `${what} chat code`);
    t.equal(body.error.param, null);
    t.equal(typeof body.error.message, 'string');
  } else {
    t.same(Object.keys(body).sort(), ['error', 'type'], `${what} messages body shape`);
    t.equal(body.type, 'error');
    t.same(Object.keys(body.error).sort(), ['message', 'type']);
    t.equal(body.error.type, want.messages, `${what} messages type`);
    t.equal(typeof body.error.message, 'string');
  }
}

/** Every group ends here: both dialects still answer a valid request, and nothing failed inside the gateway. */
async function stillServes(t: Test, s: Setup): Promise<void> {
  for (const dialect of DIALECTS) {
    const r = await post(s, dialect, JSON.stringify(validBody(dialect)), { 'content-type': 'application/json' });
    t.equal(r.status, 200, `a valid ${dialect} request still succeeds`);
    const body = JSON.parse(r.text);
    const kind = { chat: ['object', 'chat.completion'], messages: ['type', 'message'], responses: ['object', 'response'] }[dialect];
    t.equal(body[kind[0]!], kind[1], `a ${dialect} answer`);
  }
  t.same(s.h.logs.filter((l) => l.msg === 'request failed inside the gateway').map((l) => l.err), [], 'no request failed inside the gateway');
}

// ---------------------------------------------------------------------------------------------
// A raw HTTP/1.1 client: writes any bytes and parses the responses that come back, in order.

interface RawResponse { status: number; headers: Record<string, string>; body: Buffer; text: string }

class RawClient {
  readonly socket: net.Socket;
  readonly responses: RawResponse[] = [];
  /** Every byte received, for checks on what a response must not contain. */
  received = Buffer.alloc(0);
  closed = false;
  timedOut = false;
  /** Set when the bytes received stop being a well-formed sequence of responses. */
  malformed = false;
  readonly closedP: Promise<void>;
  private buf = Buffer.alloc(0);
  private wake: Array<() => void> = [];

  constructor(port: number, guardMs = 10_000) {
    this.socket = net.connect(port, '127.0.0.1');
    this.socket.on('data', (c: Buffer) => {
      this.received = Buffer.concat([this.received, c]);
      this.buf = Buffer.concat([this.buf, c]);
      this.parse();
      this.notify();
    });
    this.socket.on('error', () => {}); // resets after a refusal are expected; 'close' follows
    // A guard, not a wait: a connection the server never answers or closes fails the test.
    this.socket.setTimeout(guardMs, () => {
      this.timedOut = true;
      this.socket.destroy();
    });
    this.closedP = new Promise((resolve) => this.socket.on('close', () => {
      this.closed = true;
      this.parse(true);
      this.notify();
      resolve();
    }));
  }

  write(data: string | Buffer): void {
    if (!this.socket.destroyed) this.socket.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data);
  }

  /** The n-th response (1-based), or undefined if the connection closed before it arrived. */
  async response(n = 1): Promise<RawResponse | undefined> {
    while (this.responses.length < n && !this.closed) await new Promise<void>((r) => this.wake.push(r));
    return this.responses[n - 1];
  }

  /** Resolves once some bytes have arrived (or the connection closed). */
  async someBytes(): Promise<void> {
    while (this.received.length === 0 && !this.closed) await new Promise<void>((r) => this.wake.push(r));
  }

  private notify(): void {
    for (const w of this.wake.splice(0)) w();
  }

  private parse(atClose = false): void {
    while (!this.malformed) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end === -1) return;
      const lines = this.buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(lines[0].split(' ')[1]);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const c = l.indexOf(':');
        const k = l.slice(0, c).trim().toLowerCase();
        headers[k] = headers[k] === undefined ? l.slice(c + 1).trim() : `${headers[k]}, ${l.slice(c + 1).trim()}`;
      }
      let rest = this.buf.subarray(end + 4);
      let body: Buffer;
      if (status >= 100 && status < 200) {
        body = Buffer.alloc(0);
      } else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
        const parts: Buffer[] = [];
        let at = 0;
        for (;;) {
          const eol = rest.indexOf('\r\n', at);
          if (eol === -1) return;
          const line = rest.subarray(at, eol).toString('latin1');
          if (!/^[0-9a-fA-F]+$/.test(line)) {
            this.malformed = true; // not HTTP any more: stop parsing, keep the bytes in `received`
            return;
          }
          const size = parseInt(line, 16);
          if (rest.length < eol + 2 + size + 2) return;
          parts.push(rest.subarray(eol + 2, eol + 2 + size));
          at = eol + 2 + size + 2;
          if (size === 0) break;
        }
        body = Buffer.concat(parts);
        rest = rest.subarray(at);
      } else if (headers['content-length'] !== undefined) {
        const n = Number(headers['content-length']);
        if (rest.length < n) return;
        body = rest.subarray(0, n);
        rest = rest.subarray(n);
      } else {
        if (!atClose) return; // delimited by the close
        body = rest;
        rest = Buffer.alloc(0);
      }
      this.buf = rest;
      if (status >= 100 && status < 200) continue;
      this.responses.push({ status, headers, body, text: body.toString('utf8') });
    }
  }
}

function head(method: string, path: string, headers: Record<string, string | number>): string {
  return `${method} ${path} HTTP/1.1\r\nhost: sluice.test\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
}

function rawPost(dialect: Dialect, key: string, body: Buffer | string, extra: Record<string, string | number> = {}): Buffer {
  const b = typeof body === 'string' ? Buffer.from(body) : body;
  return Buffer.concat([Buffer.from(head('POST', PATH[dialect], { ...auth(dialect, key), 'content-type': 'application/json', 'content-length': b.length, ...extra }), 'latin1'), b]);
}

/** The next request the gateway's server accepts (listening beside the gateway's own handler). */
function nextServerRequest(h: Harness): Promise<{ req: IncomingMessage; res: ServerResponse }> {
  return new Promise((resolve) => h.gateway.server.once('request', (req: IncomingMessage, res: ServerResponse) => resolve({ req, res })));
}

// ---------------------------------------------------------------------------------------------

t.test('bodies that are not a usable JSON object: 400 in the dialect, nothing upstream', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const valid = JSON.stringify(validBody('chat'));
  const cases: Array<[string, string]> = [
    ['malformed', '{"model":"sluice/fast",'],
    ['truncated valid body', valid.slice(0, Math.floor(valid.length / 2))],
    ['unquoted keys', '{model:"sluice/fast"}'],
    ['single quotes', "{'model':'sluice/fast'}"],
    ['trailing garbage', `${valid}xyz`],
    ['two objects', `${valid}${valid}`],
    ['empty body', ''],
    ['whitespace only', ' \r\n\t '],
    ['array', '[{"model":"sluice/fast"}]'],
    ['number', '42'],
    ['string', '"sluice/fast"'],
    ['null', 'null'],
    ['boolean', 'true'],
    ['empty object', '{}'],
    ['object without model', '{"messages":[{"role":"user","content":"hi"}]}'],
    ['model number', '{"model":42,"messages":[]}'],
    ['model array', '{"model":["sluice/fast"],"messages":[]}'],
    ['model object', '{"model":{"id":"sluice/fast"},"messages":[]}'],
    ['model null', '{"model":null,"messages":[]}'],
    ['model boolean', '{"model":true,"messages":[]}'],
    ['model empty', '{"model":"","messages":[]}'],
    // The model id comes back in the x-sluice-model header: it must be a printable ASCII token.
    ['model with a newline', '{"model":"evil\\r\\nx-injected: 1","messages":[]}'],
    ['model with a NUL', '{"model":"a\\u0000b","messages":[]}'],
    ['model outside latin-1', '{"model":"模型/x","messages":[]}'],
    ['model of 20 000 characters', JSON.stringify({ model: 'a'.repeat(20_000), messages: [] })],
  ];
  for (const dialect of DIALECTS) {
    for (const [name, body] of cases) expectError(t, await post(s, dialect, body, { 'content-type': 'application/json' }), dialect, 'invalid_body', `${dialect} ${name}:`);
  }
  t.equal(s.h.sim.received.length, before, 'nothing went upstream');
  t.equal(s.h.rowCount(), 0, 'no row for a refused body');
  await stillServes(t, s);
});

t.test('the Responses route: stateful fields and wrong types are 400 in the dialect, a huge input is judged undecoded, nothing upstream', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const input = [{ role: 'user', content: 'hi' }];
  const cases: Array<[string, Record<string, unknown>]> = [
    ['previous_response_id', { previous_response_id: 'resp_1' }], ['store: true', { store: true }], ['store as a string', { store: 'false' }],
    ['conversation', { conversation: { id: 'conv_1' } }], ['background: true', { background: true }], ['background as a number', { background: 1 }],
    ['input a number', { input: 42 }], ['input an object', { input: { role: 'user', content: 'hi' } }], ['input null', { input: null }],
    ['an item_reference', { input: [...input, { type: 'item_reference', id: 'msg_1' }] }],
    ['a compaction_trigger', { input: [...input, { type: 'compaction_trigger' }] }],
  ];
  for (const [name, extra] of cases) expectError(t, await post(s, 'responses', JSON.stringify(validBody('responses', extra))), 'responses', 'invalid_body', `${name}:`);
  // 20 MiB of conversation ending in a reference to a stored item: refused from the scan's index.
  const huge = Array.from({ length: 2000 }, (_, i) => ({ type: 'message', role: i % 2 ? 'assistant' : 'user', content: 'x'.repeat(10 * 1024) }));
  const started = performance.now();
  expectError(t, await post(s, 'responses', JSON.stringify(validBody('responses', { input: [...huge, { type: 'item_reference', id: 'm' }] }))), 'responses', 'invalid_body', '20 MiB input with an item_reference:');
  t.comment(`20 MiB refused in ${(performance.now() - started).toFixed(0)} ms`);
  t.equal(s.h.sim.received.length, before, 'nothing upstream');
  t.equal(s.h.rowCount(), 0, 'no row for a refusal');
  t.same(s.h.logs.filter((l) => l.msg === 'request failed inside the gateway').map((l) => l.err), [], 'no request failed inside the gateway');
  await stillServes(t, s);
});

t.test('content-type is not checked: a JSON body passes whatever it says, a non-JSON body is 400', async (t) => {
  const s = await setup(t);
  for (const dialect of DIALECTS) {
    const json = JSON.stringify(validBody(dialect));
    for (const ct of [undefined, 'text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', 'nonsense;;;=', 'multipart/form-data; boundary=x']) {
      const r = await post(s, dialect, json, ct === undefined ? {} : { 'content-type': ct });
      t.equal(r.status, 200, `${dialect} JSON body with content-type ${ct ?? '(none)'} is served`);
    }
    const before = s.h.sim.received.length;
    expectError(t, await post(s, dialect, 'model=sluice/fast&max_tokens=5', { 'content-type': 'application/x-www-form-urlencoded' }), dialect, 'invalid_body', `${dialect} form body:`);
    expectError(t, await post(s, dialect, 'hello', { 'content-type': 'application/json' }), dialect, 'invalid_body', `${dialect} text labelled JSON:`);
    expectError(t, await post(s, dialect, 'hello'), dialect, 'invalid_body', `${dialect} text without content-type:`);
    expectError(t, await post(s, dialect, new Uint8Array([0x1f, 0x8b, 0x08, 0x00, 0xff, 0xfe]), { 'content-type': 'application/json', 'content-encoding': 'gzip' }), dialect, 'invalid_body', `${dialect} binary:`);
    t.equal(s.h.sim.received.length, before, `${dialect}: nothing upstream for the non-JSON bodies`);
  }
  await stillServes(t, s);
});

t.test('deep nesting answers 400 or passes, never a crash or a 500', async (t) => {
  const s = await setup(t);
  const N = 100_000;
  const before = s.h.sim.received.length;
  for (const dialect of DIALECTS) {
    const model = dialect === 'messages' ? 'claude-sonnet-4-5' : 'sluice/fast'; // tier models: the body is re-serialised
    const cases: Array<[string, string]> = [
      ['100k unclosed [', '['.repeat(N)],
      ['100k nested arrays as the whole body', '['.repeat(N) + ']'.repeat(N)],
      ['100k nested objects as the whole body', '{"a":'.repeat(N) + '1' + '}'.repeat(N)],
      ['a usable body with 100k nested arrays inside', `{"model":"${model}","max_tokens":5,"x":${'['.repeat(N)}${']'.repeat(N)}}`],
      ['100k nested objects in a message', `{"model":"${model}","max_tokens":5,"messages":[{"role":"user","content":${'{"a":'.repeat(N)}1${'}'.repeat(N)}}]}`],
      ['600 levels: just past the limit', `{"model":"${model}","max_tokens":5,"x":${'['.repeat(600)}${']'.repeat(600)}}`],
    ];
    for (const [name, body] of cases) expectError(t, await post(s, dialect, body), dialect, 'invalid_body', `${dialect} ${name}:`);
  }
  t.equal(s.h.sim.received.length, before, 'nothing upstream');
  for (const dialect of DIALECTS) {
    const deep = JSON.parse('['.repeat(200) + ']'.repeat(200));
    // Responses `metadata` is a string map at the router: the nesting rides in a field of its own there.
    const body = validBody(dialect, dialect === 'responses' ? { x_nested: deep } : { metadata: { x: deep } });
    t.equal((await post(s, dialect, JSON.stringify(body))).status, 200, `${dialect}: 200 levels of nesting pass`);
  }
  await stillServes(t, s);
});

t.test('invalid UTF-8 inside a JSON string decodes to U+FFFD; outside a string it is not JSON', async (t) => {
  // The body is decoded as UTF-8 with replacement (WHATWG): a bad sequence inside a string becomes
  // U+FFFD and the request proceeds; the upstream sees U+FFFD where the body is re-serialised.
  const s = await setup(t);
  const bad: Array<[string, number[]]> = [
    ['C3 28', [0xc3, 0x28]], ['lone FF', [0xff]], ['UTF-16 surrogate D800', [0xed, 0xa0, 0x80]], ['overlong /', [0xc0, 0xaf]], ['cut 4-byte sequence', [0xf0, 0x9f, 0x98]],
  ];
  for (const dialect of DIALECTS) {
    const [pre, post_] = JSON.stringify(validBody(dialect, turn(dialect, 'ab@@cd'))).split('@@');
    for (const [name, bytes] of bad) {
      const r = await post(s, dialect, Buffer.concat([Buffer.from(pre), Buffer.from(bytes), Buffer.from(post_)]), { 'content-type': 'application/json' });
      t.equal(r.status, 200, `${dialect} ${name} in a message: served`);
      const upstream = s.h.sim.received.at(-1)!.json;
      t.ok((upstream.messages ?? upstream.input)[0].content.startsWith('ab\uFFFD'), `${dialect} ${name}: upstream got U+FFFD`);
    }
    const before = s.h.sim.received.length;
    const model = Buffer.concat([Buffer.from('{"model":"sluice/'), Buffer.from([0xc3, 0x28]), Buffer.from('","messages":[]}')]);
    expectError(t, await post(s, dialect, model), dialect, 'invalid_body', `${dialect} bad UTF-8 in the model:`);
    const token = Buffer.concat([Buffer.from('{"model":"sluice/fast",'), Buffer.from([0xff, 0xfe]), Buffer.from(':1}')]);
    expectError(t, await post(s, dialect, token), dialect, 'invalid_body', `${dialect} bad UTF-8 as a token:`);
    t.equal(s.h.sim.received.length, before, `${dialect}: nothing upstream for the refused ones`);
  }
  await stillServes(t, s);
});

t.test('header abuse: 431 for huge headers, 400 from the parser for bad lines, the connection closed', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const base = (extra: string) => `POST ${PATH.chat} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${s.key}\r\ncontent-length: 2\r\n${extra}\r\n{}`;
  const cases: Array<[string, string, number]> = [
    ['one 20 KiB header', base(`x-big: ${'a'.repeat(20 * 1024)}\r\n`), 431],
    ['3000 headers, 40 KiB', base(Array.from({ length: 3000 }, (_, i) => `x-h${i}: vvvvv\r\n`).join('')), 431],
    ['a 20 KiB URL', `GET /v1/${'a'.repeat(20 * 1024)} HTTP/1.1\r\nhost: x\r\n\r\n`, 431],
    ['NUL in a value', base('x-a: b\0c\r\n'), 400],
    ['control byte in a value', base('x-a: b\x01c\r\n'), 400],
    ['DEL in a value', base('x-a: b\x7fc\r\n'), 400],
    ['space in a name', base('bad name: x\r\n'), 400],
    ['no colon', base('justaname\r\n'), 400],
    ['bare CR', base('x-a: b\rc\r\n'), 400],
    ['obs-fold continuation', base('x-a: b\r\n  folded\r\n'), 400],
    ['NUL in the name', base('x-\0a: b\r\n'), 400],
    ['bad method token', 'G@T /v1/models HTTP/1.1\r\nhost: x\r\n\r\n', 400],
    ['space inside the URL', 'GET /v1/a b HTTP/1.1\r\nhost: x\r\n\r\n', 400],
    ['NUL inside the URL', 'GET /v1/a\0b HTTP/1.1\r\nhost: x\r\n\r\n', 400],
    ['binary garbage', '\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03', 400],
    ['HTTP/1.1 without host', 'GET /v1/models HTTP/1.1\r\n\r\n', 400],
  ];
  for (const [name, data, status] of cases) {
    const c = new RawClient(s.port);
    c.write(data);
    const r = await c.response();
    await c.closedP;
    t.equal(r?.status, status, `${name}: ${status}`);
    t.equal(r?.headers.connection, 'close', `${name}: says close`);
    t.ok(c.closed && !c.timedOut, `${name}: the server closed the connection`);
  }
  // Many headers that stay under the limit are just headers.
  const many = Object.fromEntries(Array.from({ length: 500 }, (_, i) => [`x-h${i}`, 'v']));
  for (const dialect of DIALECTS) {
    const r = await post(s, dialect, JSON.stringify(validBody(dialect)), many);
    t.equal(r.status, 200, `${dialect}: 500 small headers are served`);
  }
  t.equal(s.h.sim.received.length, before + DIALECTS.length, 'nothing upstream but the valid requests');
  await stillServes(t, s);
});

t.test('bodies over 32 MiB: 413 in the dialect before the body is read, the connection closed', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const declared = (dialect: Dialect) => head('POST', PATH[dialect], { ...auth(dialect, s.key), 'content-type': 'application/json', 'content-length': 33 * MiB });
  for (const dialect of DIALECTS) {
    // Declared: refused from content-length alone, while the client has sent only the first bytes.
    const c = new RawClient(s.port);
    c.write(declared(dialect) + '{"model":"sluice/fast",');
    const r = await c.response();
    await c.closedP;
    expectError(t, r ?? { status: 0, text: '' }, dialect, 'request_too_large', `${dialect} declared 33 MiB, headers only:`);
    t.ok(c.closed && !c.timedOut, `${dialect} declared: connection closed`);

    // Declared, with a client that sends the whole body at once: the refusal still reaches it
    // (the server drains before closing instead of resetting the connection).
    const eager = new RawClient(s.port);
    eager.write(Buffer.concat([Buffer.from(declared(dialect)), Buffer.alloc(33 * MiB, 0x20)]));
    const r1 = await eager.response();
    await eager.closedP;
    expectError(t, r1 ?? { status: 0, text: '' }, dialect, 'request_too_large', `${dialect} declared 33 MiB, sent at once:`);
    t.ok(eager.closed && !eager.timedOut, `${dialect} declared, sent at once: connection closed`);

    // Chunked: no length up front, refused once the count passes 32 MiB; the client sends 40.
    const chunked = new RawClient(s.port);
    chunked.write(head('POST', PATH[dialect], { ...auth(dialect, s.key), 'content-type': 'application/json', 'transfer-encoding': 'chunked' }));
    const frame = Buffer.concat([Buffer.from(`${MiB.toString(16)}\r\n`), Buffer.alloc(MiB, 0x20), Buffer.from('\r\n')]);
    chunked.write(Buffer.from('1\r\n{\r\n'));
    for (let i = 0; i < 40; i++) chunked.write(frame);
    const r2 = await chunked.response();
    await chunked.closedP;
    expectError(t, r2 ?? { status: 0, text: '' }, dialect, 'request_too_large', `${dialect} chunked past 32 MiB:`);
    t.ok(chunked.closed && !chunked.timedOut, `${dialect} chunked: connection closed`);
  }
  t.equal(s.h.sim.received.length, before, 'nothing upstream');
  await stillServes(t, s);
});

t.test('a body that never finishes: 408 in the dialect, the connection freed, others served meanwhile', async (t) => {
  const s = await setup(t, { bodyTimeoutMs: 300 });
  const before = s.h.sim.received.length;
  for (const dialect of DIALECTS) {
    for (const [name, data] of [
      ['part of a declared body', head('POST', PATH[dialect], { ...auth(dialect, s.key), 'content-length': 500 }) + '{"model":"sluice/fast","mess'],
      ['headers only', head('POST', PATH[dialect], { ...auth(dialect, s.key), 'content-length': 500 })],
      ['an unfinished chunked body', head('POST', PATH[dialect], { ...auth(dialect, s.key), 'transfer-encoding': 'chunked' }) + '5\r\n{"mod\r\n'],
    ] as const) {
      const slow = new RawClient(s.port);
      const accepted = nextServerRequest(s.h);
      slow.write(data);
      await accepted;
      // While that body stalls, another client is served.
      const other = await post(s, dialect, JSON.stringify(validBody(dialect)));
      t.equal(other.status, 200, `${dialect} ${name}: a valid request is served meanwhile`);
      t.notOk(slow.closed, `${dialect} ${name}: ...while the slow one is still waiting`);
      const r = await slow.response();
      await slow.closedP;
      expectError(t, r ?? { status: 0, text: '' }, dialect, 'body_timeout', `${dialect} ${name}:`);
      t.ok(slow.closed && !slow.timedOut, `${dialect} ${name}: the server closed the connection`);
    }
  }
  t.equal(s.h.sim.received.length, before + 3 * DIALECTS.length, 'only the valid requests went upstream');
  const health = (await (await fetch(`${s.h.url}/api/health`)).json()) as { in_flight: number };
  t.equal(health.in_flight, 1, 'no stalled request is still held (only this one)');
  await stillServes(t, s);
});

t.test('a client that closes mid-body: no crash, nothing upstream, no row', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  for (const dialect of DIALECTS) {
    for (const [name, data] of [
      ['declared body', head('POST', PATH[dialect], { ...auth(dialect, s.key), 'content-length': 1000 }) + '{"model":"sluice/fast",'],
      ['chunked body', head('POST', PATH[dialect], { ...auth(dialect, s.key), 'transfer-encoding': 'chunked' }) + '5\r\n{"mod\r\n'],
    ] as const) {
      const seen = () => s.h.logs.filter((l) => l.msg === 'client closed before its request body was complete').length;
      const want = seen() + 1;
      const c = new RawClient(s.port);
      const accepted = nextServerRequest(s.h);
      c.write(data);
      const { req, res } = await accepted;
      c.socket.destroy();
      if (!res.closed) await once(res, 'close');
      if (!req.closed) await once(req, 'close');
      // The handler's rejection settles a few turns after the close: wait for its log line, bounded.
      const deadline = Date.now() + 5000;
      while (seen() < want && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
      t.equal(seen(), want, `${dialect} ${name}: seen as a client leaving`);
    }
  }
  t.equal(s.h.sim.received.length, before, 'nothing upstream');
  const health = (await (await fetch(`${s.h.url}/api/health`)).json()) as { in_flight: number };
  t.equal(health.in_flight, 1, 'no abandoned request is still held');
  await stillServes(t, s);
  await s.h.rows(DIALECTS.length);
  t.same(s.rows.map((r) => [r.endpoint, r.outcome]), DIALECTS.map((d) => [d, 'ok']), 'rows only for the valid requests');
});

t.test('unknown paths: 404 in the guessed dialect; other methods on the routes: 405 with allow', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const key = { authorization: `Bearer ${s.key}`, 'content-type': 'application/json' };
  const paths: Array<[string, Dialect, Record<string, string>?]> = [
    ['/v1/nope', 'chat'],
    ['/', 'chat'],
    ['/admin', 'chat'],
    ['/v1/../admin', 'chat'],
    ['/v1/chat/completions/../../admin', 'chat'],
    ['/%2e%2e/%2e%2e/etc/passwd', 'chat'],
    ['/v1/chat%2Fcompletions', 'chat'],
    ['/v1/chat/completions%00', 'chat'],
    ['/v1/chat/completions/', 'chat'],
    ['/V1/CHAT/COMPLETIONS', 'chat'],
    ['//v1/chat/completions', 'chat'],
    [`/v1/${'x'.repeat(8000)}`, 'chat'],
    ['/v1/messages%00', 'messages'],
    ['/v1/messages/nope', 'messages'],
    ['/v1/messages/', 'messages'],
    ['/v1/messagesX?beta=true', 'messages'],
    ['/v1/nope', 'messages', { 'anthropic-version': '2023-06-01' }],
    ['/v1/responses/', 'responses'],
    ['/v1/responses/resp_123', 'responses'],
    ['/v1/responses/compact', 'responses'],
    ['/v1/responses%00', 'responses'],
    ['/admin', 'messages', { 'anthropic-version': 'garbage' }],
  ];
  for (const [path, dialect, extra] of paths) {
    const r = await request(s, 'POST', path, { ...key, ...extra }, JSON.stringify(validBody(dialect)));
    expectError(t, r, dialect, 'not_found', `POST ${path.slice(0, 60)} (${dialect}):`);
  }
  const routes: Array<[string, Dialect, string]> = [
    ['/v1/chat/completions', 'chat', 'POST'], ['/v1/messages', 'messages', 'POST'], ['/v1/messages/count_tokens', 'messages', 'POST'], ['/v1/responses', 'responses', 'POST'], ['/v1/models', 'chat', 'GET'],
  ];
  for (const [path, dialect, allowed] of routes) {
    for (const method of ['GET', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'TRACE', 'POST'].filter((m) => m !== allowed)) {
      const r = await request(s, method, path, key, method === 'GET' || method === 'TRACE' ? undefined : '{"model":"sluice/fast"}');
      expectError(t, r, dialect, 'method_not_allowed', `${method} ${path}:`);
      t.equal(r.headers.allow, allowed, `${method} ${path}: allow ${allowed}`);
    }
  }
  t.equal(s.h.sim.received.length, before, 'nothing upstream');
  await stillServes(t, s);
});

t.test('smuggling shapes: Node refuses them with 400, nothing is executed, no crash', async (t) => {
  const s = await setup(t);
  const before = s.h.sim.received.length;
  const smuggled = rawPost('chat', s.key, JSON.stringify(validBody('chat'))).toString('latin1');
  const h = (extra: Record<string, string | number>) => head('POST', PATH.chat, { ...auth('chat', s.key), 'content-type': 'application/json', ...extra });
  const cases: Array<[string, string]> = [
    ['content-length with transfer-encoding', h({ 'content-length': 5, 'transfer-encoding': 'chunked' }) + `0\r\n\r\n${smuggled}`],
    ['transfer-encoding with content-length', h({ 'transfer-encoding': 'chunked', 'content-length': 40 }) + `0\r\n\r\n${smuggled}`],
    ['two different content-lengths', `${h({ 'content-length': 2 }).slice(0, -2)}content-length: 100\r\n\r\n{}${smuggled}`],
    ['two equal content-lengths', `${h({ 'content-length': 2 }).slice(0, -2)}content-length: 2\r\n\r\n{}${smuggled}`],
    ['a content-length list', h({ 'content-length': '2, 2' }) + `{}${smuggled}`],
    ['a negative content-length', h({ 'content-length': -1 }) + smuggled],
    ['a signed content-length', h({ 'content-length': '+2' }) + `{}${smuggled}`],
    ['chunked then identity', `${h({ 'transfer-encoding': 'chunked' }).slice(0, -2)}transfer-encoding: identity\r\n\r\n0\r\n\r\n${smuggled}`],
    ['an unknown coding', h({ 'transfer-encoding': 'xchunked' }) + `0\r\n\r\n${smuggled}`],
    ['chunked twice in a list', h({ 'transfer-encoding': 'chunked, chunked' }) + `0\r\n\r\n${smuggled}`],
    ['a bad chunk size', h({ 'transfer-encoding': 'chunked' }) + `zz\r\n{}\r\n0\r\n\r\n${smuggled}`],
  ];
  for (const [name, data] of cases) {
    const c = new RawClient(s.port);
    c.write(data);
    const r = await c.response();
    await c.closedP;
    t.equal(r?.status, 400, `${name}: 400`);
    t.equal(c.responses.length, 1, `${name}: the smuggled request got no answer`);
    t.ok(c.closed && !c.timedOut, `${name}: connection closed`);
  }
  t.equal(s.h.sim.received.length, before, 'nothing upstream: no smuggled request ran');
  await stillServes(t, s);
});

t.test('pipelining on one keep-alive connection', async (t) => {
  const s = await setup(t);

  await t.test('bad requests followed by good ones are all answered, in order', async (t) => {
    const c = new RawClient(s.port);
    c.write(Buffer.concat([
      rawPost('chat', s.key, '{"model":'),
      rawPost('messages', s.key, JSON.stringify(validBody('messages'))),
      Buffer.from(head('DELETE', PATH.messages, auth('messages', s.key)), 'latin1'),
      rawPost('messages', s.key, '[1,2,3]'),
      Buffer.from(head('POST', '/v1/nope', { ...auth('chat', s.key), 'content-length': 2 }) + '{}', 'latin1'),
      rawPost('chat', s.key, JSON.stringify(validBody('chat')), { connection: 'close' }),
    ]));
    await c.response(6);
    await c.closedP;
    t.equal(c.responses.length, 6, 'six answers');
    const [a, b, d, e, f, g] = c.responses;
    expectError(t, a, 'chat', 'invalid_body', 'first:');
    t.equal(b.status, 200, 'second (valid messages): 200');
    t.equal(JSON.parse(b.text).type, 'message');
    expectError(t, d, 'messages', 'method_not_allowed', 'third:');
    expectError(t, e, 'messages', 'invalid_body', 'fourth:');
    expectError(t, f, 'chat', 'not_found', 'fifth:');
    t.equal(g.status, 200, 'last (valid chat): 200');
    t.equal(JSON.parse(g.text).object, 'chat.completion');
  });

  await t.test('malformed bytes behind a streaming response close the connection without writing into that response', async (t) => {
    const c = new RawClient(s.port);
    const streaming = rawPost('chat', s.key, JSON.stringify(validBody('chat', { stream: true })), { 'x-sim': 'chunks=40;chunk-delay-ms=10' });
    c.write(streaming);
    await c.someBytes(); // the response has begun
    c.write('GARBAGE\0 / HTTP/1.1\r\n\r\n');
    await c.closedP;
    t.notOk(c.timedOut);
    t.notOk(c.malformed, 'what arrived is well-formed HTTP');
    const text = c.received.toString('latin1');
    t.equal(text.split('HTTP/1.1 ').length - 1, 1, 'exactly one status line: nothing was written into the stream');
    t.match(text.slice(0, 16), /^HTTP\/1\.1 200 /);
    await s.h.rows(3); // the two valid pipelined requests, then this one
    t.equal(s.rows.find((r) => r.stream)?.outcome, 'client_disconnect', 'the cut stream is recorded as a disconnect');
  });

  await stillServes(t, s);
});
