// The JSON byte scanner and splicer (lib/json-scan.ts) and the body object built on them
// (lib/request-body.ts): the scan accepts exactly what JSON.parse accepts (hand-picked edge cases,
// then property tests over random JSON and random corruptions of it), locates the root members
// and the indexed array entries where they are, measures depth; a spliced body parses to the same
// value as the same changes applied to JSON.parse's result; an untouched body is not rebuilt.

import fc from 'fast-check';
import t from 'tap';
import { INDEX_STRIDE, parseRange, scanJson, splice } from '../../lib/json-scan.ts';
import { bodyChanged, bodyFromScan, encodeBody, someEntryHas, someEntryWith } from '../../lib/request-body.ts';

/** The entry members the gateway indexes (plugins/read-body.ts), and two more. */
const ENTRY_KEYS = ['role', 'type', 'strict', 'defer_loading', 'content'];
const scan = (text: string | Buffer, maxDepth = 512, watch?: string[]) =>
  scanJson(Buffer.isBuffer(text) ? text : Buffer.from(text), { maxDepth, watch: watch && new Set(watch), entryKeys: ENTRY_KEYS });

function parses(text: string | Buffer): boolean {
  try {
    JSON.parse(Buffer.isBuffer(text) ? text.toString('utf8') : text);
    return true;
  } catch {
    return false;
  }
}

/** A body object from text, as read-body builds it. */
function body(text: string, watch = ['messages', 'tools']) {
  const raw = Buffer.from(text);
  const s = scanJson(raw, { maxDepth: 512, watch: new Set(watch), entryKeys: ENTRY_KEYS })!;
  return bodyFromScan(raw, s);
}

t.test('accepts and rejects what JSON.parse does: edge cases', async (t) => {
  const cases = [
    '{}', '[]', '0', '-0', '1.5e-3', '-1E+10', '"x"', 'true', 'false', 'null', ' \t\r\n{} \n', '{"a":[1,{"b":null}]}',
    '"\\u00e9\\ud83d\\ude00"', '"\\ud800"', '"\\/\\b\\f\\n\\r\\t\\"\\\\"', '{"a":1,"a":2}', '"模型 😀"', '{"__proto__":1}',
    '', ' ', '{', '}', '[1,]', '{"a":1,}', '{,}', '[,1]', '01', '-', '1.', '.5', '1e', '1e+', '+1', 'NaN', 'Infinity', 'tru', 'nul', 'falsey',
    '"a', '"\\x"', '"\\u12"', '"\\u12G4"', '"a\tb"', '"a\nb"', '"\u0000"', '{"a" 1}', '{"a":}', '{1:2}', "{'a':1}", '[1 2]', '{"a":1 "b":2}',
    '\uFEFF{}', '{}{}', '{} x', '[1]]', '[[1]', '{"a":{"b":1}', '"\u007f"', '"\u2028"', '\u00a0{}', '{"a":1}\u0000',
  ];
  // (U+2028 in a message would break the TAP line: shown escaped.)
  for (const c of cases) t.equal(scan(c) !== undefined, parses(c), JSON.stringify(c).replace(/\u2028/g, '\\u2028'));
  // Bytes that are not UTF-8: inside a string JSON.parse sees U+FFFD and accepts; outside, both refuse.
  const bad = Buffer.from([0x22, 0xff, 0xc3, 0x22]);
  t.equal(scan(bad) !== undefined, parses(bad), 'invalid UTF-8 inside a string');
  const outside = Buffer.from([0x5b, 0xff, 0x5d]);
  t.equal(scan(outside) !== undefined, parses(outside), 'invalid UTF-8 outside a string');
});

t.test('root kinds, members with their byte ranges, duplicates kept in order', async (t) => {
  t.equal(scan('[1]')!.root, 'array');
  t.equal(scan('"x"')!.root, 'scalar');
  const text = ' { "model" : "x/y" ,"n":1, "o":{"a":[1,2]} ,"model":"z"} ';
  const s = scan(text)!;
  t.equal(s.root, 'object');
  t.same(s.members.map((m) => m.key), ['model', 'n', 'o', 'model']);
  t.same(s.members.map((m) => text.slice(m.valueStart, m.valueEnd)), ['"x/y"', '1', '{"a":[1,2]}', '"z"']);
  t.same(s.members.map((m) => text[m.start]), ['"', '"', '"', '"'], 'a member starts at its key\'s quote');
  const escaped = scan('{"m\\u006fdel":1,"é":2}')!;
  t.same(escaped.members.map((m) => m.key), ['model', 'é'], 'keys are decoded');
});

