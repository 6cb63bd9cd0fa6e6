// A JSON byte scanner for request bodies: it validates the whole text exactly as JSON.parse would
// judge it, measures the nesting depth, and locates the root object's members (and, for a few named
// array members, their entries' own members) as byte ranges, without building the value. It never
// decodes more than keys, and never allocates per string, number or nested value: a 300 KB body
// costs one pass over its bytes. `splice` rebuilds a root object from the original bytes of its
// unchanged members and new text for the changed ones.

/** One `"key": value` of an object, as byte offsets into the scanned buffer (end exclusive). */
export interface Member {
  key: string;
  /** Offset of the key's opening quote. */
  start: number;
  valueStart: number;
  valueEnd: number;
  /** For a watched array member of the root: its entries (an entry's members when it is an object). */
  entries?: Entry[];
}

export interface Entry {
  start: number;
  end: number;
  /** The entry's own members when it is an object (undefined for any other value). */
  members?: Member[];
}

export interface Scan {
  /** What the root value is. Only an object has `members`. */
  root: 'object' | 'array' | 'scalar';
  /** The root object's members in text order, duplicate keys included (JSON.parse keeps the last). */
  members: Member[];
  /** Whether arrays and objects nest deeper than the `maxDepth` asked for (the root is level 1). */
  tooDeep: boolean;
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
export function scanJson(buf: Buffer, opts: { maxDepth: number; watch?: ReadonlySet<string> }): Scan | undefined {
  b = new Uint8Array(buf.buffer, buf.byteOffset, buf.length);
  n = buf.length;
  wordsAt = (4 - (buf.byteOffset & 3)) & 3;
  words = n > wordsAt ? new Uint32Array(buf.buffer, buf.byteOffset + wordsAt, (n - wordsAt) >> 2) : new Uint32Array(0);
  try {
    return scan(buf, opts.maxDepth, opts.watch);
  } catch (err) {
    if (err instanceof Invalid) return undefined;
    throw err;
  } finally {
    b = new Uint8Array(0);
    words = new Uint32Array(0);
    n = 0;
  }
}

function scan(buf: Buffer, maxDepth: number, watch: ReadonlySet<string> | undefined): Scan {
  const stack: number[] = [];
  let depth = 0;
  let tooDeep = false;
  const members: Member[] = [];
  let root: Scan['root'] = 'scalar';
  /** The root member being read, when its entries are indexed. */
  let watched: Member | undefined;
  let entry: Entry | undefined;

  /** Reads `"key" :` at i; records the member where one is wanted; returns the value's offset. */
  const key = (i: number): number => {
    if (b[i] !== QUOTE) throw INVALID;
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
      if (watched) watched.entries = [];
    } else if (depth === 3 && entry?.members) {
      entry.members.push({ key: decodeString(buf, start, keyEnd), start, valueStart: i, valueEnd: -1 });
    }
    return i;
  };

  let i = ws(0);
  if (b[i] === 0x7b) root = 'object';
  else if (b[i] === 0x5b) root = 'array';
  for (;;) {
    // A value starts at i.
    if (i >= n) throw INVALID;
    if (depth === 2 && watched) {
      entry = { start: i, end: -1, members: b[i] === 0x7b ? [] : undefined };
      watched.entries!.push(entry);
    }
    const c = b[i]!;
    if (c === 0x7b || c === 0x5b) {
      stack.push(c === 0x7b ? OBJ : ARR);
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
      else if (depth === 3 && entry?.members) entry.members[entry.members.length - 1]!.valueEnd = i;
      if (depth === 2 && entry) {
        entry.end = i;
        entry = undefined;
      }
      if (depth === 0) {
        if (ws(i) !== n) throw INVALID;
        return { root, members, tooDeep };
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
