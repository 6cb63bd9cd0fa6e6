// A JSON byte scanner for request bodies: it validates the whole text exactly as JSON.parse would
// judge it, measures the nesting depth, and locates the root object's members (and, for a few named
// array members, chosen members of their entries) as byte ranges, without building the value. It
// never decodes more than keys, never allocates per string, number or nested value, and counts
// what it reads against bounds (ScanLimits): a 300 KB body costs one pass over its bytes. `splice` rebuilds a root object from the original bytes of its
// unchanged members and new text for the changed ones.

/** One `"key": value` of an object, as byte offsets into the scanned buffer (end exclusive). */
export interface Member {
  key: string;
  /** Offset of the key's opening quote. */
  start: number;
  valueStart: number;
  valueEnd: number;
  /**
   * For a watched array member of the root: the members its object entries hold under one of the
   * `entryKeys` asked for, in text order, INDEX_STRIDE numbers each: the entry's number (0-based),
   * the key's position in `entryKeys`, and the value's start and end. Flat small integers, not an
   * object per member: V8 keeps them unboxed, 8 bytes each.
   */
  index?: number[];
}

/** Numbers per indexed entry member in Member.index: entry, key, valueStart, valueEnd. */
export const INDEX_STRIDE = 4;

export interface Scan {
  /** What the root value is. Only an object has `members`. */
  root: 'object' | 'array' | 'scalar';
  /** The root object's members in text order, duplicate keys included (JSON.parse keeps the last). */
  members: Member[];
  /** Whether arrays and objects nest deeper than the `maxDepth` asked for (the root is level 1). */
  tooDeep: boolean;
  /** The entry members indexed (ScanOptions.entryKeys): Member.index names them by position here. */
  entryKeys: readonly string[];
  /**
   * The first count bound the text went past (see ScanLimits), if any: the scan stopped there, so
   * `members` is partial and the text was not judged as JSON past that point.
   */
  overLimit?: keyof ScanLimits;
}

/**
 * Counts the scan bounds as well as bytes and depth: past either it stops at once. The members and
 * entries it records are objects kept for the request's life, and whatever decodes the text later
 * (JSON.parse of a member) pays per value, and far more per key of an object with thousands of
 * keys (V8 keeps such an object as a hash table): a body of millions of tiny values costs
 * hundreds of MB and a stall of seconds that its byte size does not show.
 */
export interface ScanLimits {
  /** JSON values in the whole text (every string, number, literal, array and object). */
  values: number;
  /** Members of any one object, at any depth (duplicates included). */
  objectMembers: number;
}

const OBJ = 1;
const ARR = 2;

// Byte classes for the scanner's hot loops.
const QUOTE = 0x22;
const BACKSLASH = 0x5c;

function isHex(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || (c >= 0x41 && c <= 0x46) || (c >= 0x61 && c <= 0x66);
}

class Invalid extends Error {}
const INVALID = new Invalid('not JSON');
/** Thrown when a count bound is passed; carries which. */
class OverLimit extends Error {
  readonly which: keyof ScanLimits;
  constructor(which: keyof ScanLimits) {
    super(`over the ${which} bound`);
    this.which = which;
  }
}
const UNBOUNDED: ScanLimits = { values: Infinity, objectMembers: Infinity };

// The buffer being scanned, and an aligned 32-bit view of it for the string loop (scanning is
// synchronous, so one set of module state is enough).
let b: Uint8Array = new Uint8Array(0);
let n = 0;
let words: Uint32Array = new Uint32Array(0);
/** The byte offset (into b) where words[0] starts. */
let wordsAt = 0;

/**
 * Whether any of a word's four bytes is a quote, a backslash or a control character: the classic
 * "has a zero byte" / "has a byte less than n" bit tricks, exact for "any" (a hit is then
 * resolved byte by byte). Long runs of plain text inside strings cost one test per four bytes.
 */
function special(x: number): number {
  const q = x ^ 0x22222222;
  const s = x ^ 0x5c5c5c5c;
  return (((q - 0x01010101) & ~q) | ((s - 0x01010101) & ~s) | ((x - 0x20202020) & ~x)) & 0x80808080;
}

function ws(i: number): number {
  while (i < n) {
    const c = b[i]!;
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    i++;
  }
  return i;
}

/** Past the string whose opening quote is at i. */
function string(i: number): number {
  i++;
  for (;;) {
    if (i >= wordsAt && ((i - wordsAt) & 3) === 0) {
      let k = (i - wordsAt) >> 2;
      const end = words.length;
      while (k < end && special(words[k]!) === 0) k++;
      i = wordsAt + (k << 2);
    }
    if (i >= n) throw INVALID;
    const c = b[i]!;
    if (c === QUOTE) return i + 1;
    if (c === BACKSLASH) {
      const e = b[i + 1];
      if (e === 0x75) { // \uXXXX
        if (i + 5 >= n || !isHex(b[i + 2]!) || !isHex(b[i + 3]!) || !isHex(b[i + 4]!) || !isHex(b[i + 5]!)) throw INVALID;
        i += 6;
      } else if (e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) {
        i += 2;
      } else throw INVALID;
    } else if (c < 0x20) throw INVALID;
    else i++;
  }
}

