// Seeded fuzzing of the live gateway: random bytes and random JSON as bodies, valid chat/messages/
// responses bodies with fields replaced by hostile values (stateful Responses fields included), random credential/session/forwarding headers and
// random paths and methods. Property: every case is answered (status < 600, no hang), a sluice error
// on /v1 is the docs/http.md body of the right dialect (an upstream error passes in the sim's
// shape), nothing fails inside the gateway, and a valid request still succeeds after the run.

import http from 'node:http';
import net from 'node:net';
import fc from 'fast-check';
import t from 'tap';
import { CATALOGUE, type ErrorCode } from '../../lib/errors.ts';
import { roomyHarness } from '../helpers/upstream.ts';

const SEED = 0x511ce;
const CASES = 3200;
const CONCURRENCY = 16;
const CASE_GUARD_MS = 15_000;

type Dialect = 'chat' | 'messages' | 'responses';
const ROUTE_DIALECT: Record<string, Dialect> = {
  '/v1/chat/completions': 'chat', '/v1/messages': 'messages', '/v1/messages/count_tokens': 'messages', '/v1/responses': 'responses', '/v1/models': 'chat',
};
const PROXIED = ['/v1/chat/completions', '/v1/messages', '/v1/messages/count_tokens', '/v1/responses'];

interface Case {
  kind: string;
  method: string;
  path: string;
  /** `undefined` values mean: leave the header out. `$KEY` is replaced by the valid client key. */
  headers: Record<string, string | undefined>;
  body?: Uint8Array;
}

// ---------------------------------------------------------------------------------------------
// Generators

const text = (max: number) => fc.oneof(
  fc.string({ maxLength: max }),
  fc.string({ unit: 'binary', maxLength: max }),
  fc.string({ unit: 'binary-ascii', maxLength: max }),
);
const hugeString = fc.integer({ min: 1_000, max: 200_000 }).map((n) => 'x'.repeat(n));
const oddNumber = fc.oneof(
  fc.integer({ min: -1e12, max: 1e12 }),
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(-1, 0, 0.5, 1.5, -0.000001, 1e308, -1e308, Number.MAX_SAFE_INTEGER, 2 ** 53 + 2, 2 ** 31, -(2 ** 31)),
);
/** Anything a hostile client could put where a field should be. */
const hostile: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: oddNumber },
  { weight: 3, arbitrary: text(40) },
  { weight: 1, arbitrary: hugeString },
  { weight: 1, arbitrary: fc.constantFrom(null, true, false, '', 'true', '0', '-1', '[]', '{}', 'sluice/fast', 'adaptive') },
  { weight: 3, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 6 }) },
  { weight: 1, arbitrary: fc.dictionary(text(10), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 5 }) },
);
const modelIds = fc.constantFrom(
  'sluice/fast', 'sluice/agent', 'sluice/reasoning', 'sluice/auto', 'sluice/nope', 'sluice/', 'claude-sonnet-4-5', 'sonnet', 'opus', 'haiku',
  'openai/gpt-4.1-mini', 'meta-llama/llama-3.3-70b-instruct', 'unknown/model', '__proto__', 'constructor', 'toString',
);

const chatBase = fc.record({
  model: modelIds,
  messages: fc.constant([{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }]),
  max_tokens: fc.integer({ min: 1, max: 100 }),
  stream: fc.boolean(),
});
const messagesBase = fc.record({
  model: modelIds,
  max_tokens: fc.integer({ min: 1, max: 100 }),
  messages: fc.constant([{ role: 'user', content: [{ type: 'text', text: 'hi' }] }]),
  stream: fc.boolean(),
});

const responsesBase = fc.record({
  model: modelIds,
  input: fc.constantFrom<unknown>('hi', [{ role: 'user', content: 'hi' }], [{ type: 'message', role: 'user', content: [{ type: 'input_text', text: 'hi' }] }]),
  max_output_tokens: fc.integer({ min: 16, max: 100 }),
  stream: fc.boolean(),
  store: fc.constant(false),
});

