// The usage tap: reads a copy of the upstream response while its bytes stream to the client
// untouched, and yields tokens, cost, provider, generation id and the tools the model called.
// All three dialects, SSE or JSON, with chunks cut at any byte (TextDecoder keeps split characters,
// eventsource-parser keeps split lines). It must never throw into the stream: every failure is
// swallowed and only marks the result unreadable. Hot path: events are JSON-parsed only when
// their name or text says they can carry something the row needs (never a text delta).

import { createParser, type EventSourceMessage, type EventSourceParser } from 'eventsource-parser';
import type { Dialect } from '../errors.ts';

/** Distinct tool names a row keeps (providers allow 64-character names; agents define a few dozen tools). */
export const MAX_TOOLS = 64;
export const MAX_TOOL_NAME = 128;

export interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  reasoning_tokens: number;
  /** The router's reported cost in USD, or null when it reported none. */
  cost: number | null;
  provider: string | null;
  generation_id: string | null;
  model: string | null;
  tools: string[];
  /** An error arrived in-band (a chat chunk with `error`, a messages `event: error`, a Responses `error` or failed response). */
  error: boolean;
}

/**
 * Responses events the row needs (the rest are deltas and part bookkeeping). In a stream without
 * `event:` lines these markers find them in the data: a JSON string escapes its quotes, so a
 * marker can only match the event's own structure, never text the model wrote.
 */
const RESPONSES_MARKERS = ['"response.created"', '"response.in_progress"', '"response.completed"', '"response.incomplete"', '"response.failed"', '_call"', '"error"'];

/**
 * The tool an output item records: a function or custom tool by its name, a hosted tool by its
 * item type (`web_search_call` → web_search, `code_interpreter_call` → code_interpreter).
 */
function responsesTool(item: any): string | undefined {
  const type = item?.type;
  if (typeof type !== 'string' || !type.endsWith('_call')) return undefined;
  if (type === 'function_call' || type === 'custom_tool_call' || type === 'mcp_call') return typeof item.name === 'string' && item.name ? item.name : undefined;
  return type.slice(0, -5);
}

interface UsageNames { input: string; inDetails: string; output: string; outDetails: string }
const CHAT_USAGE: UsageNames = { input: 'prompt_tokens', inDetails: 'prompt_tokens_details', output: 'completion_tokens', outDetails: 'completion_tokens_details' };
const RESPONSES_USAGE: UsageNames = { input: 'input_tokens', inDetails: 'input_tokens_details', output: 'output_tokens', outDetails: 'output_tokens_details' };

const MAX_JSON_BYTES = 16 * 1024 * 1024;

/**
 * Bytes that mark a chunk worth parsing once a chat stream's first chunk is read (the same test
 * onEvent makes on each event's data), and the events a messages stream's row needs. A chunk of
 * whole events with none of them is skipped without being decoded: a text delta costs one search.
 */
const CHAT_MARKERS = ['"usage"', '"tool_calls"', '"error"'].map((m) => Buffer.from(m));
const MESSAGES_MARKERS = ['message_start', 'message_delta', 'content_block_start', 'error'].map((m) => Buffer.from(m));

/** Whether a chunk ends an event (a blank line: LF LF, CRLF CRLF or CR CR). */
function endsEvent(c: Buffer): boolean {
  const n = c.length;
  const last = c[n - 1];
  if (last === 0x0a) return c[n - 2] === 0x0a || (c[n - 2] === 0x0d && c[n - 3] === 0x0a);
  return last === 0x0d && c[n - 2] === 0x0d;
}

function n(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : 0;
}

export class UsageTap {
  readonly usage: Usage = {
    input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0,
    cost: null, provider: null, generation_id: null, model: null, tools: [], error: false,
  };
  private readonly dialect: Dialect;
  private readonly parser?: EventSourceParser;
  private readonly decoder = new TextDecoder();
  private chunks: Buffer[] | null = null;
  private size = 0;
  private broken = false;
  /** The parser holds no part of an event: the last chunk fed to it ended one. */
  private aligned = true;
  /** Responses events seen: the next `sequence_number` of a stream numbered from 0, for an error sluice appends. */
  responseEvents = 0;

  constructor(dialect: Dialect, stream: boolean) {
    this.dialect = dialect;
    if (stream) this.parser = createParser({ onEvent: (ev) => this.onEvent(ev) });
    else this.chunks = [];
  }