t.test('depth: the root is level 1; deeper than maxDepth is flagged, not refused', async (t) => {
  const at = (levels: number) => `{"a":${'['.repeat(levels - 1)}${']'.repeat(levels - 1)}}`;
  t.equal(scan(at(5), 5)!.tooDeep, false);
  t.equal(scan(at(6), 5)!.tooDeep, true);
  t.equal(scan('{"a":1}', 1)!.tooDeep, false);
  t.equal(scan(`[${'{"a":'.repeat(100_000)}1${'}'.repeat(100_000)}]`, 512)!.tooDeep, true, '100 000 levels, no stack overflow');
  t.equal(scan(`[${'['.repeat(100_000)}`, 512), undefined, 'unclosed deep nesting is invalid');
});

t.test('watched arrays: the members of object entries are indexed with their entry, nothing else', async (t) => {
  const text = '{"messages":[{"role":"user","content":[{"role":"system"}]},"x",[1],{"role":"system","role":"user"},{}],"other":[{"role":"system"}]}';
  const s = scan(text, 512, ['messages', 'other-not'])!;
  const [messages, other] = s.members;
  t.equal(other!.index, undefined, 'an unwatched array has no index');
  const index = messages!.index!;
  const rows = [];
  for (let i = 0; i < index.length; i += INDEX_STRIDE) rows.push([index[i], s.entryKeys[index[i + 1]!], text.slice(index[i + 2], index[i + 3])]);
  t.same(rows, [[0, 'role', '"user"'], [0, 'content', '[{"role":"system"}]'], [3, 'role', '"system"'], [3, 'role', '"user"']]);
  t.equal(scan('{"messages":{"role":"system"}}', 512, ['messages'])!.members[0]!.index, undefined, 'a watched name holding no array');
  const only = scanJson(Buffer.from(text), { maxDepth: 512, watch: new Set(['messages']), entryKeys: ['content'] })!;
  const content = text.indexOf('[{"role":"system"}]');
  t.same(only.members[0]!.index, [0, 0, content, content + 19], 'entryKeys: only the keys asked for');
  const escaped = scanJson(Buffer.from('{"m":[{"r\\u006fle":"system","tÿpe":1,"x":2}]}'), { maxDepth: 512, watch: new Set(['m']), entryKeys: ['x', 'tÿpe', 'role'] })!;
  t.same(escaped.members[0]!.index!.filter((_, i) => i % INDEX_STRIDE === 1), [2, 1, 0], 'an escaped or non-ASCII key is decoded before it is compared');
});

t.test('parseRange decodes each kind of value', async (t) => {
  const text = '["a\\"b",true,false,null,-1.5e2,{"x":[1]},"é"]';
  const raw = Buffer.from(text);
  const values = JSON.parse(text) as unknown[];
  const obj = Buffer.from(`{${values.map((v, i) => `"${i}":${JSON.stringify(v)}`).join(',')}}`);
  t.same(scan(obj)!.members.map((m) => parseRange(obj, m.valueStart, m.valueEnd)), values);
  t.same(parseRange(raw, 0, raw.length), values);
});

t.test('count bounds: past the values or one object\'s members, the scan stops and says which', async (t) => {
  const limits = { values: 10, objectMembers: 3 };
  const go = (text: string) => scanJson(Buffer.from(text), { maxDepth: 512, limits });
  t.equal(go('{"a":[1,2,3,4,5,6,7,8]}')!.overLimit, undefined, '10 values pass');
  t.equal(go('{"a":[1,2,3,4,5,6,7,8,9]}')!.overLimit, 'values', 'the 11th value is over');
  t.equal(go('{"a":1,"b":2,"c":{"x":1,"y":2,"z":3}}')!.overLimit, undefined, '3 members in each object pass');
  t.equal(go('{"a":1,"b":{"x":1,"y":2,"z":3,"w":4}}')!.overLimit, 'objectMembers', 'a nested object with 4');
  t.equal(go('{"a":1,"a":2,"a":3,"a":4}')!.overLimit, 'objectMembers', 'duplicates count');
  t.equal(go('{"a":1,"b":2,"c":'), undefined, 'invalid text that ends before the bound is still invalid');
});

