// Reply content: what the simulated model "says". A plan is the answer cut into the pieces a
// stream sends, from `[[reply:TEXT]]` in the last user message or from the chunks=/bytes=
// directives, plus the fixed tool-call arguments. Plans are pure data, cached by shape; this file
// never writes to a response.

import type { Directives } from './directives.ts';

/** Arguments of every simulated tool call (chat `function.arguments` / messages `input`). */
export const SIM_TOOL_INPUT = { location: 'Oslo', unit: 'celsius' };

export interface ContentPlan {
  pieces: string[];
  /** JSON.stringify of each piece, so the hot loop only concatenates. */
  json: string[];
  text: string;
}

const SENTENCE = 'Hello from the simulated router.';
const FILLER = 'lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor ';
const REPLY_RE = /\[\[reply:([\s\S]*?)\]\]/;

function plan(pieces: string[]): ContentPlan {
  return { pieces, json: pieces.map((p) => JSON.stringify(p)), text: pieces.join('') };
}

/** Split after each whitespace run, so the pieces concatenate back to the text exactly. */
function words(text: string): string[] {
  return text === '' ? [] : text.split(/(?<=\s)(?=\S)/);
}

function sentencePlan(chunks: number): ContentPlan {
  const reps = Math.ceil(chunks / 5);
  return plan(words(Array(reps).fill(SENTENCE).join(' ')).slice(0, chunks).map((w, i) => (i === chunks - 1 ? w.trimEnd() : w)));
}

function bytesPlan(chunks: number, bytes: number): ContentPlan {
  let text = FILLER.repeat(Math.ceil(bytes / FILLER.length)).slice(0, bytes);
  if (text.endsWith(' ')) text = text.slice(0, -1) + '.';
  const n = Math.max(1, Math.min(chunks, bytes));
  const size = Math.ceil(bytes / n);
  const pieces: string[] = [];
  for (let at = 0; at < bytes; at += size) pieces.push(text.slice(at, at + size));
  return plan(pieces);
}

// Plans depend only on (chunks, bytes): computed once and reused, since the benchmark repeats the
// same request. Bounded by entries and by text held, so large `bytes=` plans cannot pile up.
const planCache = new Map<string, ContentPlan>();
let planCacheChars = 0;
const PLAN_CACHE_ENTRIES = 256;
const PLAN_CACHE_CHARS = 64 * 1024 * 1024;
function defaultPlan(d: Readonly<Directives>): ContentPlan {
  const k = `${d.chunks}:${d.bytes}`;
  let p = planCache.get(k);
  if (p === undefined) {
    p = d.bytes > 0 ? bytesPlan(d.chunks, d.bytes) : d.bytes === 0 ? plan([]) : sentencePlan(d.chunks);
    if (planCache.size >= PLAN_CACHE_ENTRIES || planCacheChars + p.text.length > PLAN_CACHE_CHARS) {
      planCache.clear();
      planCacheChars = 0;
    }
    planCache.set(k, p);
    planCacheChars += p.text.length;
  }
  return p;
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  let s = '';
  for (const b of content) if (b !== null && typeof b === 'object' && (b.type === 'text' || b.type === 'input_text') && typeof b.text === 'string') s += b.text;
  return s;
}

function lastUserText(json: any): string {
  // The Responses API's `input`: a string, or items whose user messages hold input_text parts.
  if (typeof json?.input === 'string') return json.input;
  const msgs = Array.isArray(json?.input) ? json.input : json?.messages;
  if (!Array.isArray(msgs)) return '';
  for (let i = msgs.length - 1; i >= 0; i--) if (msgs[i]?.role === 'user') return textOf(msgs[i].content);
  return '';
}

export function contentPlan(json: any, d: Readonly<Directives>): ContentPlan {
  const text = lastUserText(json);
  const m = text.includes('[[reply:') ? REPLY_RE.exec(text) : null;
  return m === null ? defaultPlan(d) : plan(words(m[1]!));
}

export const TOOL_ARGS = JSON.stringify(SIM_TOOL_INPUT);
// Argument fragments cut mid-token, as real streams do.
export const TOOL_FRAGMENTS = [TOOL_ARGS.slice(0, 9), TOOL_ARGS.slice(9, 20), TOOL_ARGS.slice(20)];
