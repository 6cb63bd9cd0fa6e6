// The request body as plugins see it (`ctx.body`): a plain object with the body's top-level members,
// built from one scan (lib/json-scan.ts) instead of a parse. Small members are decoded at once;
// large ones (messages, tools, system) only when a plugin reads them. `encodeBody` gives the bytes
// that go upstream, as parts: a body read from bytes is re-assembled from views of the original
// bytes of every member no plugin touched, plus new text for the ones it changed; it never
// re-serialises the whole body, nor copies the untouched members. `bodyChanged` says whether
// anything changed at all, from the same facts: there is no second record of it.
//
// The rule for plugins: change the body by assigning, adding or deleting top-level members, never
// by changing a decoded value in place (copy it, change the copy, assign the copy). A member still
// holding the very value decoded from the bytes is sent as those bytes.
// tests/plugins/body-rule.test.ts runs every plugin on frozen values to hold the rule.

import { INDEX_STRIDE, parseRange, splice, type Change, type Member, type Scan } from './json-scan.ts';

/** Members up to this many bytes are decoded when the body is read; longer ones on first read. */
const EAGER_BYTES = 512;

/** What a body object was built from, kept beside it (plugins see only the object). */
interface Origin {
  raw: Buffer;
  members: readonly Member[];
  /** The member JSON.parse would keep for each key: the last one of that name. */
  last: Map<string, Member>;
  /** The entry members the scan indexed, by position (Member.index refers to them). */
  entryKeys: readonly string[];
  /** Values decoded from the bytes, by key: what the member held before any plugin ran. */
  decoded: Map<string, unknown>;
  /** Accessors still standing for the members not decoded yet. */
  lazy: Map<string, Accessors["get"]>;
}

/**
 * The origin rides on the body under a symbol, not enumerable: invisible to Object.keys, for-in,
 * spread and JSON.stringify, and free for the collector (a WeakMap keyed by every request's body
 * costs an ephemeron entry per request).
 */
const ORIGIN = Symbol('sluice.body-origin');

function originOf(body: object): Origin | undefined {
  return (body as { [ORIGIN]?: Origin })[ORIGIN];
}

function define(body: Record<string, unknown>, key: string, value: unknown): void {
  // defineProperty, not assignment: a member named "__proto__" is an own property in JSON.parse's
  // result, and must be one here too.
  Object.defineProperty(body, key, { value, writable: true, enumerable: true, configurable: true });
}

/** A lazy member's getter and setter, one pair per member name and shared by every body (see accessorsOf). */
interface Accessors { get(this: Record<string, unknown>): unknown; set(this: Record<string, unknown>, value: unknown): void }
const ACCESSORS = new Map<string, Accessors>();
/** Member names whose accessors are kept; past this, a name gets a pair of its own (client-chosen names cannot grow the map). */
const MAX_SHARED_NAMES = 256;

/**
 * The accessors of a lazy member. They find their body through `this` and their member by name,
 * so every body's `messages` uses the same pair: V8 then shares one hidden class between the
 * bodies, where a pair of closures per body made a new class (with its descriptors) for each,
 * allocated straight in the old generation, ~2 KB per request for the major GCs to sweep.
 */
function accessorsOf(key: string): Accessors {
  let pair = ACCESSORS.get(key);
  if (pair) return pair;
  pair = {
    // Decodes on first read, then the member is a plain data property.
    get() {
      const origin = originOf(this)!;
      const member = origin.last.get(key)!;
      const value = parseRange(origin.raw, member.valueStart, member.valueEnd);
      origin.decoded.set(key, value);
      origin.lazy.delete(key);
      define(this, key, value);
      return value;
    },
    set(value) {
      originOf(this)!.lazy.delete(key);
      define(this, key, value);
    },
  };
  if (ACCESSORS.size < MAX_SHARED_NAMES) ACCESSORS.set(key, pair);
  return pair;
}
// The members that are large in real requests hold their pairs from the start: names a client
// makes up cannot take their places.
for (const key of ['messages', 'tools', 'input', 'system', 'instructions']) accessorsOf(key);

/** The body object of a scanned root object (the scan must come from `raw`). */
export function bodyFromScan(raw: Buffer, scan: Scan): Record<string, any> {
  const body: Record<string, unknown> = {};
  const last = new Map<string, Member>();
  for (const m of scan.members) last.set(m.key, m);
  const origin: Origin = { raw, members: scan.members, last, entryKeys: scan.entryKeys, decoded: new Map(), lazy: new Map() };
  // In order of first appearance (JSON.parse's key order), each with its last value.
  for (const m of scan.members) {
    if (Object.prototype.hasOwnProperty.call(body, m.key)) continue;
    const key = m.key;
    const member = last.get(key)!;
    if (member.valueEnd - member.valueStart <= EAGER_BYTES) {
      const value = parseRange(raw, member.valueStart, member.valueEnd);
      origin.decoded.set(key, value);
      // Plain assignment keeps the object in V8's fast mode; only "__proto__" needs defineProperty.
      if (key === '__proto__') define(body, key, value);
      else body[key] = value;
      continue;
    }
    // The getter and setter turn the member into a data property (and drop its `lazy` entry) on first use.
    const pair = accessorsOf(key);
    origin.lazy.set(key, pair.get);
    Object.defineProperty(body, key, { get: pair.get, set: pair.set, enumerable: true, configurable: true });
  }
  Object.defineProperty(body, ORIGIN, { value: origin });
  return body;
}