t.test('splice: keep, drop, replace, append', async (t) => {
  const raw = Buffer.from('{ "a":1, "b" : "keep  me", "c":[1, 2] }');
  const s = scan(raw)!;
  const parts = splice(raw, s.members, (m) => (m.key === 'a' ? { text: '2' } : m.key === 'c' ? { drop: true } : { keep: true }), [['d', '{"e":null}']]);
  t.equal(Buffer.concat(parts).toString(), '{"a":2,"b" : "keep  me","d":{"e":null}}');
  const kept = parts.find((p) => p.toString() === '"b" : "keep  me"')!;
  t.equal(kept.buffer, raw.buffer, 'a kept member is a view of the bytes received, not a copy');
  t.same(JSON.parse(Buffer.concat(splice(raw, s.members, () => ({ drop: true }), [])).toString()), {});
});

t.test('the body object: small members decoded, large ones on first read, JSON.parse equal', async (t) => {
  const big = 'x'.repeat(2000);
  const text = JSON.stringify({ model: 'm', stream: true, n: -0, messages: [{ role: 'user', content: big }], system: big, __proto__x: 1 });
  const b = body(text);
  t.equal(b.model, 'm');
  t.equal(Object.getOwnPropertyDescriptor(b, 'messages')!.get !== undefined, true, 'a large member is not decoded yet');
  t.same(b, JSON.parse(text), 'deep-equal to JSON.parse');
  t.same(Object.keys(b), Object.keys(JSON.parse(text)), 'the same key order');
  const proto = body('{"__proto__":{"x":1},"model":"m"}');
  t.same(Object.keys(proto), ['__proto__', 'model'], '__proto__ is an own member, as in JSON.parse');
  t.equal(Object.getPrototypeOf(proto), Object.prototype);
  const dup = body('{"a":1,"b":2,"a":3}');
  t.same(Object.keys(dup), ['a', 'b']);
  t.equal(dup.a, 3, 'the last duplicate wins');
});

t.test('lazy members of every body share one getter and setter per name (one hidden class, not one per body)', async (t) => {
  const big = JSON.stringify('y'.repeat(1000));
  const a = body(`{"model":"a","messages":${big}}`);
  const b = body(`{"model":"b","messages":${big}}`);
  const da = Object.getOwnPropertyDescriptor(a, 'messages')!;
  const db = Object.getOwnPropertyDescriptor(b, 'messages')!;
  t.equal(da.get, db.get, 'the same getter');
  t.equal(da.set, db.set, 'the same setter');
  t.equal(a.messages, 'y'.repeat(1000), 'each finds its own body through `this`');
  t.equal(Object.getOwnPropertyDescriptor(a, 'messages')!.value, 'y'.repeat(1000), 'a data property once read');
  t.equal(Object.getOwnPropertyDescriptor(b, 'messages')!.get, db.get, 'the other body is not touched');
  b.messages = 'set';
  t.equal(b.messages, 'set');
  t.same(JSON.parse(Buffer.concat(encodeBody(b)).toString()), { model: 'b', messages: 'set' });
  // Past the shared names, a name gets a pair of its own and behaves the same.
  const many = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`k${i}`, 'z'.repeat(600)]));
  const m = body(JSON.stringify(many));
  t.equal(m.k299, 'z'.repeat(600));
  t.same(m, many, 'deep-equal to what JSON.parse gives');
});

t.test('encodeBody: untouched members keep their bytes; changes are spliced', async (t) => {
  const big = JSON.stringify({ role: 'user', content: 'é "quoted" \\ '.repeat(100) });
  const text = `{"model":"sluice/fast", "messages":[${big}], "max_tokens":99999,"a":1,"a":2,"meta":{"k":1}}`;
  const b = body(text);
  t.equal(Buffer.concat(encodeBody(b)).toString(), text.replace(', "messages"', ',"messages"').replace(', "max_tokens"', ',"max_tokens"').replace('"a":1,', ''),
    'nothing changed: every member as it was, a name given twice sent once with its last value');
  const twice = body('{"model":"m","max_tokens":5,"model":"m"}');
  t.equal(Buffer.concat(encodeBody(twice)).toString(), '{"max_tokens":5,"model":"m"}', 'an unchanged duplicate is sent once too');
  b.model = 'google/gemini-2.5-flash';
  b.max_tokens = 2048;
  b.models = ['x/y'];
  delete b.a;
  b.meta = { ...b.meta, k: 2 }; // a new value (plugins never change a decoded one in place)
  const out = Buffer.concat(encodeBody(b));
  t.ok(out.includes(Buffer.from(`"messages":[${big}]`)), 'the large member is copied byte for byte');
  t.same(JSON.parse(out.toString()), { model: 'google/gemini-2.5-flash', messages: [JSON.parse(big)], max_tokens: 2048, meta: { k: 2 }, models: ['x/y'] });
  const c = body('{"a":1,"a":2}');
  c.a = 5;
  t.same(JSON.parse(Buffer.concat(encodeBody(c)).toString()), { a: 5 }, 'a changed duplicate: the last carries the value');
  const u = body('{"a":1,"b":2}');
  u.b = undefined;
  u.c = () => 1;
  t.same(JSON.parse(Buffer.concat(encodeBody(u)).toString()), { a: 1 }, 'undefined and functions drop, as JSON.stringify drops them');
  t.equal(Buffer.concat(encodeBody({ plain: true })).toString(), '{"plain":true}', 'a plain object is stringified');
  const lazy = body(`{"messages":[${big}],"model":"m"}`);
  t.equal(lazy.messages.length, 1, 'read (decoded) but not changed');
  lazy.model = 'n';
  t.same(JSON.parse(Buffer.concat(encodeBody(lazy)).toString()), { messages: [JSON.parse(big)], model: 'n' });
});