const message = fc.record({
  role: fc.oneof(fc.constantFrom('user', 'assistant', 'system', 'tool', 'developer'), hostile),
  content: fc.oneof(text(30), fc.array(fc.record({ type: fc.oneof(fc.constant('text'), hostile), text: hostile }), { maxLength: 3 }), hostile),
}, { requiredKeys: [] });
/** Field → values tried there (beyond `hostile`, which every field also gets). */
const FIELD_VALUES: Record<string, fc.Arbitrary<unknown>> = {
  model: fc.oneof(hostile, hugeString, fc.array(modelIds, { maxLength: 3 }), text(300)),
  messages: fc.oneof(fc.array(message, { maxLength: 6 }), hostile),
  user: hostile,
  metadata: fc.oneof(fc.record({ user_id: hostile }), fc.record({ user_id: fc.jsonValue() }), fc.constant({ user_id: JSON.stringify({ device_id: 'd', account_uuid: 'a', session_id: 'not-a-uuid' }) }), hostile),
  tools: fc.oneof(text(20), fc.array(fc.oneof(fc.record({ name: hostile, strict: hostile, defer_loading: hostile, input_schema: hostile }, { requiredKeys: [] }), hostile), { maxLength: 4 }), hostile),
  thinking: fc.oneof(fc.constant({ type: 'adaptive' }), fc.array(hostile, { maxLength: 3 }), fc.record({ type: hostile, budget_tokens: hostile }), hostile),
  max_tokens: fc.oneof(oddNumber, fc.constantFrom('100', '1e9', 'NaN'), hostile),
  max_completion_tokens: fc.oneof(oddNumber, hostile),
  stream: fc.oneof(fc.constantFrom('true', 'false', 1, 0, 'yes', null), hostile),
  models: fc.oneof(fc.array(hostile, { maxLength: 3 }), hostile),
  system: fc.oneof(text(40), fc.array(hostile, { maxLength: 3 }), hostile),
  context_management: hostile,
  output_config: hostile,
  temperature: hostile,
  tool_choice: hostile,
  // The Responses dialect's own fields, stateful ones included.
  input: fc.oneof(text(40), fc.array(fc.oneof(message, fc.record({ type: fc.constantFrom('item_reference', 'compaction_trigger', 'function_call_output', 'reasoning', 'message'), id: hostile, call_id: hostile, output: hostile }, { requiredKeys: ['type'] }), hostile), { maxLength: 5 }), hostile),
  instructions: hostile,
  max_output_tokens: fc.oneof(oddNumber, hostile),
  previous_response_id: fc.oneof(fc.constant(null), text(20), hostile),
  store: fc.oneof(fc.constantFrom(true, false, null), hostile),
  background: fc.oneof(fc.constantFrom(true, false, null), hostile),
  conversation: fc.oneof(fc.constant(null), text(20), fc.record({ id: hostile }), hostile),
  include: fc.oneof(fc.constant(['reasoning.encrypted_content']), fc.array(hostile, { maxLength: 3 }), hostile),
  client_metadata: fc.oneof(fc.dictionary(text(10), text(20), { maxKeys: 4 }), hostile),
  safety_identifier: hostile,
  reasoning: fc.oneof(fc.record({ effort: hostile, summary: hostile, max_tokens: hostile }, { requiredKeys: [] }), hostile),
  ['__proto__']: fc.dictionary(text(5), hostile, { maxKeys: 3 }), // an own key named __proto__ (JSON.parse makes one)
};
const FIELDS = Object.keys(FIELD_VALUES);
/** One to four fields replaced by values tried there, or removed (`undefined`). */
const mutation = fc.array(
  fc.constantFrom(...FIELDS).chain((f) => fc.tuple(fc.constant(f), fc.oneof({ weight: 4, arbitrary: FIELD_VALUES[f] }, { weight: 1, arbitrary: fc.constant(undefined) }))),
  { minLength: 1, maxLength: 4 },
);

