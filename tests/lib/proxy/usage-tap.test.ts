// The usage tap against real simulated-router bodies (all three dialects, streamed and JSON, tools,
// failures, no cost, cache and reasoning counts, non-ASCII text): one chunk, every single cut
// point and hundreds of seeded random cut sets (cuts inside UTF-8 characters included) must all
// give the usage the sim charged. Also CRLF, comment lines, a stray [DONE], garbage that must
// never throw, the 16 MiB JSON limit, and chat cache tokens taken out of prompt_tokens.

import { isDeepStrictEqual } from 'node:util';
import t from 'tap';
import type { Dialect } from '../../../lib/errors.ts';
import { startSimulatedRouter, type SimulatedRouter } from '../../../lib/sim/index.ts';
import { UsageTap, type Usage } from '../../../lib/proxy/usage-tap.ts';
import { mulberry32 } from '../../helpers/random.ts';

/** Feeds `body` cut at `cuts` (byte offsets, ascending, repeats give empty chunks). */
function tapWith(dialect: Dialect, stream: boolean, body: Buffer, cuts: number[]): Usage {
  const tap = new UsageTap(dialect, stream);
  let at = 0;
  for (const c of cuts) {
    tap.write(body.subarray(at, c));
    at = c;
  }
  tap.write(body.subarray(at));
  return structuredClone(tap.finish());
}

/** Every single cut point, then `sets` random cut sets (some only inside multi-byte characters), then one byte per chunk. */
function cutSets(body: Buffer, seed: number, sets: number): number[][] {
  const all: number[][] = [];
  for (let i = 1; i < body.length; i++) all.push([i]);
  const rnd = mulberry32(seed);
  const inside: number[] = [];
  for (let i = 1; i < body.length; i++) if ((body[i]! & 0xc0) === 0x80) inside.push(i); // a UTF-8 continuation byte: cutting before it splits a character
  for (let s = 0; s < sets; s++) {
    const n = 1 + Math.floor(rnd() * 40);
    const pool = s % 3 === 0 && inside.length > 0 ? inside : null;
    const cuts: number[] = [];
    for (let k = 0; k < n; k++) cuts.push(pool ? pool[Math.floor(rnd() * pool.length)]! : Math.floor(rnd() * (body.length + 1)));
    all.push(cuts.sort((a, b) => a - b));
  }
  all.push(Array.from({ length: body.length - 1 }, (_, i) => i + 1));
  return all;
}

/** Runs every cut set; returns the first that disagrees with `want` (with its usage), or undefined. */
function firstMismatch(dialect: Dialect, stream: boolean, body: Buffer, want: Usage, seed: number, sets = 60): { cuts: number[]; got: Usage } | undefined {
  for (const cuts of cutSets(body, seed, sets)) {
    const got = tapWith(dialect, stream, body, cuts);
    if (!isDeepStrictEqual(got, want)) return { cuts, got };
  }
  return undefined;
}

interface Case {
  name: string;
  dialect: Dialect;
  stream: boolean;
  model?: string;
  reply?: string;
  chunks?: number;
  bytes?: number;
  tool?: string;
  failAfter?: number;
  usageChoice?: boolean;
  noCost?: boolean;
  provider?: string;
  cached?: number;
  cacheWrite?: number;
  reasoning?: number;
  /** Content pieces the sim sends before it stops (the reply's words, `chunks`, or `fail-after`). */
  pieces: number;
  /** The provider the sim names for the model (or the provider= directive). */
  expectProvider: string;
}

const UNI = 'Grüße ünïcödé ⚙️ 😀👍🏽 日本語のテキスト — done.';
const UNI_WORDS = 7;
const EXOTIC_TOOL = 'wetter_für_東京_😀';
const EXOTIC_PROVIDER = 'Fournisseur ünïcödé 🚀';