t.test('bodyChanged: from the members alone, with no flag to set', async (t) => {
  const text = '{"model":"m", "meta":{ "k" :1}, "messages":[' + JSON.stringify({ role: 'user', content: 'x'.repeat(600) }) + ']}';
  const fresh = () => body(text);
  t.equal(bodyChanged(fresh()), false, 'as read');
  const read = fresh();
  t.equal(read.meta.k, 1);
  t.equal(read.messages.length, 1);
  t.equal(bodyChanged(read), false, 'members read, small and large, are not changes');
  const same = fresh();
  same.model = 'm';
  t.equal(bodyChanged(same), false, 'a scalar assigned its own value');
  const cases: Array<[string, (b: Record<string, any>) => void]> = [
    ['a scalar assigned', (b) => { b.model = 'n'; }],
    ['an object replaced by an equal copy', (b) => { b.meta = { ...b.meta }; }],
    ['a lazy member assigned', (b) => { b.messages = []; }],
    ['a member deleted', (b) => { delete b.meta; }],
    ['a member added', (b) => { b.max_tokens = 5; }],
    ['a member set to undefined', (b) => { b.meta = undefined; }],
  ];
  for (const [what, change] of cases) {
    const b = fresh();
    change(b);
    t.equal(bodyChanged(b), true, what);
  }
  t.equal(bodyChanged(body('{"a":1,"a":1}')), true, 'a name given twice: sent once, so changed');
  t.equal(bodyChanged({ model: 'm' }), true, 'a body not read from bytes');
  const kept = fresh();
  kept.model = 'n';
  t.ok(Buffer.concat(encodeBody(kept)).includes(Buffer.from('"meta":{ "k" :1}')), 'an object member still holding its decoded value keeps its bytes');
});

t.test('someEntryHas / someEntryWith on scanned and plain bodies agree', async (t) => {
  const pad = 'p'.repeat(600);
  const texts = [
    { tools: [{ name: 'a', strict: true, pad }], messages: [{ role: 'user', content: pad }, { role: 'system', content: 'x' }] },
    { tools: [{ name: 'a', pad }, 'x', [{ strict: 1 }], null], messages: [{ role: 'user', content: [{ role: 'system' }], pad }, 'system', ['system']] },
    { tools: [{ defer_loading: false }], messages: [{ role: 'system', role2: 1 }] },
    { tools: { strict: true }, messages: 'system' },
    { messages: [{ role: 'sys\u0074em', pad }] },
    {},
  ];
  for (const o of texts) {
    const text = JSON.stringify(o);
    const scanned = body(text);
    const plain = JSON.parse(text);
    const has = someEntryHas(plain, 'tools', ['strict', 'defer_loading']);
    const sys = someEntryWith(plain, 'messages', 'role', 'system');
    t.equal(someEntryHas(scanned, 'tools', ['strict', 'defer_loading']), has, `tools: ${text.slice(0, 60)}`);
    t.equal(someEntryWith(scanned, 'messages', 'role', 'system'), sys, `messages: ${text.slice(0, 60)}`);
    t.equal(Object.getOwnPropertyDescriptor(scanned, 'messages')?.get !== undefined || text.length < 600, true, 'the check decoded nothing');
  }
  const dup = body(`{"messages":[{"role":"system","role":"user","pad":"${pad}"}]}`);
  t.equal(someEntryWith(dup, 'messages', 'role', 'system'), false, 'the last duplicate key counts');
  const replaced = body(`{"messages":[{"role":"user","pad":"${pad}"}]}`);
  replaced.messages = [{ role: 'system' }];
  t.equal(someEntryWith(replaced, 'messages', 'role', 'system'), true, 'a replaced member is read, not the stale index');
});

// ---- properties -----------------------------------------------------------------------------