function mutate(base: Record<string, unknown>, changes: Array<[string, unknown]>): Record<string, unknown> {
  const body: Record<string, unknown> = { ...base };
  for (const [field, value] of changes) {
    if (value === undefined) delete body[field];
    else Object.defineProperty(body, field, { value, enumerable: true, writable: true, configurable: true }); // `__proto__` as an own key
  }
  return body;
}

const utf8 = (s: string) => new TextEncoder().encode(s);
const proxiedPath = fc.constantFrom(...PROXIED);
const anyV1Path = fc.constantFrom(...Object.keys(ROUTE_DIALECT));
const validKeyHeaders = fc.constantFrom<Record<string, string | undefined>>({ authorization: 'Bearer $KEY' }, { 'x-api-key': '$KEY', 'anthropic-version': '2023-06-01' });

const headerText = fc.oneof(text(60), fc.string({ unit: 'binary-ascii', maxLength: 300 }), fc.constant(''));
const credential = fc.oneof(
  fc.constant('$KEY'),
  headerText,
  fc.stringMatching(/^[A-Za-z0-9]{32}$/).map((tok) => `sluice_roomy_${tok}`),
  fc.stringMatching(/^[a-z][a-z0-9-]{0,31}$/).map((p) => `sluice_${p}_${'A'.repeat(32)}`),
  fc.constantFrom('sluice__', 'sluice_roomy_', 'sluice_ROOMY_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'Bearer', 'bearer $KEY'),
);
const forwardedFor = fc.oneof(
  fc.ipV4(), fc.ipV6(), headerText,
  fc.array(fc.oneof(fc.ipV4(), fc.ipV6(), headerText), { minLength: 2, maxLength: 8 }).map((a) => a.join(',')),
  fc.constantFrom('127.0.0.1', '::1', '::ffff:10.0.0.1', ', , ,', '1.2.3.4, 127.0.0.1', 'unknown'),
);

const cases: fc.Arbitrary<Case> = fc.oneof(
  // Random bytes as the body, alone or behind a plausible JSON prefix.
  fc.record({ path: proxiedPath, auth: validKeyHeaders, bytes: fc.uint8Array({ maxLength: 4096 }), prefix: fc.boolean() }).map(({ path, auth, bytes, prefix }) => ({
    kind: 'random-bytes', method: 'POST', path, headers: { ...auth, 'content-type': 'application/json' },
    body: prefix ? new Uint8Array([...utf8('{"model":"sluice/fast","x":"'), ...bytes]) : bytes,
  })),
  // Random JSON values of every type as the whole body.
  fc.record({
    path: proxiedPath, auth: validKeyHeaders,
    json: fc.oneof(fc.jsonValue().map((v) => JSON.stringify(v)), fc.anything().map((v) => JSON.stringify(v) ?? 'null'), fc.json()),
  }).map(({ path, auth, json }) => ({ kind: 'random-json', method: 'POST', path, headers: { ...auth, 'content-type': 'application/json' }, body: utf8(json) })),
  // Valid chat bodies with fields replaced.
  { weight: 3, arbitrary: fc.record({ base: chatBase, changes: mutation }).map(({ base, changes }) => ({
    kind: 'mutated-chat', method: 'POST', path: '/v1/chat/completions', headers: { authorization: 'Bearer $KEY', 'content-type': 'application/json' },
    body: utf8(JSON.stringify(mutate(base, changes))),
  })) },
  // Valid messages bodies with fields replaced (and count_tokens, which forwards as it comes).
  { weight: 3, arbitrary: fc.record({ base: messagesBase, changes: mutation, path: fc.constantFrom('/v1/messages', '/v1/messages', '/v1/messages/count_tokens') }).map(({ base, changes, path }) => ({
    kind: 'mutated-messages', method: 'POST', path, headers: { 'x-api-key': '$KEY', 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
    body: utf8(JSON.stringify(mutate(base, changes))),
  })) },
  // Valid Responses bodies (what Codex and the AI SDK send) with fields replaced.
  { weight: 3, arbitrary: fc.record({ base: responsesBase, changes: mutation, codex: fc.boolean() }).map(({ base, changes, codex }) => ({
    kind: 'mutated-responses', method: 'POST', path: '/v1/responses',
    headers: { authorization: 'Bearer $KEY', 'content-type': 'application/json', ...(codex ? { 'session-id': 'fuzz-session', 'x-codex-beta-features': 'remote_compaction_v2' } : {}) },
    body: utf8(JSON.stringify(mutate(base, changes))),
  })) },
  // Random credential, session and forwarding headers on a valid body.
  { weight: 2, arbitrary: fc.record({
    path: anyV1Path,
    authorization: fc.option(fc.oneof(credential.map((c) => `Bearer ${c}`), credential), { nil: undefined }),
    apiKey: fc.option(credential, { nil: undefined }),
    session: fc.option(headerText, { nil: undefined }),
    ccSession: fc.option(headerText, { nil: undefined }),
    codexSession: fc.option(headerText, { nil: undefined }),
    xff: fc.option(forwardedFor, { nil: undefined }),
    version: fc.option(headerText, { nil: undefined }),
    run: fc.option(headerText, { nil: undefined }),
    base: fc.oneof(chatBase, messagesBase, responsesBase),
  }).map((c) => ({
    kind: 'random-headers', method: c.path === '/v1/models' ? 'GET' : 'POST', path: c.path,
    headers: {
      authorization: c.authorization, 'x-api-key': c.apiKey, 'x-sluice-session': c.session, 'x-claude-code-session-id': c.ccSession, 'session-id': c.codexSession,
      'x-forwarded-for': c.xff, 'anthropic-version': c.version, 'x-sluice-run': c.run, 'content-type': 'application/json',
    },
    body: c.path === '/v1/models' ? undefined : utf8(JSON.stringify(c.base)),
  })) },
  // Random paths and methods.
  fc.record({
    method: fc.constantFrom('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD', 'TRACE', 'PROPFIND', 'BREW'),
    path: fc.oneof(
      fc.webPath(),
      fc.webPath().map((p) => `/v1${p}`),
      fc.tuple(anyV1Path, fc.oneof(fc.webPath(), text(30))).map(([a, b]) => a + b),
      text(60).map((s) => `/${s}`),
      fc.constantFrom('/', '//', '/v1', '/v1/', '/v1/../v1/messages', '/v1/messages?%00', '/%2e%2e%2f', '/v1/chat/completions?x=' + 'a'.repeat(4000), '*', '/v1/responses/compact', '/v1/responses/resp_1', '/v1/responses?x=1'),
    ),
    auth: validKeyHeaders,
    anthropic: fc.boolean(),
    body: fc.option(fc.oneof(fc.uint8Array({ maxLength: 256 }), fc.json().map(utf8)), { nil: undefined }),
  }).map((c) => ({
    kind: 'random-path', method: c.method, path: c.path,
    headers: { ...c.auth, ...(c.anthropic ? { 'anthropic-version': '2023-06-01' } : {}) },
    body: c.body,
  })),
);

// ---------------------------------------------------------------------------------------------
// Sending

interface Answer { status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }

function validHeaderValue(v: string): boolean {
  try {
    http.validateHeaderValue('x', v);
    return true;
  } catch {
    return false;
  }
}

/** Through node:http on a keep-alive agent; throws on a transport error. */
function sendHttp(agent: http.Agent, port: number, c: Case, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    // An explicit length: node:http frames no body for HEAD (and other bodiless methods) by itself.
    const framed = c.body ? { ...headers, 'content-length': String(c.body.length) } : headers;
    const req = http.request({ agent, host: '127.0.0.1', port, method: c.method, path: c.path, headers: framed }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (d: Buffer) => parts.push(d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(parts) }));
      res.on('error', reject);
    });
    req.setTimeout(CASE_GUARD_MS, () => req.destroy(new Error('no answer in time')));
    req.on('error', reject);
    req.end(c.body);
  });
}

