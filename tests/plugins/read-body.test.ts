// readBody on fake requests (a PassThrough with headers): the 32 MiB limit, declared and counted;
// the body timeout; a client that leaves before or during the body; bodies that are not a JSON
// object with a usable string `model`, or that nest too deep; and what a good body fills in
// (raw, body, model, stream, end user, session). No server: the plugin runs on a hand-made context.

import { PassThrough } from 'node:stream';
import t from 'tap';
import type { ReadCtx } from '../../lib/context.ts';
import { Admission } from '../../lib/admission.ts';
import { GatewayError } from '../../lib/errors.ts';
import { bodyChanged } from '../../lib/request-body.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { Intake } from '../../lib/intake.ts';
import { BODY_LIMITS, MAX_BODY_BYTES, MAX_DEPTH, readBody } from '../../plugins/read-body.ts';

const MiB = 1024 * 1024;

interface FakeReq extends PassThrough {
  headers: Record<string, string>;
  complete: boolean;
}

function fakeReq(headers: Record<string, string> = {}): FakeReq {
  const req = new PassThrough() as FakeReq;
  req.headers = headers;
  req.complete = false;
  req.on('end', () => (req.complete = true));
  return req;
}

function ctxFor(req: FakeReq, dialect: 'chat' | 'messages' = 'chat'): ReadCtx {
  return {
    id: 'test', req: req as unknown as ReadCtx['req'], res: {} as ReadCtx['res'], route: dialect, dialect, t0: 0, ip: '127.0.0.1',
    stream: false, endUser: null, session: null, run: null, requestedModel: null, tier: null, model: null,
    degradation: 'none', budget: null, removed: [], adjusted: [],
    key: { row: { id: 1 }, allow: undefined }, profile: { rate_limits: { per_key_per_minute: 60, per_user_per_minute: 10 } },
  } as unknown as ReadCtx;
}

const counters = new MemoryCounters();
t.teardown(() => counters.close());
/** The admission unit over these counters, with room for bodies as `intake` gives it (the budget's spend read is not used here). */
function admissionWith(intake = new Intake()): Admission {
  return new Admission({ counters, budget: { spendKeys: () => ['', ''], observe: () => {} }, intake });
}
const admission = admissionWith();

/** The plugin's run as a promise (run() may return void for synchronous plugins; this one never does). */
function start(req: FakeReq, timeoutMs: number, dialect: 'chat' | 'messages' = 'chat', ctx = ctxFor(req, dialect)): Promise<void> {
  return Promise.resolve(readBody({ admission }, { timeoutMs }).run(ctx));
}

/** Runs the plugin on a request that sends `body` in the given pieces and ends. */
async function run(body: string | Buffer | Array<string | Buffer>, opts: { headers?: Record<string, string>; dialect?: 'chat' | 'messages'; timeoutMs?: number } = {}): Promise<ReadCtx> {
  const req = fakeReq(opts.headers);
  const ctx = ctxFor(req, opts.dialect);
  const pending = start(req, opts.timeoutMs ?? 5_000, opts.dialect, ctx);
  for (const piece of Array.isArray(body) ? body : [body]) req.write(piece);
  req.end();
  await pending;
  return ctx;
}

function nested(depth: number): string {
  return '['.repeat(depth) + ']'.repeat(depth);
}

t.test('a good body fills in the context', async (t) => {
  const raw = JSON.stringify({ model: 'sluice/fast', stream: true, user: 'alice', messages: [{ role: 'user', content: 'hi' }] });
  const ctx = await run(raw, { headers: { 'x-sluice-session': 's1' } });
  t.same(ctx.raw, Buffer.from(raw), 'raw is the bytes received');
  t.same(ctx.body, JSON.parse(raw));
  t.equal(ctx.requestedModel, 'sluice/fast');
  t.equal(ctx.stream, true);
  t.equal(ctx.endUser, 'alice');
  t.equal(ctx.session, 's1');
  t.equal(bodyChanged(ctx.body!), false, 'reading never changes the body');

  const m = await run(JSON.stringify({ model: 'claude-sonnet-4-5', stream: 'yes', metadata: { user_id: 'bob' } }), { dialect: 'messages' });
  t.equal(m.stream, false, 'only stream === true streams');
  t.equal(m.endUser, 'bob', 'messages: metadata.user_id');
});