const key = fc.oneof(fc.constantFrom('model', 'messages', 'max_tokens', 'a', 'a', '__proto__', 'é', 'k"q', '1', ''), fc.string({ maxLength: 6 }));
const rootObject = fc.dictionary(key, fc.jsonValue({ maxDepth: 4 }), { maxKeys: 8 });
const formatted = fc.tuple(rootObject, fc.constantFrom(undefined, 1, '\t', ' \r\n '));

type Op = { kind: 'set'; key: string; value: unknown } | { kind: 'delete'; key: string } | { kind: 'mutate'; key: string; value: unknown };
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('set' as const), key, value: fc.jsonValue({ maxDepth: 3 }) }),
  fc.record({ kind: fc.constant('delete' as const), key }),
  fc.record({ kind: fc.constant('mutate' as const), key, value: fc.jsonValue({ maxDepth: 2 }) }),
);

function define(target: Record<string, any>, key: string, value: unknown): void {
  Object.defineProperty(target, key, { value, writable: true, enumerable: true, configurable: true });
}

function apply(target: Record<string, any>, ops: Op[]): void {
  for (const o of ops) {
    if (o.kind === 'delete') delete target[o.key];
    else if (o.kind === 'set') define(target, o.key, structuredClone(o.value));
    else {
      // A changed copy assigned, the way plugins change a member (never in place: lib/request-body.ts).
      const v = target[o.key];
      if (Array.isArray(v)) define(target, o.key, [...v, structuredClone(o.value)]);
      else if (v !== null && typeof v === 'object') define(target, o.key, { ...v, mutated: structuredClone(o.value) });
    }
  }
}

t.test('property: splicing changes gives what the changes give on JSON.parse', async (t) => {
  fc.assert(fc.property(formatted, fc.array(op, { maxLength: 6 }), ([obj, space], ops) => {
    const text = JSON.stringify(obj, null, space);
    const expected = JSON.parse(text);
    apply(expected, ops);
    const b = body(text);
    apply(b, ops);
    const out = Buffer.concat(encodeBody(b));
    t.same(JSON.parse(out.toString()), expected);
    return true;
  }), { numRuns: 400 });
  t.pass('400 random bodies and changes');
});

t.test('property: an untouched body re-encodes to its members byte for byte', async (t) => {
  fc.assert(fc.property(rootObject, (obj) => {
    const text = JSON.stringify(obj);
    const b = body(text);
    const again = Buffer.concat(encodeBody(b)).toString();
    // Without duplicates (a JSON.stringify output has none), only whitespace could differ: there is none.
    return again === text;
  }), { numRuns: 300 });
  t.pass();
});

t.test('property: the scan accepts exactly what JSON.parse accepts', async (t) => {
  const json = fc.tuple(fc.jsonValue({ maxDepth: 4 }), fc.constantFrom(undefined, 2)).map(([v, s]) => JSON.stringify(v, null, s) ?? 'null');
  // Corruptions: a byte replaced, inserted or removed anywhere, from an alphabet JSON cares about.
  const alphabet = fc.constantFrom(...'{}[]":,\\ \t\n0123456789-+.eEtrufalsn\u0000\u001f\u00ff\u00e9ab/u'.split(''));
  const corrupt = fc.tuple(json, fc.nat(), alphabet, fc.constantFrom('replace', 'insert', 'remove')).map(([text, at, ch, how]) => {
    const i = text.length === 0 ? 0 : at % text.length;
    return how === 'replace' ? text.slice(0, i) + ch + text.slice(i + 1) : how === 'insert' ? text.slice(0, i) + ch + text.slice(i) : text.slice(0, i) + text.slice(i + 1);
  });
  fc.assert(fc.property(fc.oneof(json, corrupt, fc.string({ maxLength: 12 })), (text) => (scan(text) !== undefined) === parses(text)), { numRuns: 3000 });
  fc.assert(fc.property(fc.uint8Array({ maxLength: 16 }), (bytes) => {
    const buf = Buffer.from(bytes);
    return (scan(buf) !== undefined) === parses(buf);
  }), { numRuns: 2000 });
  t.pass();
});

t.test('property: depth agrees with a walk of the parsed value', async (t) => {
  const depthOf = (v: unknown): number => (v !== null && typeof v === 'object' ? 1 + Math.max(0, ...Object.values(v).map(depthOf)) : 0);
  fc.assert(fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 1, max: 6 }), (v, max) => {
    const s = scan(JSON.stringify(v) ?? 'null', max)!;
    return s.tooDeep === depthOf(v) > max;
  }), { numRuns: 500 });
  t.pass();
});