const CASES: Case[] = [
  { name: 'chat stream, defaults', dialect: 'chat', stream: true, pieces: 5, expectProvider: 'Google' },
  { name: 'chat stream, tool and non-ASCII', dialect: 'chat', stream: true, reply: UNI, tool: 'get_weather', pieces: UNI_WORDS, expectProvider: 'Google' },
  { name: 'chat stream, usage in a choice chunk, no cost', dialect: 'chat', stream: true, chunks: 9, usageChoice: true, noCost: true, pieces: 9, expectProvider: 'Google' },
  { name: 'chat stream, bytes', dialect: 'chat', stream: true, chunks: 6, bytes: 1500, pieces: 6, expectProvider: 'Google' },
  { name: 'chat stream, cache and reasoning', dialect: 'chat', stream: true, model: 'anthropic/claude-sonnet-4.5', cached: 20, cacheWrite: 8, reasoning: 7, provider: 'Amazon Bedrock', pieces: 5, expectProvider: 'Amazon Bedrock' },
  { name: 'chat stream, fails after 3', dialect: 'chat', stream: true, reply: UNI, failAfter: 3, pieces: 3, expectProvider: 'Google' },
  { name: 'chat JSON, defaults', dialect: 'chat', stream: false, model: 'openai/gpt-5', pieces: 5, expectProvider: 'OpenAI' },
  { name: 'chat JSON, tool and non-ASCII', dialect: 'chat', stream: false, reply: UNI, tool: 'lookup', pieces: UNI_WORDS, expectProvider: 'Google' },
  { name: 'chat JSON, cache, reasoning, no cost', dialect: 'chat', stream: false, cached: 12, cacheWrite: 3, reasoning: 4, noCost: true, pieces: 5, expectProvider: 'Google' },
  { name: 'chat JSON, fails after 2', dialect: 'chat', stream: false, reply: UNI, failAfter: 2, pieces: 2, expectProvider: 'Google' },
  { name: 'messages stream, defaults', dialect: 'messages', stream: true, model: 'anthropic/claude-sonnet-4.5', pieces: 5, expectProvider: 'Anthropic' },
  { name: 'messages stream, tool and non-ASCII', dialect: 'messages', stream: true, reply: UNI, tool: 'get_weather', pieces: UNI_WORDS, expectProvider: 'Google' },
  { name: 'messages stream, tool only', dialect: 'messages', stream: true, chunks: 0, tool: 'bash', pieces: 0, expectProvider: 'Google' },
  { name: 'messages stream, cache, no cost, bytes', dialect: 'messages', stream: true, cached: 10, cacheWrite: 4, noCost: true, chunks: 4, bytes: 1200, pieces: 4, expectProvider: 'Google' },
  { name: 'messages stream, fails after 2', dialect: 'messages', stream: true, reply: UNI, failAfter: 2, pieces: 2, expectProvider: 'Google' },
  { name: 'messages JSON, defaults', dialect: 'messages', stream: false, model: 'meta-llama/llama-3.3-70b-instruct', pieces: 5, expectProvider: 'DeepInfra' },
  { name: 'messages JSON, tool and non-ASCII, cache', dialect: 'messages', stream: false, reply: UNI, tool: 'search', cached: 6, cacheWrite: 2, pieces: UNI_WORDS, expectProvider: 'Google' },
  { name: 'messages JSON, fails after 1 (an error status)', dialect: 'messages', stream: false, failAfter: 1, pieces: 1, expectProvider: 'Google' },
  // The Responses API: no provider in the response object; a tool call replaces the text.
  { name: 'responses stream, defaults', dialect: 'responses', stream: true, model: 'openai/gpt-5', pieces: 5, expectProvider: '' },
  { name: 'responses stream, a tool', dialect: 'responses', stream: true, tool: 'get_weather', pieces: 0, expectProvider: '' },
  { name: 'responses stream, non-ASCII, cache and reasoning, no cost', dialect: 'responses', stream: true, reply: UNI, cached: 20, reasoning: 7, noCost: true, pieces: UNI_WORDS, expectProvider: '' },
  { name: 'responses stream, bytes', dialect: 'responses', stream: true, chunks: 6, bytes: 1500, pieces: 6, expectProvider: '' },
  { name: 'responses stream, fails after 3', dialect: 'responses', stream: true, reply: UNI, failAfter: 3, pieces: 3, expectProvider: '' },
  { name: 'responses JSON, defaults', dialect: 'responses', stream: false, pieces: 5, expectProvider: '' },
  { name: 'responses JSON, a tool, cache and reasoning', dialect: 'responses', stream: false, tool: 'lookup', cached: 6, reasoning: 4, pieces: 0, expectProvider: '' },
  { name: 'responses JSON, fails after 2', dialect: 'responses', stream: false, reply: UNI, failAfter: 2, pieces: 2, expectProvider: '' },
];