/** What node:http refuses to send (control bytes in a header, a path with spaces) goes over a raw socket. */
function sendRaw(port: number, c: Case, headers: Record<string, string>): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    const parts: Buffer[] = [];
    s.on('data', (d: Buffer) => parts.push(d));
    s.on('error', () => {});
    s.setTimeout(CASE_GUARD_MS, () => {
      s.destroy();
      reject(new Error('no answer in time'));
    });
    s.on('close', () => {
      const all = Buffer.concat(parts);
      const end = all.indexOf('\r\n\r\n');
      if (end === -1) return reject(new Error(`closed without an answer (${all.length} bytes)`));
      const lines = all.subarray(0, end).toString('latin1').split('\r\n');
      const h: Record<string, string> = {};
      for (const l of lines.slice(1)) h[l.slice(0, l.indexOf(':')).toLowerCase()] = l.slice(l.indexOf(':') + 1).trim();
      let body = all.subarray(end + 4);
      if (h['content-length'] !== undefined) body = body.subarray(0, Number(h['content-length']));
      resolve({ status: Number(lines[0].split(' ')[1]), headers: h, body });
    });
    const head = [`${c.method} ${c.path} HTTP/1.1`, 'host: 127.0.0.1', 'connection: close', ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`)];
    if (c.body) head.push(`content-length: ${c.body.length}`);
    s.write(Buffer.concat([Buffer.from(head.join('\r\n') + '\r\n\r\n', 'latin1'), c.body ?? Buffer.alloc(0)]));
  });
}

// ---------------------------------------------------------------------------------------------
// The property

const MESSAGES_TYPES_BY_STATUS = new Map<number, Set<string>>();
for (const spec of Object.values(CATALOGUE)) {
  if (!MESSAGES_TYPES_BY_STATUS.has(spec.status)) MESSAGES_TYPES_BY_STATUS.set(spec.status, new Set());
  MESSAGES_TYPES_BY_STATUS.get(spec.status)!.add(spec.messagesType);
}

function expectedDialect(path: string, headers: Record<string, string>): Dialect {
  if (ROUTE_DIALECT[path]) return ROUTE_DIALECT[path];
  if (path.startsWith('/v1/responses')) return 'responses';
  return path.startsWith('/v1/messages') || headers['anthropic-version'] !== undefined ? 'messages' : 'chat';
}

/** Why an answer breaks the property, or undefined. */
function violation(c: Case, headers: Record<string, string>, a: Answer): string | undefined {
  if (!(a.status >= 100 && a.status < 600)) return `status ${a.status}`;
  const q = c.path.indexOf('?');
  const path = q === -1 ? c.path : c.path.slice(0, q);
  if (!path.startsWith('/v1/') || a.status < 400) return undefined;
  if (!String(a.headers['content-type'] ?? '').includes('application/json')) return undefined; // the parser's plain 400/431
  if (c.method === 'HEAD') return undefined;
  let body: any;
  try {
    body = JSON.parse(a.body.toString('utf8'));
  } catch {
    return `a JSON ${a.status} that does not parse: ${a.body.toString('utf8').slice(0, 80)}`;
  }
  if (a.headers['x-sluice-request-id'] !== undefined) {
    // Passed through from the upstream: the sim's own shapes (chat or messages).
    const simChat = body?.error && typeof body.error.message === 'string' && typeof body.error.code === 'number';
    const simMessages = body?.type === 'error' && typeof body.error?.type === 'string' && typeof body.error?.message === 'string';
    return simChat || simMessages ? undefined : `an upstream ${a.status} in neither of the sim's shapes`;
  }
  const dialect = expectedDialect(path, headers);
  if (dialect !== 'messages') { // chat and responses share the envelope
    const e = body?.error;
    if (!e || Object.keys(body).length !== 1) return `not a chat error body: ${JSON.stringify(body).slice(0, 100)}`;
    if (Object.keys(e).sort().join() !== 'code,message,param,type' || e.param !== null || typeof e.message !== 'string') return `chat error fields: ${JSON.stringify(e).slice(0, 100)}`;
    const spec = CATALOGUE[e.code as ErrorCode];
    if (!spec) return `chat code not in the catalogue: ${e.code}`;
    if (e.code === 'internal') return 'an internal error was rendered';
    if (spec.status !== a.status || spec.chatType !== e.type) return `${dialect} ${e.code} with status ${a.status} type ${e.type}`;
    return undefined;
  }
  if (body?.type !== 'error' || Object.keys(body).sort().join() !== 'error,type') return `not a messages error body: ${JSON.stringify(body).slice(0, 100)}`;
  const e = body.error;
  if (Object.keys(e ?? {}).sort().join() !== 'message,type' || typeof e.message !== 'string') return `messages error fields: ${JSON.stringify(e).slice(0, 100)}`;
  if (a.status === 500) return 'an internal error was rendered';
  if (!MESSAGES_TYPES_BY_STATUS.get(a.status)?.has(e.type)) return `messages type ${e.type} with status ${a.status}`;
  return undefined;
}