function digits(i: number): number {
  const from = i;
  while (i < n && b[i]! >= 0x30 && b[i]! <= 0x39) i++;
  if (i === from) throw INVALID;
  return i;
}

function number(i: number): number {
  if (b[i] === 0x2d) i++;
  if (b[i] === 0x30) i++;
  else i = digits(i);
  if (b[i] === 0x2e) i = digits(i + 1);
  if (b[i] === 0x65 || b[i] === 0x45) {
    i++;
    if (b[i] === 0x2b || b[i] === 0x2d) i++;
    i = digits(i);
  }
  return i;
}

function literal(i: number, word: string): number {
  for (let k = 0; k < word.length; k++) if (b[i + k] !== word.charCodeAt(k)) throw INVALID;
  return i + word.length;
}

/**
 * Scans `buf` as one JSON text. Returns undefined exactly when JSON.parse(buf.toString('utf8'))
 * would throw. (Bytes that are not UTF-8 inside strings pass, as they do through that decode.)
 * `watch` names root members whose array entries are indexed (e.g. messages, tools).
 */
export interface ScanOptions {
  maxDepth: number;
  /** Root members whose array entries are indexed (e.g. messages, tools). */
  watch?: ReadonlySet<string>;
  /** The entry members to index (role, type…), by position; the rest are only read past. */
  entryKeys?: readonly string[];
  limits?: ScanLimits;
}

export function scanJson(buf: Buffer, opts: ScanOptions): Scan | undefined {
  b = new Uint8Array(buf.buffer, buf.byteOffset, buf.length);
  n = buf.length;
  wordsAt = (4 - (buf.byteOffset & 3)) & 3;
  words = n > wordsAt ? new Uint32Array(buf.buffer, buf.byteOffset + wordsAt, (n - wordsAt) >> 2) : new Uint32Array(0);
  try {
    return scan(buf, opts.maxDepth, opts.watch, opts.entryKeys, opts.limits ?? UNBOUNDED);
  } catch (err) {
    if (err instanceof Invalid) return undefined;
    if (err instanceof OverLimit) return { root: 'object', members: [], tooDeep: false, entryKeys: [], overLimit: err.which };
    throw err;
  } finally {
    b = new Uint8Array(0);
    words = new Uint32Array(0);
    n = 0;
  }
}

function scan(buf: Buffer, maxDepth: number, watch: ReadonlySet<string> | undefined, entryKeys: readonly string[] = [], limits: ScanLimits): Scan {
  const stack: number[] = [];
  let depth = 0;
  let tooDeep = false;
  const members: Member[] = [];
  let root: Scan['root'] = 'scalar';
  /** The root member being read, when its entries are indexed. */
  let watched: Member | undefined;
  /** The number of the watched array's entry being read, and whether it is an object. */
  let entryNo = -1;
  let inObjectEntry = false;
  /** Where the end of the indexed entry member being read goes in its index (-1: none). */
  let open = -1;
  /** Members seen so far in each open object, by depth (arrays' slots unused). */
  const counts: number[] = [];
  let values = 0;

  /** Reads `"key" :` at i; records the member where one is wanted; returns the value's offset. */
  const key = (i: number): number => {
    if (b[i] !== QUOTE) throw INVALID;
    if (++counts[depth - 1]! > limits.objectMembers) throw new OverLimit('objectMembers');
    const start = i;
    i = string(i);
    const keyEnd = i;
    i = ws(i);
    if (b[i] !== 0x3a) throw INVALID;
    i = ws(i + 1);
    if (depth === 1) {
      const m: Member = { key: decodeString(buf, start, keyEnd), start, valueStart: i, valueEnd: -1 };
      members.push(m);
      watched = watch?.has(m.key) && b[i] === 0x5b ? m : undefined;
      if (watched) {
        watched.index = [];
        entryNo = -1;
      }
    } else if (depth === 3 && inObjectEntry) {
      const k = wantedKey(buf, start, keyEnd, entryKeys);
      if (k >= 0) {
        const index = watched!.index!;
        index.push(entryNo, k, i, -1);
        open = index.length - 1;
      }
    }
    return i;
  };

  let i = ws(0);
  if (b[i] === 0x7b) root = 'object';
  else if (b[i] === 0x5b) root = 'array';
  for (;;) {
    // A value starts at i.
    if (i >= n) throw INVALID;
    if (++values > limits.values) throw new OverLimit('values');
    if (depth === 2 && watched) {
      entryNo++;
      inObjectEntry = b[i] === 0x7b;
    }
    const c = b[i]!;
    if (c === 0x7b || c === 0x5b) {
      stack.push(c === 0x7b ? OBJ : ARR);
      counts[depth] = 0;
      if (++depth > maxDepth) tooDeep = true;
      i = ws(i + 1);
      if (b[i] === (c === 0x7b ? 0x7d : 0x5d)) {
        i++;
        stack.pop();
        depth--;
      } else {
        if (c === 0x7b) i = key(i);
        continue;
      }
    } else if (c === QUOTE) i = string(i);
    else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) i = number(i);
    else if (c === 0x74) i = literal(i, 'true');
    else if (c === 0x66) i = literal(i, 'false');
    else if (c === 0x6e) i = literal(i, 'null');
    else throw INVALID;

    // A value ended at i: close every container it completes, then find the next value.
    for (;;) {
      if (depth === 1 && root === 'object') members[members.length - 1]!.valueEnd = i;
      else if (depth === 3 && open >= 0) {
        watched!.index![open] = i;
        open = -1;
      }
      if (depth === 2) inObjectEntry = false;
      if (depth === 0) {
        if (ws(i) !== n) throw INVALID;
        return { root, members, tooDeep, entryKeys };
      }
      i = ws(i);
      const top = stack[depth - 1];
      const d = b[i];
      if (d === 0x2c) {
        i = ws(i + 1);
        if (top === OBJ) i = key(i);
        break;
      }
      if (d !== (top === OBJ ? 0x7d : 0x5d)) throw INVALID;
      i++;
      stack.pop();
      depth--;
    }
  }
}