function xSim(c: Case): string {
  const d: string[] = [];
  if (c.chunks !== undefined) d.push(`chunks=${c.chunks}`);
  if (c.bytes !== undefined) d.push(`bytes=${c.bytes}`);
  if (c.tool) d.push(`tool=${c.tool}`);
  if (c.failAfter !== undefined) d.push(`fail-after=${c.failAfter}`);
  if (c.usageChoice) d.push('usage=choice');
  if (c.noCost) d.push('no-cost');
  if (c.provider) d.push(`provider=${c.provider}`);
  if (c.cached) d.push(`cached=${c.cached}`);
  if (c.cacheWrite) d.push(`cache-write=${c.cacheWrite}`);
  if (c.reasoning) d.push(`reasoning=${c.reasoning}`);
  return d.join(';');
}

interface Fetched { body: Buffer; status: number; generationId: string | null; promptTokens: number; charged: number }

let bearerSeq = 0;
async function fetchBody(sim: SimulatedRouter, c: Case): Promise<Fetched> {
  const bearer = `sk-or-v1-tap-${++bearerSeq}`;
  const model = c.model ?? 'google/gemini-2.5-flash';
  const turn = [{ role: 'user', content: c.reply === undefined ? 'hi' : `say [[reply:${c.reply}]]` }];
  const request = JSON.stringify(c.dialect === 'responses'
    ? { model, stream: c.stream, max_output_tokens: 100, input: turn }
    : { model, stream: c.stream, max_tokens: 100, messages: turn });
  const res = await fetch(`${sim.url}/api/v1/${{ chat: 'chat/completions', messages: 'messages', responses: 'responses' }[c.dialect]}`, {
    method: 'POST', headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json', 'x-sim': xSim(c) }, body: request,
  });
  const body = Buffer.from(await res.arrayBuffer());
  return { body, status: res.status, generationId: res.headers.get('x-generation-id'), promptTokens: Math.ceil(Buffer.byteLength(request) / 4), charged: sim.usageByKey(bearer) };
}

/** The usage the body must yield, from the sim's own arithmetic and what it charged; not from the body. */
function expected(c: Case, f: Fetched): Usage {
  const model = c.model ?? 'google/gemini-2.5-flash';
  const failed = c.failAfter !== undefined;
  const cached = c.cached ?? 0;
  const written = c.cacheWrite ?? 0;
  const completion = c.pieces + (c.tool && !failed ? 3 : 0) + (c.reasoning ?? 0);
  const base: Usage = {
    input_tokens: f.promptTokens - cached - written, output_tokens: completion, cache_read_tokens: cached, cache_write_tokens: written,
    reasoning_tokens: c.dialect !== 'messages' ? (c.reasoning ?? 0) : 0, // the sim's messages usage carries no reasoning count
    cost: c.noCost ? null : f.charged, provider: c.expectProvider, generation_id: f.generationId, model,
    tools: c.tool && !failed ? [c.tool] : [], error: failed,
  };
  if (c.dialect === 'responses') {
    base.provider = null; // the response object names none
    // A failed stream ends with response.failed carrying no usage; a failed JSON answer keeps what was settled.
    if (failed && c.stream) return { ...base, input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost: null };
    return base;
  }
  if (!failed) return base;
  if (c.dialect === 'chat' && c.stream) return { ...base, input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost: null };
  // A messages stream that fails carries only message_start's usage (output_tokens 1).
  if (c.dialect === 'messages' && c.stream) return { ...base, output_tokens: 1, cost: null };
  // A non-streamed messages failure is an error status whose body names nothing.
  if (c.dialect === 'messages') return { ...base, input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, cost: null, provider: null, generation_id: null, model: null };
  return base;
}