/** Whether the member `key` still holds exactly what the bytes say (never decoded, or the value decoded from them). */
function untouched(body: Record<string, unknown>, origin: Origin, key: string): boolean {
  if (!Object.prototype.hasOwnProperty.call(body, key)) return false;
  const get = origin.lazy.get(key);
  // Its accessor still stands (never read, never set; not deleted and re-added): the bytes hold.
  if (get !== undefined) return Object.getOwnPropertyDescriptor(body, key)?.get === get;
  // The value decoded, not another: plugins never change one in place (the rule above).
  return origin.decoded.has(key) && Object.is(body[key], origin.decoded.get(key));
}

/**
 * Whether the bytes to send differ from the bytes received: a member was assigned a new value,
 * added or deleted, or the text named one twice (it is sent once). A body not built from bytes
 * always counts as changed.
 */
export function bodyChanged(body: Record<string, any>): boolean {
  const origin = originOf(body);
  if (!origin || origin.members.length !== origin.last.size) return true;
  const keys = Object.keys(body);
  if (keys.length !== origin.last.size) return true;
  for (const key of keys) if (!origin.last.has(key) || !untouched(body, origin, key)) return true;
  return false;
}

/**
 * The bytes to send for a body, as parts to write in order. A scanned body keeps
 * the original bytes of every member whose value is untouched; changed members get JSON.stringify
 * of their new value; removed ones go (every duplicate of the name); new ones are appended. Any
 * other object: JSON.stringify, in one part.
 */
export function encodeBody(body: Record<string, any>): Buffer[] {
  const origin = originOf(body);
  if (!origin) return [Buffer.from(JSON.stringify(body))];
  const { raw, last } = origin;
  const change = (m: Member): Change => {
    if (!Object.prototype.hasOwnProperty.call(body, m.key)) return { drop: true };
    // Earlier duplicates are dead text to JSON.parse, which keeps the last, but a router that keeps
    // the first would read them: only the last goes, so each member is sent exactly once.
    if (last.get(m.key) !== m) return { drop: true };
    if (untouched(body, origin, m.key)) return { keep: true };
    const text = JSON.stringify(body[m.key]);
    return text === undefined ? { drop: true } : { text };
  };
  const added: Array<[string, string]> = [];
  for (const key of Object.keys(body)) {
    if (last.has(key)) continue;
    const text = JSON.stringify(body[key]);
    if (text !== undefined) added.push([key, text]);
  }
  return splice(raw, origin.members, change, added);
}

/**
 * The entry index of a top-level array member and the position of `key` in it, when the member is
 * still the one scanned and the scan indexed `key` (lib/json-scan.ts).
 */
function scannedIndex(body: Record<string, any>, field: string, key: string) {
  const origin = originOf(body);
  if (!origin || !untouched(body, origin, field)) return undefined;
  const k = origin.entryKeys.indexOf(key);
  if (k < 0) return undefined;
  return { raw: origin.raw, index: origin.last.get(field)!.index ?? [], k };
}

/**
 * Whether some entry of the top-level array `field` is an object with one of `keys` as its own
 * member. On a scanned body this reads the scan's index, not the array.
 */
export function someEntryHas(body: Record<string, any>, field: string, keys: readonly string[]): boolean {
  const scanned = keys.map((k) => scannedIndex(body, field, k));
  if (scanned.every((s) => s !== undefined)) {
    const wanted = scanned.map((s) => s!.k);
    const index = scanned[0]?.index ?? [];
    for (let i = 0; i < index.length; i += INDEX_STRIDE) if (wanted.includes(index[i + 1]!)) return true;
    return false;
  }
  const list = body[field];
  return Array.isArray(list) && list.some((e) => e !== null && typeof e === 'object' && keys.some((k) => Object.prototype.hasOwnProperty.call(e, k)));
}

/**
 * Whether some entry of the top-level array `field` is an object whose member `key` is the string
 * `value`. On a scanned body only those members' values are decoded; an entry's last member of
 * that name is the one that counts (JSON.parse keeps the last).
 */
export function someEntryWith(body: Record<string, any>, field: string, key: string, value: string): boolean {
  const scanned = scannedIndex(body, field, key);
  if (scanned) {
    const { raw, index, k } = scanned;
    // Backwards, so the first member of an entry met is its last in the text.
    let decided = -1;
    for (let i = index.length - INDEX_STRIDE; i >= 0; i -= INDEX_STRIDE) {
      if (index[i + 1] !== k || index[i] === decided) continue;
      decided = index[i]!;
      const start = index[i + 2]!;
      if (raw[start] === 0x22 && parseRange(raw, start, index[i + 3]!) === value) return true;
    }
    return false;
  }
  const list = body[field];
  return Array.isArray(list) && list.some((e) => e?.[key] === value);
}

/**
 * What kind of JSON value the top-level member `key` holds, without decoding it: on a scanned body
 * whose member is untouched, its first byte says; otherwise the value's own type. Undefined when absent.
 */
export function memberKind(body: Record<string, any>, key: string): 'string' | 'array' | 'object' | 'other' | undefined {
  if (!Object.prototype.hasOwnProperty.call(body, key)) return undefined;
  const origin = originOf(body);
  if (origin && untouched(body, origin, key)) {
    const first = origin.raw[origin.last.get(key)!.valueStart];
    return first === 0x22 ? 'string' : first === 0x5b ? 'array' : first === 0x7b ? 'object' : 'other';
  }
  const v = body[key];
  return typeof v === 'string' ? 'string' : Array.isArray(v) ? 'array' : v !== null && typeof v === 'object' ? 'object' : 'other';
}