t.test('a body cut anywhere, even inside a UTF-8 character, reassembles', async (t) => {
  const raw = Buffer.from(JSON.stringify({ model: 'x/y', messages: [{ role: 'user', content: 'æøå 模型 😀' }] }));
  const pieces = [...raw].map((b) => Buffer.from([b])); // one byte per chunk
  const ctx = await run(pieces);
  t.equal(ctx.body!.messages[0].content, 'æøå 模型 😀');
  t.same(ctx.raw, raw);
});

t.test('size limits', async (t) => {
  await t.test('a declared length over 32 MiB is refused before anything is read', async (t) => {
    const req = fakeReq({ 'content-length': String(MAX_BODY_BYTES + 1) });
    req.write('{"model":"x"}');
    await t.rejects(start(req, 5_000), { code: 'request_too_large', status: 413 });
    t.equal(req.listenerCount('data'), 0, 'no reader was attached');
    t.equal(req.readableLength, 13, 'the bytes sent are still unread');
  });

  await t.test('an undeclared body is counted and refused once past 32 MiB; reading stops', async (t) => {
    const req = fakeReq();
    const pending = start(req, 5_000);
    const refused = t.rejects(pending, { code: 'request_too_large', status: 413 });
    const mib = Buffer.alloc(MiB, 0x20);
    for (let i = 0; i < 33; i++) req.write(mib);
    await refused;
    t.ok(req.isPaused(), 'the request is paused');
    t.equal(req.listenerCount('data') + req.listenerCount('end') + req.listenerCount('close'), 1, 'only the fake\'s own end listener is left');
  });

  await t.test('exactly 32 MiB is accepted', async (t) => {
    const head = '{"model":"x/y","pad":"';
    const tail = '"}';
    const raw = Buffer.concat([Buffer.from(head), Buffer.alloc(MAX_BODY_BYTES - head.length - tail.length, 0x61), Buffer.from(tail)]);
    t.equal(raw.length, MAX_BODY_BYTES);
    const ctx = await run([raw.subarray(0, MiB), raw.subarray(MiB)], { headers: { 'content-length': String(MAX_BODY_BYTES) } });
    t.equal(ctx.raw!.length, MAX_BODY_BYTES);
    t.equal(ctx.requestedModel, 'x/y');
  });
});

t.test('a body that stalls answers 408 after the timeout', async (t) => {
  const req = fakeReq();
  const pending = start(req, 50);
  req.write('{"model":"x/y",');
  await t.rejects(pending, { code: 'body_timeout', status: 408 });
  t.equal(req.listenerCount('data'), 0, 'the reader is detached');
});

t.test('a client that leaves', { timeout: 5_000 }, async (t) => {
  await t.test('mid-body: rejected at once, not a GatewayError (nothing to answer)', async (t) => {
    const req = fakeReq();
    const pending = start(req, 60_000);
    req.write('{"model":');
    req.destroy();
    const err = await pending.then(() => undefined, (e: unknown) => e);
    t.ok(err instanceof Error && !(err instanceof GatewayError), 'a plain error, so the server answers nothing');
  });

  await t.test('with an error (aborted)', async (t) => {
    const req = fakeReq();
    const pending = start(req, 60_000);
    req.write('{"model":');
    req.destroy(Object.assign(new Error('aborted'), { code: 'ECONNRESET' }));
    await t.rejects(pending, { message: 'aborted' });
  });

  await t.test('before the plugin ran (while earlier checks awaited): rejected at once, not at the timeout', async (t) => {
    const req = fakeReq();
    req.write('{"model":');
    req.destroy();
    await new Promise((r) => req.once('close', r));
    const err = await start(req, 60_000).then(() => undefined, (e: unknown) => e);
    t.ok(err instanceof Error && !(err instanceof GatewayError), 'refused at once');
  });
});