t.test('simulated bodies, cut anywhere', async (t) => {
  const sim = await startSimulatedRouter();
  t.teardown(() => sim.close());
  let seed = 1;
  for (const c of CASES) {
    const f = await fetchBody(sim, c);
    t.test(c.name, async (t) => {
      const failedJson = c.failAfter !== undefined && c.dialect === 'messages' && !c.stream;
      t.equal(f.status, failedJson ? 502 : 200, 'the sim answered as asked');
      if (c.reply) t.ok(f.body.some((b) => b >= 0x80), 'the body carries multi-byte characters');
      const want = expected(c, f);
      const whole = tapWith(c.dialect, c.stream, f.body, []);
      t.same(whole, want, 'one chunk gives what the sim charged');
      t.strictSame(firstMismatch(c.dialect, c.stream, f.body, whole, seed++), undefined, 'every cut point and every random cut set give the same usage');
      const text = f.body.toString('utf8');
      if (c.tool) {
        // Non-ASCII where the usage reads it (tool and provider names), so a character split
        // across chunks would show in the result, not only in the reply text.
        const named = c.expectProvider !== ''; // the Responses object names no provider
        const renamed = text.replaceAll(JSON.stringify(c.tool), JSON.stringify(EXOTIC_TOOL));
        const exotic = Buffer.from(named ? renamed.replaceAll(JSON.stringify(c.expectProvider), JSON.stringify(EXOTIC_PROVIDER)) : renamed);
        const wantExotic = { ...want, tools: [EXOTIC_TOOL], provider: named ? EXOTIC_PROVIDER : null };
        t.strictSame(tapWith(c.dialect, c.stream, exotic, []), wantExotic, 'non-ASCII tool and provider names');
        t.strictSame(firstMismatch(c.dialect, c.stream, exotic, wantExotic, seed++), undefined, 'non-ASCII names cut anywhere, inside characters included');
      }
      if (!c.stream) return;
      // One event per chunk, as routers write them: whole events without anything the row needs are skipped undecoded.
      const ends: number[] = [];
      for (let i = f.body.indexOf('\n\n'); i !== -1; i = f.body.indexOf('\n\n', i + 2)) ends.push(i + 2);
      t.ok(ends.length > 3, `${ends.length} events`);
      t.strictSame(tapWith(c.dialect, true, f.body, ends), want, 'event by event');
      t.strictSame(tapWith(c.dialect, true, f.body, ends.filter((_, i) => i % 3 === 0)), want, 'three events per chunk');
      const crlf = Buffer.from(text.replaceAll('\n', '\r\n'));
      t.strictSame(tapWith(c.dialect, true, crlf, []), want, 'CRLF line endings');
      t.strictSame(firstMismatch(c.dialect, true, crlf, want, seed++, 20), undefined, 'CRLF cut anywhere, \\r and \\n split included');
      const cr = Buffer.from(text.replaceAll('\n', '\r'));
      t.strictSame(tapWith(c.dialect, true, cr, []), want, 'bare CR line endings');
      const commented = Buffer.from(`: hello\n\n${text.replaceAll('\n\n', '\n\n: keep-alive\n: OPENROUTER PROCESSING\n\n')}`);
      t.strictSame(firstMismatch(c.dialect, true, commented, want, seed++, 20), undefined, 'comment lines between events change nothing');
      if (c.dialect === 'messages') {
        const done = Buffer.concat([f.body, Buffer.from('data: [DONE]\n\n')]);
        t.strictSame(firstMismatch(c.dialect, true, done, want, seed++, 10), undefined, 'a trailing data: [DONE] on a messages stream changes nothing');
      }
    });
  }
});