  /** Takes a copy of one response chunk. Never throws. */
  write(chunk: Buffer): void {
    if (this.broken) return;
    try {
      if (this.parser) {
        if (this.aligned && this.skippable(chunk)) return;
        this.parser.feed(this.decoder.decode(chunk, { stream: true }));
        this.aligned = endsEvent(chunk);
      } else if (this.chunks) {
        this.size += chunk.length;
        if (this.size > MAX_JSON_BYTES) this.chunks = null;
        else this.chunks.push(chunk);
      }
    } catch {
      this.broken = true;
    }
  }

  /**
   * A chunk of whole events none of which the row needs (chat after its first chunk, messages).
   * Responses streams are always parsed: their events are counted for an error sluice may append.
   */
  private skippable(chunk: Buffer): boolean {
    const markers = this.dialect === 'chat' ? (this.usage.generation_id !== null ? CHAT_MARKERS : undefined) : this.dialect === 'messages' ? MESSAGES_MARKERS : undefined;
    if (!markers || !endsEvent(chunk)) return false;
    for (const m of markers) if (chunk.indexOf(m) !== -1) return false;
    return true;
  }

  /** The usage read so far; for a JSON body, parses it now. Never throws. */
  finish(): Usage {
    if (this.chunks && !this.broken) {
      try {
        const body = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks, this.size);
        this.readJson(JSON.parse(body.toString('utf8')));
      } catch {
        this.broken = true;
      }
      this.chunks = null;
    }
    return this.usage;
  }

  /** Reads a complete JSON response body of the tap's dialect. */
  readJson(json: unknown): void {
    if (this.dialect === 'chat') this.readChat(json, false);
    else if (this.dialect === 'responses') this.readResponse(json);
    else this.readMessage(json);
  }

  private onEvent(ev: EventSourceMessage): void {
    try {
      if (this.dialect === 'responses') this.onResponsesEvent(ev);
      else if (this.dialect === 'chat') {
        const d = ev.data;
        // Only the first chunk (ids, provider), usage, tool calls and errors matter.
        if (d === '[DONE]') return;
        if (this.usage.generation_id !== null && !d.includes('"usage"') && !d.includes('"tool_calls"') && !d.includes('"error"')) return;
        this.readChat(JSON.parse(d), true);
      } else {
        switch (ev.event) {
          case 'message_start': {
            const m = JSON.parse(ev.data).message;
            this.readMessage(m);
            break;
          }
          case 'message_delta':
            this.readMessageUsage(JSON.parse(ev.data).usage);
            break;
          case 'content_block_start': {
            const block = JSON.parse(ev.data).content_block;
            if ((block?.type === 'tool_use' || block?.type === 'server_tool_use') && typeof block.name === 'string') this.tool(block.name);
            break;
          }
          case 'error':
            this.usage.error = true;
            break;
        }
      }
    } catch {
      // A malformed event costs only its own fields; the stream itself is never touched.
    }
  }

  private onResponsesEvent(ev: EventSourceMessage): void {
    const d = ev.data;
    if (d === '[DONE]') return;
    this.responseEvents++;
    let kind = ev.event;
    let j: any;
    if (kind === undefined) {
      if (!RESPONSES_MARKERS.some((m) => d.includes(m))) return;
      j = JSON.parse(d);
      kind = j?.type;
    }
    switch (kind) {
      case 'response.created':
      case 'response.in_progress':
        // The id arrives first: a client that leaves mid-stream still leaves a generation to reconcile.
        if (this.usage.generation_id === null) this.readResponse((j ?? JSON.parse(d))?.response);
        break;
      case 'response.output_item.added':
      case 'response.output_item.done': {
        if (!d.includes('_call"')) break; // a message or reasoning item: no tool
        const name = responsesTool((j ?? JSON.parse(d))?.item);
        if (name) this.tool(name);
        break;
      }
      case 'response.completed':
      case 'response.incomplete':
        this.readResponse((j ?? JSON.parse(d))?.response);
        break;
      case 'response.failed':
        this.usage.error = true;
        this.readResponse((j ?? JSON.parse(d))?.response);
        break;
      case 'error':
        this.usage.error = true;
        break;
    }
  }

  /**
   * Notes a tool the model called. The names are the client's own (its tool definitions), so the
   * row keeps at most MAX_TOOLS of them, each at most MAX_TOOL_NAME characters: the check for a
   * name already kept stays bounded however many calls a response makes.
   */
  private tool(name: string): void {
    const tools = this.usage.tools;
    if (tools.length >= MAX_TOOLS) return;
    if (name.length > MAX_TOOL_NAME) name = name.slice(0, MAX_TOOL_NAME);
    if (!tools.includes(name)) tools.push(name);
  }

  private readChat(j: any, streamed: boolean): void {
    if (!j || typeof j !== 'object') return;
    const u = this.usage;
    if (typeof j.id === 'string' && u.generation_id === null) u.generation_id = j.id;
    if (typeof j.provider === 'string') u.provider = j.provider;
    if (typeof j.model === 'string') u.model = j.model;
    if (j.error) u.error = true;
    if (Array.isArray(j.choices)) {
      for (const c of j.choices) {
        const calls = streamed ? c?.delta?.tool_calls : c?.message?.tool_calls;
        if (Array.isArray(calls)) for (const call of calls) if (typeof call?.function?.name === 'string' && call.function.name) this.tool(call.function.name);
        if (c?.finish_reason === 'error' || c?.error) u.error = true;
      }
    }
    this.readOpenAiUsage(j.usage, CHAT_USAGE);
  }

  private readMessage(m: any): void {
    if (!m || typeof m !== 'object') return;
    const u = this.usage;
    if (typeof m.id === 'string') u.generation_id = m.id;
    if (typeof m.provider === 'string') u.provider = m.provider;
    if (typeof m.model === 'string') u.model = m.model;
    if (m.type === 'error') u.error = true;
    if (Array.isArray(m.content)) for (const b of m.content) if ((b?.type === 'tool_use' || b?.type === 'server_tool_use') && typeof b.name === 'string') this.tool(b.name);
    this.readMessageUsage(m.usage);
  }

  /** A Responses object: the JSON body, or the `response` of a created, completed, incomplete or failed event. */
  private readResponse(r: any): void {
    if (!r || typeof r !== 'object') return;
    const u = this.usage;
    if (typeof r.id === 'string' && u.generation_id === null) u.generation_id = r.id;
    if (typeof r.provider === 'string') u.provider = r.provider;
    if (typeof r.model === 'string') u.model = r.model;
    if (r.status === 'failed' || (r.error !== null && typeof r.error === 'object')) u.error = true;
    if (Array.isArray(r.output)) {
      for (const item of r.output) {
        const name = responsesTool(item);
        if (name) this.tool(name);
      }
    }
    this.readOpenAiUsage(r.usage, RESPONSES_USAGE);
  }

  /**
   * OpenAI-style usage (chat and responses name the same figures differently). Both count cached
   * and cache-written tokens inside the input figure; rows keep Anthropic's split (uncached input).
   */
  private readOpenAiUsage(usage: any, k: UsageNames): void {
    if (!usage || typeof usage !== 'object') return;
    const u = this.usage;
    const cached = n(usage[k.inDetails]?.cached_tokens);
    const written = n(usage[k.inDetails]?.cache_write_tokens);
    u.input_tokens = Math.max(0, n(usage[k.input]) - cached - written);
    u.cache_read_tokens = cached;
    u.cache_write_tokens = written;
    u.output_tokens = n(usage[k.output]);
    u.reasoning_tokens = n(usage[k.outDetails]?.reasoning_tokens);
    if (typeof usage.cost === 'number' && Number.isFinite(usage.cost)) u.cost = usage.cost;
  }

  /** Messages usage is cumulative: each field present replaces the one seen before. */
  private readMessageUsage(usage: any): void {
    if (!usage || typeof usage !== 'object') return;
    const u = this.usage;
    if (typeof usage.input_tokens === 'number') u.input_tokens = n(usage.input_tokens);
    if (typeof usage.output_tokens === 'number') u.output_tokens = n(usage.output_tokens);
    if (typeof usage.cache_read_input_tokens === 'number') u.cache_read_tokens = n(usage.cache_read_input_tokens);
    if (typeof usage.cache_creation_input_tokens === 'number') u.cache_write_tokens = n(usage.cache_creation_input_tokens);
    const reasoning = usage.output_tokens_details?.reasoning_tokens ?? usage.output_tokens_details?.thinking_tokens;
    if (typeof reasoning === 'number') u.reasoning_tokens = n(reasoning);
    if (typeof usage.cost === 'number' && Number.isFinite(usage.cost)) u.cost = usage.cost;
  }
}

/** Usage of an already-parsed JSON response (sluice's own calls, such as the auto decision). Never throws. */
export function usageOf(dialect: Dialect, json: unknown): Usage {
  const tap = new UsageTap(dialect, false);
  try {
    tap.readJson(json);
  } catch {
    // A malformed answer costs only its fields, as in the stream.
  }
  return tap.usage;
}