t.test(`fuzz: ${CASES} hostile requests, seed ${SEED} (replay: same seed, the failing index)`, async (t) => {
  // A front proxy on loopback: each case's X-Forwarded-For is its client address (no case nears the IP block).
  const { h, key, port } = await roomyHarness(t, { env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } });
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  t.teardown(() => agent.destroy());

  const all = fc.sample(cases, { seed: SEED, numRuns: CASES });
  const failures: string[] = [];
  const statuses = new Map<number, number>();
  const kinds = new Map<string, number>();
  let raw = 0;
  let next = 0;

  async function one(i: number): Promise<void> {
    const c = all[i];
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(c.headers)) if (v !== undefined) headers[k] = v.replaceAll('$KEY', key);
    // Each case gets its own client address, so auth failures do not block the others (unless the
    // case sends its own X-Forwarded-For).
    headers['x-forwarded-for'] ??= `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;
    const viaRaw = !/^[\x21-\xff]+$/.test(c.path) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(c.method) || !Object.values(headers).every(validHeaderValue);
    if (viaRaw) raw++;
    kinds.set(c.kind, (kinds.get(c.kind) ?? 0) + 1);
    const describe = () => `#${i} ${c.kind} ${c.method} ${c.path.slice(0, 80)} headers=${JSON.stringify(headers).slice(0, 200)} body=${Buffer.from(c.body ?? []).toString('utf8').slice(0, 200)}`;
    try {
      const a = viaRaw ? await sendRaw(port, c, headers) : await sendHttp(agent, port, c, headers);
      statuses.set(a.status, (statuses.get(a.status) ?? 0) + 1);
      const why = violation(c, headers, a);
      if (why) failures.push(`${why} — ${describe()}`);
    } catch (err) {
      failures.push(`no answer: ${(err as Error).message} — ${describe()}`);
    }
  }

  const started = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < all.length) await one(next++);
  }));
  const seconds = ((performance.now() - started) / 1000).toFixed(1);

  t.comment(`cases tried: ${all.length} (${raw} over raw sockets) in ${seconds} s; seed ${SEED}`);
  t.comment(`kinds: ${JSON.stringify(Object.fromEntries(kinds))}`);
  t.comment(`statuses: ${JSON.stringify(Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])))}`);
  t.equal(all.length, CASES, 'every generated case was sent');
  t.same(failures.slice(0, 20), [], `no case broke the property (${failures.length} did)`);
  const inside = h.logs.filter((l) => l.msg === 'request failed inside the gateway');
  t.same(inside.map((l) => l.err), [], 'nothing failed inside the gateway');

  // Still serving: a valid request in each dialect, from a fresh address.
  for (const [path, headers, body] of [
    ['/v1/chat/completions', { authorization: `Bearer ${key}` }, { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }],
    ['/v1/messages', { 'x-api-key': key, 'anthropic-version': '2023-06-01' }, { model: 'claude-sonnet-4-5', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }],
    ['/v1/responses', { authorization: `Bearer ${key}`, 'session-id': 'after-the-run' }, { model: 'sluice/fast', input: 'hi', store: false }],
  ] as const) {
    const res = await fetch(`${h.url}${path}`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json', 'x-forwarded-for': '192.0.2.1' }, body: JSON.stringify(body) });
    t.equal(res.status, 200, `${path} still serves after the run`);
    await res.arrayBuffer();
  }
});