t.test('garbage never throws', async (t) => {
  const rnd = mulberry32(99);
  const noise = Buffer.alloc(64 * 1024);
  for (let i = 0; i < noise.length; i++) noise[i] = Math.floor(rnd() * 256);
  const hostile = Buffer.from([
    'data: {"usage":', '', 'data: null', '', 'data: 42', '', 'data: "str"', '', 'data: []', '',
    'data: {"id":7,"provider":{},"choices":"x","usage":{"prompt_tokens":"12","completion_tokens":-5,"cost":"1","prompt_tokens_details":7}}', '',
    'data: {"choices":[null,{"delta":{"tool_calls":[null,{"function":null},{"function":{"name":5}}]}}]}', '',
    'event: message_start', 'data: null', '', 'event: message_start', 'data: {"message":7}', '',
    'event: message_delta', 'data: {"usage":{"input_tokens":"12","output_tokens":-5,"cost":"1","output_tokens_details":null}}', '',
    'event: content_block_start', 'data: {"content_block":null}', '', 'event: message_delta', 'data: {"usage":null}', '',
    'retry: x', 'id: \u0000', 'event', 'data', '', '\ufeff\ufeff', '\xff\xfe', '',
  ].join('\n'), 'latin1');
  const zero: Usage = { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost: null, provider: null, generation_id: null, model: null, tools: [], error: false };
  for (const dialect of ['chat', 'messages'] as const) {
    for (const stream of [true, false]) {
      for (const body of [noise, hostile, Buffer.concat([hostile, noise, hostile])]) {
        let got: Usage | undefined;
        t.doesNotThrow(() => {
          for (let s = 0; s < 30; s++) {
            const cuts = Array.from({ length: 1 + Math.floor(rnd() * 50) }, () => Math.floor(rnd() * body.length)).sort((a, b) => a - b);
            got = tapWith(dialect, stream, body, cuts);
          }
        }, `${dialect} ${stream ? 'stream' : 'JSON'}: garbage cut anywhere does not throw`);
        t.type(got, 'object');
        if (!stream) t.strictSame(got, zero, `${dialect} JSON: garbage reads as nothing`);
      }
    }
  }
  const hostileChat = tapWith('chat', true, hostile, []);
  t.equal(hostileChat.input_tokens, 0, 'a string prompt_tokens counts as nothing');
  t.equal(hostileChat.output_tokens, 0, 'a negative completion_tokens counts as nothing');
  t.equal(hostileChat.cost, null, 'a string cost is no cost');
  t.strictSame(hostileChat.tools, [], 'tool calls without a string name are ignored');
  const hostileMessages = tapWith('messages', true, hostile, []);
  t.equal(hostileMessages.cost, null);
  t.equal(hostileMessages.output_tokens, 0);
});

t.test('a JSON body over 16 MiB is given up without throwing', async (t) => {
  const LIMIT = 16 * 1024 * 1024;
  const make = (size: number): Buffer => {
    const head = '{"id":"gen-big","model":"m/x","provider":"P","usage":{"prompt_tokens":10,"completion_tokens":5,"cost":0.25},"pad":"';
    const tail = '"}';
    return Buffer.from(head + 'x'.repeat(size - head.length - tail.length) + tail);
  };
  const feed = (body: Buffer): Usage => {
    const tap = new UsageTap('chat', false);
    for (let at = 0; at < body.length; at += 1024 * 1024) tap.write(body.subarray(at, at + 1024 * 1024));
    return tap.finish();
  };
  const atLimit = feed(make(LIMIT));
  t.equal(atLimit.input_tokens, 10, 'exactly 16 MiB is still read');
  t.equal(atLimit.cost, 0.25);
  let over: Usage | undefined;
  t.doesNotThrow(() => (over = feed(make(LIMIT + 1))));
  t.equal(over?.input_tokens, 0, 'one byte more: nothing read');
  t.equal(over?.generation_id, null);
  t.equal(over?.cost, null);
});