/**
 * The position in `wanted` of the key at start..end (quotes included), or -1, without allocating.
 * A key with escapes or non-ASCII bytes is decoded to compare.
 */
function wantedKey(buf: Buffer, start: number, end: number, wanted: readonly string[]): number {
  const len = end - start - 2;
  for (let i = start + 1; i < end - 1; i++) {
    const c = buf[i]!;
    if (c === BACKSLASH || c >= 0x80) return wanted.indexOf(decodeString(buf, start, end));
  }
  next: for (let w = 0; w < wanted.length; w++) {
    const key = wanted[w]!;
    if (key.length !== len) continue;
    for (let k = 0; k < len; k++) if (buf[start + 1 + k] !== key.charCodeAt(k)) continue next;
    return w;
  }
  return -1;
}

/** A JSON string's value from its bytes (quotes included): plain ASCII is sliced, anything else parsed. */
export function decodeString(buf: Buffer, start: number, end: number): string {
  for (let i = start + 1; i < end - 1; i++) {
    const c = buf[i]!;
    if (c === BACKSLASH || c >= 0x80) return JSON.parse(buf.toString('utf8', start, end));
  }
  return buf.toString('latin1', start + 1, end - 1);
}

/** The value of a byte range known to hold one valid JSON value. */
export function parseRange(buf: Buffer, start: number, end: number): unknown {
  const c = buf[start];
  if (c === QUOTE) return decodeString(buf, start, end);
  if (c === 0x74) return true;
  if (c === 0x66) return false;
  if (c === 0x6e) return null;
  if (c === 0x2d || (c! >= 0x30 && c! <= 0x39)) return Number(buf.toString('latin1', start, end));
  return JSON.parse(buf.toString('utf8', start, end));
}

/** What becomes of one member of the root object when it is rebuilt. */
export type Change = { keep: true } | { drop: true } | { text: string };

/**
 * The root object rebuilt: each member (by its index in `scan.members`) kept as its original bytes,
 * dropped, or given new value text; then `added` members appended. Whitespace between members is
 * not kept; everything inside an unchanged member is, byte for byte. The result is the text's parts
 * in order, unchanged members as views of `buf` (nothing copied): whoever writes them decides
 * whether to join them.
 */
export function splice(buf: Buffer, members: readonly Member[], change: (m: Member, index: number) => Change, added: ReadonlyArray<[string, string]>): Buffer[] {
  const parts: Buffer[] = [OPEN];
  let first = true;
  const sep = () => {
    if (!first) parts.push(COMMA);
    first = false;
  };
  for (let k = 0; k < members.length; k++) {
    const m = members[k]!;
    const c = change(m, k);
    if ('drop' in c) continue;
    sep();
    if ('keep' in c) parts.push(buf.subarray(m.start, m.valueEnd));
    else {
      parts.push(buf.subarray(m.start, m.valueStart));
      parts.push(Buffer.from(c.text));
    }
  }
  for (const [k, text] of added) {
    sep();
    parts.push(Buffer.from(`${JSON.stringify(k)}:${text}`));
  }
  parts.push(CLOSE);
  return parts;
}

const OPEN = Buffer.from('{');
const CLOSE = Buffer.from('}');
const COMMA = Buffer.from(',');