t.test('bodies that are not a JSON object with a usable model: 400 invalid_body', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['malformed', '{"model":', /not valid JSON/],
    ['empty', '', /not valid JSON/],
    ['byte-order mark', '\uFEFF{"model":"x/y"}', /not valid JSON/],
    ['array', '[{"model":"x/y"}]', /JSON object/],
    ['number', '42', /JSON object/],
    ['string', '"x/y"', /JSON object/],
    ['null', 'null', /JSON object/],
    ['boolean', 'false', /JSON object/],
    ['no model', '{"messages":[]}', /name a `model`/],
    ['model number', '{"model":1}', /name a `model`/],
    ['model array', '{"model":["x/y"]}', /name a `model`/],
    ['model object', '{"model":{}}', /name a `model`/],
    ['model empty', '{"model":""}', /name a `model`/],
    ['model with a space', '{"model":"gpt 5"}', /printable ASCII/],
    ['model with a newline', '{"model":"a\\nb"}', /printable ASCII/],
    ['model with a tab', '{"model":"a\\tb"}', /printable ASCII/],
    ['model with DEL', '{"model":"a\\u007fb"}', /printable ASCII/],
    ['model with latin-1', '{"model":"caf\\u00e9"}', /printable ASCII/],
    ['model beyond latin-1', '{"model":"模型"}', /printable ASCII/],
    ['model of 257 characters', JSON.stringify({ model: 'a'.repeat(257) }), /printable ASCII/],
  ];
  for (const [name, raw, message] of cases) {
    await t.rejects(run(raw), { code: 'invalid_body', status: 400, message }, name);
  }
  for (const model of ['openai/gpt-5:online', '~anthropic/claude-sonnet-latest', 'a'.repeat(256), 'sluice/auto', 'x']) {
    t.equal((await run(JSON.stringify({ model }))).requestedModel, model, `model ${model.slice(0, 40)} is accepted`);
  }
});

t.test('nesting deeper than MAX_DEPTH is refused; up to it passes', async (t) => {
  // The root object is level 1: N arrays inside it reach level N + 1.
  const at = (levels: number) => `{"model":"x/y","a":${nested(levels - 1)}}`;
  t.equal((await run(at(MAX_DEPTH))).requestedModel, 'x/y', `${MAX_DEPTH} levels pass`);
  await t.rejects(run(at(MAX_DEPTH + 1)), { code: 'invalid_body', message: /deeper than 512/ }, `${MAX_DEPTH + 1} levels are refused`);
  await t.rejects(run(`{"model":"x/y","a":${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}}`), { code: 'invalid_body' }, '100 000 nested objects');
  await t.rejects(run(`{"model":"x/y","a":${nested(100_000)}}`), { code: 'invalid_body' }, '100 000 nested arrays');
});


t.test('count bounds: too many values, or an object with too many members, is a 400 naming the bound', async (t) => {
  const values = `{"model":"x/y","a":[${'0,'.repeat(BODY_LIMITS.values)}0]}`;
  await t.rejects(run(values), { code: 'invalid_body', status: 400, message: /more than 250,000 JSON values/ });
  const members = `{"model":"x/y","metadata":{${Array.from({ length: BODY_LIMITS.objectMembers + 1 }, (_, i) => `"k${i}":0`).join(',')}}}`;
  await t.rejects(run(members), { code: 'invalid_body', status: 400, message: /more than 1,000 members/ });
  const top = `{"model":"x/y",${Array.from({ length: BODY_LIMITS.objectMembers }, (_, i) => `"k${i}":0`).join(',')}}`;
  await t.rejects(run(top), { code: 'invalid_body', message: /more than 1,000 members/ }, 'the root object counts its members too');
  const fits = `{"model":"x/y","a":[${'0,'.repeat(BODY_LIMITS.values - 4)}0]}`;
  t.equal((await run(fits)).requestedModel, 'x/y', 'up to the bound passes');
});