t.test('chat cache tokens are inside prompt_tokens; rows keep the uncached input', async (t) => {
  const chunk = (usage: object): Buffer => Buffer.from(`data: ${JSON.stringify({ id: 'gen-c', model: 'm/x', choices: [], usage })}\n\ndata: [DONE]\n\n`);
  const u = tapWith('chat', true, chunk({ prompt_tokens: 1000, completion_tokens: 50, prompt_tokens_details: { cached_tokens: 700, cache_write_tokens: 200 }, completion_tokens_details: { reasoning_tokens: 30 }, cost: 0.01 }), []);
  t.strictSame(
    { input: u.input_tokens, read: u.cache_read_tokens, written: u.cache_write_tokens, output: u.output_tokens, reasoning: u.reasoning_tokens, cost: u.cost },
    { input: 100, read: 700, written: 200, output: 50, reasoning: 30, cost: 0.01 },
  );
  const over = tapWith('chat', true, chunk({ prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 30 } }), []);
  t.equal(over.input_tokens, 0, 'more cached than prompt never goes negative');
  t.equal(over.cache_read_tokens, 30);
  const json = new UsageTap('chat', false);
  json.write(Buffer.from(JSON.stringify({ id: 'gen-j', choices: [], usage: { prompt_tokens: 90, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 40 } } })));
  t.equal(json.finish().input_tokens, 50, 'the same split for a JSON body');
});

t.test('a leading BOM, multi-line data and a 1.2 MB content line are read', async (t) => {
  const usage = { prompt_tokens: 10, completion_tokens: 4, cost: 0.5 };
  const huge = `data: {"id":"gen-x","choices":[{"delta":{"content":"${'y'.repeat(1_200_000)}"}}]}\n\n`;
  const body = Buffer.from(`\ufeffdata: {"id":"gen-1","provider":"P",\ndata: "model":"m/x","choices":[]}\n\n${huge}data: ${JSON.stringify({ id: 'gen-2', choices: [], usage })}\n\ndata: [DONE]\n\n`);
  const tap = new UsageTap('chat', true);
  for (let at = 0; at < body.length; at += 64 * 1024) tap.write(body.subarray(at, at + 64 * 1024));
  const u = tap.finish();
  t.equal(u.generation_id, 'gen-1', 'the first event, behind a BOM and split over two data lines');
  t.equal(u.model, 'm/x');
  t.equal(u.provider, 'P');
  t.equal(u.output_tokens, 4, 'the usage after the long line');
  t.equal(u.cost, 0.5);
});

// ---------------------------------------------------------------------------------------------
// The Responses dialect on bodies written the way OpenAI and OpenRouter write them (event names
// and data types, sequence numbers, `[DONE]` after response.completed), cut anywhere.

/** One SSE event of a Responses stream; `named: false` leaves out the `event:` line (the type is in the data). */
function rEvent(type: string, fields: Record<string, unknown>, seq: number, named = true): string {
  return `${named ? `event: ${type}\n` : ''}data: ${JSON.stringify({ type, sequence_number: seq, ...fields })}\n\n`;
}

interface RItem { item: Record<string, any>; deltas?: Array<[string, Record<string, unknown>]> }

/** A whole Responses stream: created, in_progress, each item added/deltas/done, then the end event (and [DONE]). */
function rStream(opts: { id: string; model: string; items: RItem[]; end: 'response.completed' | 'response.incomplete' | 'response.failed' | null; usage?: object | null; error?: object | null; provider?: string; named?: boolean; done?: boolean }): Buffer {
  const named = opts.named ?? true;
  const base = { id: opts.id, object: 'response', created_at: 1_760_000_000, model: opts.model, error: null, ...(opts.provider ? { provider: opts.provider } : {}) };
  let seq = 0;
  let out = rEvent('response.created', { response: { ...base, status: 'in_progress', output: [], usage: null } }, seq++, named);
  out += rEvent('response.in_progress', { response: { ...base, status: 'in_progress', output: [], usage: null } }, seq++, named);
  opts.items.forEach(({ item, deltas = [] }, i) => {
    out += rEvent('response.output_item.added', { output_index: i, item: { ...item, status: 'in_progress' } }, seq++, named);
    for (const [type, fields] of deltas) out += rEvent(type, { output_index: i, item_id: item.id, ...fields }, seq++, named);
    out += rEvent('response.output_item.done', { output_index: i, item }, seq++, named);
  });
  if (opts.end) {
    const status = opts.end === 'response.completed' ? 'completed' : opts.end === 'response.incomplete' ? 'incomplete' : 'failed';
    out += rEvent(opts.end, { response: { ...base, status, output: opts.items.map((x) => x.item), usage: opts.usage ?? null, error: opts.error ?? null } }, seq++, named);
  }
  if (opts.done ?? true) out += 'data: [DONE]\n\n';
  return Buffer.from(out);
}

const R_TEXT = 'Grüße — the tests pass now 😀; "quoted _call" and "error" inside text';
const rMessage = (text: string): RItem => ({
  item: { id: 'msg_1', type: 'message', status: 'completed', role: 'assistant', content: [{ type: 'output_text', text, annotations: [] }] },
  deltas: [
    ['response.content_part.added', { content_index: 0, part: { type: 'output_text', text: '' } }],
    ...text.split(' ').map((w): [string, Record<string, unknown>] => ['response.output_text.delta', { content_index: 0, delta: `${w} ` }]),
    ['response.output_text.done', { content_index: 0, text }],
  ],
});
const rCall = (name: string, args: string): RItem => ({
  item: { id: `fc_${name}`, type: 'function_call', status: 'completed', call_id: `call_${name}`, name, arguments: args },
  deltas: [['response.function_call_arguments.delta', { delta: args }], ['response.function_call_arguments.done', { arguments: args }]],
});
const rReasoning: RItem = { item: { id: 'rs_1', type: 'reasoning', summary: [{ type: 'summary_text', text: 'thinking about _call" and "error"' }], encrypted_content: 'gAAAA' } };
const rSearch: RItem = { item: { id: 'ws_1', type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'sluice' } } };
const R_USAGE = { input_tokens: 1200, input_tokens_details: { cached_tokens: 900, cache_write_tokens: 100 }, output_tokens: 57, output_tokens_details: { reasoning_tokens: 21 }, total_tokens: 1257, cost: 0.0042 };
const R_ZERO: Usage = { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost: null, provider: null, generation_id: null, model: null, tools: [], error: false };