t.test('a member named twice makes the body changed, so it is sent once', async (t) => {
  const ctx = await run('{"model":"x/y","max_tokens":5,"max_tokens":5}');
  t.equal(bodyChanged(ctx.body!), true);
  t.equal(ctx.body!.max_tokens, 5);
});

t.test("a key's bodies arriving at once are bounded before they are read", async (t) => {
  const small = new Intake({ perKeyBytes: 1000, totalBytes: 3000 });
  const go = (req: FakeReq, keyId = 1, perMinute = 60) => {
    const ctx = ctxFor(req);
    (ctx.key!.row as { id: number }).id = keyId;
    (ctx.profile as { rate_limits: { per_key_per_minute: number } }).rate_limits.per_key_per_minute = perMinute;
    return Promise.resolve(readBody({ admission: admissionWith(small) }, { timeoutMs: 5_000 }).run(ctx));
  };
  const declared = fakeReq({ 'content-length': '1001' });
  declared.write('{"model":"x"}');
  await t.rejects(go(declared), { code: 'rate_limit_exceeded', status: 429, message: 'The request bodies of this key arriving at once pass 1000 bytes.' }, 'a declared length past the key\'s room');
  t.equal(declared.readableLength, 13, 'nothing of it was read');
  t.equal(small.bytes, 0, 'and nothing stays reserved');

  const chunked = fakeReq();
  const refused = t.rejects(go(chunked), { code: 'rate_limit_exceeded' }, 'an undeclared body refused once past the room');
  chunked.write(`{"model":"x/y","pad":"${'a'.repeat(990)}`);
  await refused;
  t.equal(small.bytes, 0);

  const first = fakeReq();
  const pending = go(first, 2, 1);
  first.write('{"model":"x/y",');
  await t.rejects(go(fakeReq(), 2, 1), { code: 'rate_limit_exceeded', message: /limit of 1 a minute/ }, 'more bodies at once than the key\'s limit');
  const other = fakeReq();
  const otherDone = go(other, 3, 1);
  other.end('{"model":"x/y"}');
  await otherDone;
  first.end('"a":1}');
  await pending;
  t.equal(small.bytes, 0, 'each read gives its room back');

  const keys = [10, 11, 12].map((id) => {
    const req = fakeReq({ 'content-length': '1000' });
    return { req, done: go(req, id) };
  });
  await t.rejects(go(fakeReq({ 'content-length': '1' }), 13), { code: 'rate_limit_exceeded', message: 'The gateway is receiving 3000 bytes of request bodies at once; retry shortly.' }, 'the process bound holds across keys');
  for (const { req, done } of keys) {
    req.end(`{"model":"x/y","pad":"${'a'.repeat(1000 - 24)}"}`);
    await done;
  }
  t.equal(small.bytes, 0);
});

t.test('a body that never completes counts toward its key\'s window', async (t) => {
  const req = fakeReq();
  const ctx = ctxFor(req);
  (ctx.key!.row as { id: number }).id = 77;
  const limits = { per_key_per_minute: 1, per_user_per_minute: 1 };
  (ctx.profile as { rate_limits: typeof limits }).rate_limits = limits;
  const pending = Promise.resolve(readBody({ admission }, { timeoutMs: 5_000 }).run(ctx));
  t.equal(admission.keyFullHere(77, limits), false);
  req.write('{"model":');
  req.destroy();
  await t.rejects(pending);
  await new Promise((resolve) => setImmediate(resolve)); // the memory counters' consume settles in this turn
  t.equal(admission.keyFullHere(77, limits), true, 'the abandoned body filled the window of one');
});