t.test('responses streams and bodies, cut anywhere', async (t) => {
  const full: Usage = { input_tokens: 200, output_tokens: 57, cache_read_tokens: 900, cache_write_tokens: 100, reasoning_tokens: 21, cost: 0.0042, provider: null, generation_id: 'gen-r1', model: 'openai/gpt-5', tools: [], error: false };
  const cases: Array<[string, Buffer, boolean, Usage]> = [
    ['text answer', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rReasoning, rMessage(R_TEXT)], end: 'response.completed', usage: R_USAGE }), true, full],
    ['text answer without event lines', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rReasoning, rMessage(R_TEXT)], end: 'response.completed', usage: R_USAGE, named: false }), true, full],
    ['function calls and a hosted web search, a provider named', rStream({ id: 'gen-r1', model: 'openai/gpt-5', provider: 'OpenAI', items: [rSearch, rCall('exec_command', '{"cmd":"echo \\"error\\" my_call\\""}'), rCall('apply_patch', '{}'), rCall('exec_command', '{}')], end: 'response.completed', usage: R_USAGE }), true, { ...full, provider: 'OpenAI', tools: ['web_search', 'exec_command', 'apply_patch'] }],
    ['calls without event lines', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rCall('exec_command', '{}'), rSearch], end: 'response.completed', usage: R_USAGE, named: false }), true, { ...full, tools: ['exec_command', 'web_search'] }],
    ['incomplete (the output limit): usage, no error', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rMessage('cut sh')], end: 'response.incomplete', usage: R_USAGE }), true, full],
    ['failed, with the usage so far', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rMessage('par')], end: 'response.failed', usage: R_USAGE, error: { code: 'server_error', message: 'boom' } }), true, { ...full, error: true }],
    ['an error event, then nothing', Buffer.concat([rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [], end: null, done: false }), Buffer.from(rEvent('error', { code: 'server_error', message: 'boom', param: null }, 2))]), true, { ...R_ZERO, generation_id: 'gen-r1', model: 'openai/gpt-5', error: true }],
    ['the client left mid-answer: the id to reconcile', rStream({ id: 'gen-r1', model: 'openai/gpt-5', items: [rMessage(R_TEXT)], end: null, done: false }).subarray(0, 1400), true, { ...R_ZERO, generation_id: 'gen-r1', model: 'openai/gpt-5' }],
    ['JSON: calls, search and usage', Buffer.from(JSON.stringify({ id: 'gen-r1', object: 'response', status: 'completed', model: 'openai/gpt-5', error: null, output: [rReasoning.item, rSearch.item, rCall('exec_command', '{}').item, rMessage(R_TEXT).item], usage: R_USAGE })), false, { ...full, tools: ['web_search', 'exec_command'] }],
    ['JSON: a failed response', Buffer.from(JSON.stringify({ id: 'gen-r1', object: 'response', status: 'failed', model: 'openai/gpt-5', error: { code: 'server_error', message: 'x' }, output: [], usage: null })), false, { ...R_ZERO, generation_id: 'gen-r1', model: 'openai/gpt-5', error: true }],
    ["JSON: the router's error body", Buffer.from(JSON.stringify({ error: { code: 400, message: 'x is not a valid model ID' } })), false, { ...R_ZERO, error: true }],
  ];
  let seed = 500;
  for (const [name, body, stream, want] of cases) {
    t.strictSame(tapWith('responses', stream, body, []), want, `${name}: one chunk`);
    t.strictSame(firstMismatch('responses', stream, body, want, seed++, 40), undefined, `${name}: every cut point and random cut sets`);
  }
  const text = cases[0]![1].toString();
  t.strictSame(firstMismatch('responses', true, Buffer.from(text.replaceAll('\n', '\r\n')), full, seed++, 10), undefined, 'CRLF line endings');
  t.strictSame(firstMismatch('responses', true, Buffer.from(`: OPENROUTER PROCESSING\n\n${text}`), full, seed++, 10), undefined, 'comment lines');
});

t.test('responses: the event count numbers an appended error; usage never negative; garbage never throws', async (t) => {
  const body = rStream({ id: 'gen-r2', model: 'm/x', items: [rMessage('a b c')], end: 'response.completed', usage: R_USAGE });
  const tap = new UsageTap('responses', true);
  tap.write(body);
  // created, in_progress, added, part added, 3 deltas, text done, done, completed: 10 events (the [DONE] is none).
  t.equal(tap.responseEvents, 10, 'the next sequence number');
  const over = tapWith('responses', false, Buffer.from(JSON.stringify({ id: 'g', usage: { input_tokens: 10, input_tokens_details: { cached_tokens: 30 }, output_tokens: -4, output_tokens_details: null, cost: '1' } })), []);
  t.strictSame([over.input_tokens, over.cache_read_tokens, over.output_tokens, over.reasoning_tokens, over.cost], [0, 30, 0, 0, null]);
  const hostile = Buffer.from([
    'event: response.completed', 'data: null', '', 'event: response.completed', 'data: {"response":7}', '',
    'event: response.output_item.done', 'data: {"item":{"type":"function_call","name":5},"x":"_call\\""}', '',
    'event: response.output_item.added', 'data: {"item":{"type":"_call"}}', '',
    'data: {"type":"response.completed","response":{"usage":{"input_tokens":"12"}}}', '', 'data: {"type":"error"', '',
  ].join('\n'));
  let got: Usage | undefined;
  t.doesNotThrow(() => (got = tapWith('responses', true, hostile, [7, 50, 51, 120])));
  t.strictSame(got?.tools, [], 'nameless and empty-named calls are no tools');
  t.equal(got?.input_tokens, 0);
});
