// The simulated upstream router: a plain node:http stand-in for OpenRouter's /api/v1 (chat
// completions, the Anthropic-shaped messages endpoint, the models catalog, key management and the
// key readout), steerable per request through the `x-sim` header. Tests, the benchmark baseline
// and the README demo run against it. It must never log per request, reach the network, or buffer
// a stream: every SSE event is its own res.write and backpressure is respected.

import { createHash, randomBytes } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface SimRequest {
  method: string;
  /** Path including the query string. */
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The parsed body, or undefined when it is empty or not JSON. */
  json: any;
  /** True when the caller closed the connection before the response finished. */
  aborted: boolean;
}

export interface SimulatedRouter {
  /** http://host:port, no trailing slash. */
  url: string;
  port: number;
  received: SimRequest[];
  /** 'request'(SimRequest) once the body is read; 'closed'(SimRequest) when the response finished or the connection closed. */
  events: EventEmitter;
  /** All-time cost (USD) the sim charged to this bearer key. */
  usageByKey(key: string): number;
  close(): Promise<void>;
}

export interface SimOptions {
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** Bearer that the management API (/api/v1/keys) accepts; without it that API answers 401. */
  provisioningKey?: string;
  /** Keep every request in `received` (default true; the benchmark turns it off). */
  record?: boolean;
  /** Clock in epoch milliseconds (ids, `created`, usage periods); defaults to Date.now. */
  now?: () => number;
}

/** One item of GET /api/v1/models (OpenRouter's `Model`, protocols.md §3). */
export interface CatalogModel {
  id: string;
  canonical_slug: string;
  name: string;
  created: number;
  description?: string;
  context_length: number | null;
  architecture: {
    modality: string | null;
    input_modalities: string[];
    output_modalities: string[];
    tokenizer?: string;
    instruct_type?: string | null;
  };
  pricing: {
    prompt: string;
    completion: string;
    request?: string;
    image?: string;
    web_search?: string;
    internal_reasoning?: string;
    input_cache_read?: string;
    input_cache_write?: string;
    [k: string]: unknown;
  };
  top_provider: { context_length?: number | null; max_completion_tokens?: number | null; is_moderated: boolean };
  per_request_limits: { prompt_tokens: number; completion_tokens: number } | null;
  supported_parameters: string[];
  default_parameters: Record<string, number | null> | null;
  supported_voices: string[] | null;
  hugging_face_id?: string | null;
  links: { details: string };
}

// ---------------------------------------------------------------------------------------------
// Catalog

const GEMINI_PARAMS = ['include_reasoning', 'max_tokens', 'reasoning', 'response_format', 'seed', 'stop', 'structured_outputs', 'temperature', 'tool_choice', 'tools', 'top_p'];
const OPENAI_PARAMS = ['frequency_penalty', 'logit_bias', 'logprobs', 'max_tokens', 'presence_penalty', 'response_format', 'seed', 'stop', 'structured_outputs', 'temperature', 'tool_choice', 'tools', 'top_logprobs', 'top_p'];
const OPENAI_REASONING_PARAMS = ['include_reasoning', 'max_tokens', 'reasoning', 'response_format', 'seed', 'structured_outputs', 'tool_choice', 'tools'];
const CLAUDE_PARAMS = ['include_reasoning', 'max_tokens', 'reasoning', 'response_format', 'stop', 'structured_outputs', 'temperature', 'tool_choice', 'tools', 'top_k', 'top_p'];
const LLAMA_PARAMS = ['frequency_penalty', 'max_tokens', 'min_p', 'presence_penalty', 'repetition_penalty', 'response_format', 'seed', 'stop', 'temperature', 'tool_choice', 'tools', 'top_k', 'top_p'];

interface ModelSeed {
  id: string;
  slug: string;
  name: string;
  created: number;
  context: number;
  modality: string;
  inputs: string[];
  tokenizer: string;
  prompt: string;
  completion: string;
  cacheRead: string;
  cacheWrite: string;
  maxOut: number | null;
  moderated: boolean;
  params: string[];
  hf?: string;
}

function catalogModel(s: ModelSeed): CatalogModel {
  return {
    id: s.id,
    canonical_slug: s.slug,
    name: s.name,
    created: s.created,
    description: `${s.name} (simulated catalog entry).`,
    context_length: s.context,
    architecture: {
      modality: s.modality,
      input_modalities: s.inputs,
      output_modalities: ['text'],
      tokenizer: s.tokenizer,
      instruct_type: s.tokenizer === 'Llama3' ? 'llama3' : null,
    },
    pricing: {
      prompt: s.prompt,
      completion: s.completion,
      request: '0',
      image: '0',
      web_search: '0',
      internal_reasoning: '0',
      input_cache_read: s.cacheRead,
      input_cache_write: s.cacheWrite,
    },
    top_provider: { context_length: s.context, max_completion_tokens: s.maxOut, is_moderated: s.moderated },
    per_request_limits: null,
    supported_parameters: s.params,
    default_parameters: null,
    supported_voices: null,
    hugging_face_id: s.hf ?? '',
    links: { details: `/api/v1/models/${s.id}/endpoints` },
  };
}

const TEXT_IMAGE_FILE = ['text', 'image', 'file'];
const GEMINI_INPUTS = ['text', 'image', 'file', 'audio', 'video'];

export const SIM_CATALOG: CatalogModel[] = [
  catalogModel({ id: 'google/gemini-2.5-flash', slug: 'google/gemini-2.5-flash', name: 'Google: Gemini 2.5 Flash', created: 1750172488, context: 1048576, modality: 'text+image->text', inputs: GEMINI_INPUTS, tokenizer: 'Gemini', prompt: '0.0000003', completion: '0.0000025', cacheRead: '0.00000003', cacheWrite: '0.0000003833', maxOut: 65535, moderated: false, params: GEMINI_PARAMS }),
  catalogModel({ id: 'google/gemini-2.5-flash-lite', slug: 'google/gemini-2.5-flash-lite', name: 'Google: Gemini 2.5 Flash Lite', created: 1753200276, context: 1048576, modality: 'text+image->text', inputs: GEMINI_INPUTS, tokenizer: 'Gemini', prompt: '0.0000001', completion: '0.0000004', cacheRead: '0.00000001', cacheWrite: '0.0000001833', maxOut: 65535, moderated: false, params: GEMINI_PARAMS }),
  catalogModel({ id: 'google/gemini-2.5-pro', slug: 'google/gemini-2.5-pro', name: 'Google: Gemini 2.5 Pro', created: 1750169544, context: 1048576, modality: 'text+image->text', inputs: GEMINI_INPUTS, tokenizer: 'Gemini', prompt: '0.00000125', completion: '0.00001', cacheRead: '0.00000031', cacheWrite: '0.000001625', maxOut: 65536, moderated: false, params: GEMINI_PARAMS }),
  catalogModel({ id: 'openai/gpt-4.1-mini', slug: 'openai/gpt-4.1-mini-2025-04-14', name: 'OpenAI: GPT-4.1 Mini', created: 1744651381, context: 1047576, modality: 'text+image->text', inputs: ['image', 'text', 'file'], tokenizer: 'GPT', prompt: '0.0000004', completion: '0.0000016', cacheRead: '0.0000001', cacheWrite: '0', maxOut: 32768, moderated: true, params: OPENAI_PARAMS }),
  catalogModel({ id: 'openai/gpt-5', slug: 'openai/gpt-5-2025-08-07', name: 'OpenAI: GPT-5', created: 1754587413, context: 400000, modality: 'text+image->text', inputs: ['text', 'image', 'file'], tokenizer: 'GPT', prompt: '0.00000125', completion: '0.00001', cacheRead: '0.000000125', cacheWrite: '0', maxOut: 128000, moderated: true, params: OPENAI_REASONING_PARAMS }),
  catalogModel({ id: 'openai/gpt-5-mini', slug: 'openai/gpt-5-mini-2025-08-07', name: 'OpenAI: GPT-5 Mini', created: 1754587407, context: 400000, modality: 'text+image->text', inputs: ['text', 'image', 'file'], tokenizer: 'GPT', prompt: '0.00000025', completion: '0.000002', cacheRead: '0.000000025', cacheWrite: '0', maxOut: 128000, moderated: true, params: OPENAI_REASONING_PARAMS }),
  catalogModel({ id: 'anthropic/claude-sonnet-4.5', slug: 'anthropic/claude-4.5-sonnet-20250929', name: 'Anthropic: Claude Sonnet 4.5', created: 1759161676, context: 1000000, modality: 'text+image->text', inputs: TEXT_IMAGE_FILE, tokenizer: 'Claude', prompt: '0.000003', completion: '0.000015', cacheRead: '0.0000003', cacheWrite: '0.00000375', maxOut: 64000, moderated: false, params: CLAUDE_PARAMS }),
  catalogModel({ id: 'anthropic/claude-haiku-4.5', slug: 'anthropic/claude-4.5-haiku-20251001', name: 'Anthropic: Claude Haiku 4.5', created: 1760547638, context: 200000, modality: 'text+image->text', inputs: TEXT_IMAGE_FILE, tokenizer: 'Claude', prompt: '0.000001', completion: '0.000005', cacheRead: '0.0000001', cacheWrite: '0.00000125', maxOut: 64000, moderated: false, params: CLAUDE_PARAMS }),
  catalogModel({ id: 'anthropic/claude-opus-4.1', slug: 'anthropic/claude-4.1-opus-20250805', name: 'Anthropic: Claude Opus 4.1', created: 1754411591, context: 200000, modality: 'text+image->text', inputs: TEXT_IMAGE_FILE, tokenizer: 'Claude', prompt: '0.000015', completion: '0.000075', cacheRead: '0.0000015', cacheWrite: '0.00001875', maxOut: 32000, moderated: false, params: CLAUDE_PARAMS }),
  catalogModel({ id: 'meta-llama/llama-3.3-70b-instruct', slug: 'meta-llama/llama-3.3-70b-instruct', name: 'Meta: Llama 3.3 70B Instruct', created: 1733506137, context: 131072, modality: 'text->text', inputs: ['text'], tokenizer: 'Llama3', prompt: '0.00000013', completion: '0.00000039', cacheRead: '0', cacheWrite: '0', maxOut: null, moderated: false, params: LLAMA_PARAMS, hf: 'meta-llama/Llama-3.3-70B-Instruct' }),
];

/** Arguments of every simulated tool call (chat `function.arguments` / messages `input`). */
export const SIM_TOOL_INPUT = { location: 'Oslo', unit: 'celsius' };

// The serving provider's display name by model author; unknown authors are served by DeepInfra.
const PROVIDER_BY_AUTHOR: Record<string, string> = { google: 'Google', openai: 'OpenAI', anthropic: 'Anthropic', 'meta-llama': 'DeepInfra' };
// Raw finish reasons per provider, as OpenRouter passes them in native_finish_reason.
const NATIVE_FINISH: Record<string, { stop: string; tool: string }> = {
  Google: { stop: 'STOP', tool: 'STOP' },
  Anthropic: { stop: 'end_turn', tool: 'tool_use' },
};
const NATIVE_FINISH_DEFAULT = { stop: 'stop', tool: 'tool_calls' };
const UNKNOWN_PRICE = { prompt: 0.000001, completion: 0.000002, cacheRead: 0.000001, cacheWrite: 0.000001 };

interface Price { prompt: number; completion: number; cacheRead: number; cacheWrite: number }

// ---------------------------------------------------------------------------------------------
// Directives (`x-sim: chunks=20;tool=get_weather`)

interface Directives {
  status: number;
  chunks: number;
  bytes: number;
  tool: string;
  failAfter: number;
  dropAfter: number;
  silentAfter: number;
  hang: boolean;
  delayMs: number;
  chunkDelayMs: number;
  usageChoice: boolean;
  noCost: boolean;
  provider: string;
  cached: number;
  cacheWrite: number;
  reasoning: number;
}

// -1 means "not asked for"; shared by every request that sends no x-sim header.
const NO_DIRECTIVES: Readonly<Directives> = Object.freeze({
  status: 0, chunks: 5, bytes: -1, tool: '', failAfter: -1, dropAfter: -1, silentAfter: -1, hang: false,
  delayMs: 0, chunkDelayMs: 0, usageChoice: false, noCost: false, provider: '', cached: 0, cacheWrite: 0, reasoning: 0,
});
const MAX_CHUNKS = 100_000;
const MAX_BYTES = 64 * 1024 * 1024;

function count(v: string, max: number): number {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) && n >= 0 ? Math.min(n, max) : -1;
}

function parseDirectives(raw: string | string[] | undefined): Readonly<Directives> {
  if (raw === undefined) return NO_DIRECTIVES;
  const d: Directives = { ...NO_DIRECTIVES };
  for (const item of (Array.isArray(raw) ? raw.join(';') : raw).split(';')) {
    const eq = item.indexOf('=');
    const k = (eq < 0 ? item : item.slice(0, eq)).trim().toLowerCase();
    const v = eq < 0 ? '' : item.slice(eq + 1).trim();
    switch (k) {
      case 'status': { const s = count(v, 599); d.status = s >= 400 ? s : 0; break; }
      case 'chunks': { const c = count(v, MAX_CHUNKS); if (c >= 0) d.chunks = c; break; }
      case 'bytes': d.bytes = count(v, MAX_BYTES); break;
      case 'tool': d.tool = v; break;
      case 'fail-after': d.failAfter = count(v, MAX_CHUNKS); break;
      case 'drop-after': d.dropAfter = count(v, MAX_CHUNKS); break;
      case 'silent-after': d.silentAfter = count(v, MAX_CHUNKS); break;
      case 'hang': d.hang = true; break;
      case 'delay-ms': d.delayMs = Math.max(0, count(v, 3_600_000)); break;
      case 'chunk-delay-ms': d.chunkDelayMs = Math.max(0, count(v, 3_600_000)); break;
      case 'usage': d.usageChoice = v === 'choice'; break;
      case 'no-cost': d.noCost = true; break;
      case 'provider': d.provider = v; break;
      case 'cached': d.cached = Math.max(0, count(v, 1e9)); break;
      case 'cache-write': d.cacheWrite = Math.max(0, count(v, 1e9)); break;
      case 'reasoning': d.reasoning = Math.max(0, count(v, 1e9)); break;
      default: break; // unknown items are ignored, like unknown fields upstream
    }
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Reply content

interface ContentPlan {
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
  for (const b of content) if (b !== null && typeof b === 'object' && b.type === 'text' && typeof b.text === 'string') s += b.text;
  return s;
}

function lastUserText(json: any): string {
  const msgs = json?.messages;
  if (!Array.isArray(msgs)) return '';
  for (let i = msgs.length - 1; i >= 0; i--) if (msgs[i]?.role === 'user') return textOf(msgs[i].content);
  return '';
}

function contentPlan(json: any, d: Readonly<Directives>): ContentPlan {
  const text = lastUserText(json);
  const m = text.includes('[[reply:') ? REPLY_RE.exec(text) : null;
  return m === null ? defaultPlan(d) : plan(words(m[1]!));
}

const TOOL_ARGS = JSON.stringify(SIM_TOOL_INPUT);
// Argument fragments cut mid-token, as real streams do.
const TOOL_FRAGMENTS = [TOOL_ARGS.slice(0, 9), TOOL_ARGS.slice(9, 20), TOOL_ARGS.slice(20)];

// ---------------------------------------------------------------------------------------------
// Errors in both dialects

interface ErrorKind { message: string; errorType: string; anthropic: string; provider: boolean }

function errorKind(status: number): ErrorKind {
  switch (status) {
    case 400: return { message: 'Provider returned error', errorType: 'invalid_request', anthropic: 'invalid_request_error', provider: true };
    case 401: return { message: 'User not found.', errorType: 'authentication', anthropic: 'authentication_error', provider: false };
    case 402: return { message: 'This request requires more credits, or fewer max_tokens. To increase, visit https://openrouter.ai/settings/credits and add more credits', errorType: 'payment_required', anthropic: 'billing_error', provider: false };
    case 403: return { message: 'Your request was flagged by moderation', errorType: 'permission_denied', anthropic: 'permission_error', provider: false };
    case 404: return { message: 'No endpoints found for this model', errorType: 'not_found', anthropic: 'not_found_error', provider: false };
    case 408: return { message: 'Request timed out', errorType: 'timeout', anthropic: 'timeout_error', provider: true };
    case 413: return { message: 'Payload too large', errorType: 'payload_too_large', anthropic: 'request_too_large', provider: false };
    case 429: return { message: 'Provider returned error', errorType: 'rate_limit_exceeded', anthropic: 'rate_limit_error', provider: true };
    case 500: return { message: 'Internal Server Error', errorType: 'server', anthropic: 'api_error', provider: false };
    case 502: return { message: 'Provider returned error', errorType: 'provider_unavailable', anthropic: 'api_error', provider: true };
    case 503: return { message: 'Service temporarily unavailable', errorType: 'provider_overloaded', anthropic: 'overloaded_error', provider: true };
    case 504: case 524: return { message: 'Request timed out', errorType: 'timeout', anthropic: 'timeout_error', provider: true };
    case 529: return { message: 'Provider returned error', errorType: 'provider_overloaded', anthropic: 'overloaded_error', provider: true };
    default: return status < 500
      ? { message: `Simulated error ${status}`, errorType: 'invalid_request', anthropic: 'invalid_request_error', provider: false }
      : { message: `Simulated error ${status}`, errorType: 'unmapped', anthropic: 'api_error', provider: false };
  }
}

function chatErrorBody(status: number, message: string, metadata?: Record<string, unknown>): string {
  return JSON.stringify({ error: metadata === undefined ? { message, code: status } : { message, code: status, metadata } });
}

function messagesErrorBody(type: string, message: string, errorType: string): string {
  return JSON.stringify({ type: 'error', error: { type, message, error_type: errorType }, request_id: null });
}

type Dialect = 'chat' | 'messages';

function simulatedErrorBody(dialect: Dialect, status: number, model: string, provider: string): string {
  const k = errorKind(status);
  if (dialect === 'messages') return messagesErrorBody(k.anthropic, k.message, k.errorType);
  const metadata: Record<string, unknown> = { error_type: k.errorType, provider_name: k.provider ? provider : null };
  if (k.provider) metadata.raw = `${model} returned HTTP ${status} (simulated)`;
  return chatErrorBody(status, k.message, metadata);
}

// Static bodies, serialised once.
const NOT_FOUND = chatErrorBody(404, 'Not Found');
const METHOD_NOT_ALLOWED = chatErrorBody(405, 'Method Not Allowed');
const MISSING_AUTH = chatErrorBody(401, 'Missing Authentication header');
const MISSING_AUTH_MESSAGES = messagesErrorBody('authentication_error', 'Missing Authentication header', 'authentication');
const BAD_JSON = chatErrorBody(400, 'Invalid JSON body: expected a JSON object');
const BAD_JSON_MESSAGES = messagesErrorBody('invalid_request_error', 'Invalid JSON body: expected a JSON object', 'invalid_request');
const MGMT_UNAUTHORIZED = JSON.stringify({ error: { code: 401, message: 'Invalid or missing management key' } });
const KEY_NOT_FOUND = JSON.stringify({ error: { code: 404, message: 'Key not found' } });
const JSON_HEADERS = { 'content-type': 'application/json' };
const RETRY_AFTER = { 'retry-after': '7' };

// ---------------------------------------------------------------------------------------------
// Usage accounting per bearer key, by UTC day / Monday week / month

interface Usage { total: number; day: number; daily: number; week: number; weekly: number; month: number; monthly: number }
interface Periods { day: number; week: number; month: number }

function periods(ms: number): Periods {
  const day = Math.floor(ms / 86_400_000);
  const d = new Date(ms);
  // 1970-01-01 was a Thursday; +3 makes weeks start on Monday.
  return { day, week: Math.floor((day + 3) / 7), month: d.getUTCFullYear() * 12 + d.getUTCMonth() };
}

const round10 = (x: number): number => Math.round(x * 1e10) / 1e10;

interface UsageView { usage: number; usage_daily: number; usage_weekly: number; usage_monthly: number }

function viewUsage(u: Usage | undefined, p: Periods): UsageView {
  if (u === undefined) return { usage: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0 };
  return {
    usage: u.total,
    usage_daily: u.day === p.day ? u.daily : 0,
    usage_weekly: u.week === p.week ? u.weekly : 0,
    usage_monthly: u.month === p.month ? u.monthly : 0,
  };
}

type LimitReset = 'daily' | 'weekly' | 'monthly' | null;

function usageInLimitPeriod(v: UsageView, reset: LimitReset): number {
  return reset === 'daily' ? v.usage_daily : reset === 'weekly' ? v.usage_weekly : reset === 'monthly' ? v.usage_monthly : v.usage;
}

// ---------------------------------------------------------------------------------------------
// Management-created keys

interface ManagedKey {
  secret: string;
  hash: string;
  name: string;
  label: string;
  disabled: boolean;
  limit: number | null;
  limit_reset: LimitReset;
  include_byok_in_limit: boolean;
  created_at: string;
  updated_at: string | null;
  expires_at: string | null;
}

const LIMIT_RESETS = new Set(['daily', 'weekly', 'monthly']);
const WORKSPACE_ID = '00000000-0000-0000-0000-000000000000';
const CREATOR = 'user_simulated';

function maskKey(secret: string): string {
  return secret.length > 16 ? `${secret.slice(0, 12)}...${secret.slice(-3)}` : `${secret.slice(0, 3)}...`;
}

/** Validates the writable fields of a create/patch body; returns an error message or the fields. */
function keyFields(b: any, creating: boolean): string | Partial<ManagedKey> {
  if (b === null || typeof b !== 'object' || Array.isArray(b)) return 'Invalid request body';
  const out: Partial<ManagedKey> = {};
  if (creating || b.name !== undefined) {
    if (typeof b.name !== 'string' || b.name.length < 1) return 'name must be a non-empty string';
    out.name = b.name;
  }
  if (b.limit !== undefined) {
    if (b.limit !== null && (typeof b.limit !== 'number' || !Number.isFinite(b.limit) || b.limit < 0)) return 'limit must be a non-negative number or null';
    out.limit = b.limit;
  }
  if (b.limit_reset !== undefined) {
    if (b.limit_reset !== null && !LIMIT_RESETS.has(b.limit_reset)) return 'limit_reset must be daily, weekly, monthly or null';
    out.limit_reset = b.limit_reset;
  }
  if (b.include_byok_in_limit !== undefined) {
    if (typeof b.include_byok_in_limit !== 'boolean') return 'include_byok_in_limit must be a boolean';
    out.include_byok_in_limit = b.include_byok_in_limit;
  }
  if (!creating && b.disabled !== undefined) {
    if (typeof b.disabled !== 'boolean') return 'disabled must be a boolean';
    out.disabled = b.disabled;
  }
  if (creating && b.expires_at !== undefined && b.expires_at !== null) {
    if (typeof b.expires_at !== 'string' || Number.isNaN(Date.parse(b.expires_at))) return 'expires_at must be an ISO-8601 date';
    out.expires_at = new Date(b.expires_at).toISOString();
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Per-request state

interface Exchange {
  sim: SimRequest;
  req: IncomingMessage;
  res: ServerResponse;
  /** Set when the response finished or the connection closed: generation loops stop. */
  done: boolean;
  /** The sim cut the connection itself (drop-after): not a caller abort. */
  droppedBySim: boolean;
  abort: AbortController | undefined;
  bodyBytes: number;
}

function signal(x: Exchange): AbortSignal {
  if (x.abort === undefined) x.abort = new AbortController();
  return x.abort.signal;
}

/** Sleeps unless the exchange ends first; false when it ended. */
async function pause(x: Exchange, ms: number): Promise<boolean> {
  if (ms > 0) {
    try {
      await sleep(ms, undefined, { signal: signal(x) });
    } catch {
      return false;
    }
  }
  return !x.done;
}

function waitDrain(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** One SSE event per write; waits for drain when the socket pushes back. False once the exchange ended. */
async function send(x: Exchange, event: string): Promise<boolean> {
  if (x.done) return false;
  if (!x.res.write(event)) await waitDrain(x.res);
  return !x.done;
}

/** Destroys the socket once what was written so far has reached it. */
function drop(x: Exchange): Promise<void> {
  x.droppedBySim = true;
  const sock = x.req.socket as Socket;
  return new Promise((resolve) => {
    if (sock.destroyed) return resolve();
    sock.write(EMPTY, () => {
      sock.destroy();
      resolve();
    });
  });
}
const EMPTY = Buffer.alloc(0);

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
function randomId(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += ALNUM[bytes[i]! % 62];
  return s;
}

// ---------------------------------------------------------------------------------------------
// Generation

interface Generation {
  id: string;
  created: number;
  model: string;
  provider: string;
  price: Price;
  d: Readonly<Directives>;
  content: ContentPlan;
  bearer: string;
  promptTokens: number;
  charged: boolean;
}

interface Tokens { prompt: number; input: number; cached: number; cacheWrite: number; completion: number; reasoning: number; cost: number; promptCost: number; completionCost: number }

function cutPoint(d: Readonly<Directives>): number {
  // The first of fail-after / drop-after / silent-after to strike; -1 for none.
  let at = -1;
  for (const n of [d.failAfter, d.dropAfter, d.silentAfter]) if (n >= 0 && (at < 0 || n < at)) at = n;
  return at;
}

export async function startSimulatedRouter(opts: SimOptions = {}): Promise<SimulatedRouter> {
  const host = opts.host ?? '127.0.0.1';
  const record = opts.record ?? true;
  const now = opts.now ?? Date.now;
  const provisioningKey = opts.provisioningKey;
  const events = new EventEmitter();
  events.setMaxListeners(0);
  const received: SimRequest[] = [];
  const usage = new Map<string, Usage>();
  const keysByHash = new Map<string, ManagedKey>();
  const keysBySecret = new Map<string, ManagedKey>();
  const deletedSecrets = new Set<string>();
  /** Set by close(): exchanges it cuts were not aborted by their callers. */
  let closing = false;

  // Precomputed at start-up: the catalog body and per-model price/provider lookups.
  const modelsBody = JSON.stringify({ data: SIM_CATALOG });
  const prices = new Map<string, Price>();
  for (const m of SIM_CATALOG) {
    prices.set(m.id, {
      prompt: Number(m.pricing.prompt),
      completion: Number(m.pricing.completion),
      cacheRead: Number(m.pricing.input_cache_read ?? m.pricing.prompt),
      cacheWrite: Number(m.pricing.input_cache_write ?? m.pricing.prompt),
    });
  }

  function charge(bearer: string, cost: number): void {
    const p = periods(now());
    let u = usage.get(bearer);
    if (u === undefined) {
      u = { total: 0, day: p.day, daily: 0, week: p.week, weekly: 0, month: p.month, monthly: 0 };
      usage.set(bearer, u);
    }
    if (u.day !== p.day) { u.day = p.day; u.daily = 0; }
    if (u.week !== p.week) { u.week = p.week; u.weekly = 0; }
    if (u.month !== p.month) { u.month = p.month; u.monthly = 0; }
    u.total = round10(u.total + cost);
    u.daily = round10(u.daily + cost);
    u.weekly = round10(u.weekly + cost);
    u.monthly = round10(u.monthly + cost);
  }

  function tokens(g: Generation, contentChunks: number, toolFragments: number): Tokens {
    const { d, price } = g;
    const prompt = g.promptTokens;
    const cached = Math.min(d.cached, prompt);
    const cacheWrite = Math.min(d.cacheWrite, prompt - cached);
    const reasoning = d.reasoning;
    const completion = contentChunks + toolFragments + reasoning;
    const promptCost = round10((prompt - cached - cacheWrite) * price.prompt + cached * price.cacheRead + cacheWrite * price.cacheWrite);
    const completionCost = round10(completion * price.completion);
    return { prompt, input: prompt - cached - cacheWrite, cached, cacheWrite, completion, reasoning, cost: round10(promptCost + completionCost), promptCost, completionCost };
  }

  /** Computes usage for what was produced and charges it to the key, once per generation. */
  /**
   * A stream reached its cut point after `i` content chunks: fail-after sends the dialect's in-band
   * error event and ends; drop-after cuts the connection; silent-after sends nothing more and
   * leaves the connection open until the caller closes it.
   */
  async function endEarly(x: Exchange, g: Generation, i: number, errorEvent: string): Promise<void> {
    if (g.d.failAfter === i) {
      settle(g, i, 0);
      await send(x, errorEvent);
      x.res.end();
    } else if (g.d.dropAfter === i) {
      settle(g, i, 0);
      await drop(x);
    }
  }

  function settle(g: Generation, contentChunks: number, toolFragments: number): Tokens {
    const t = tokens(g, contentChunks, toolFragments);
    if (!g.charged) {
      g.charged = true;
      charge(g.bearer, t.cost);
    }
    return t;
  }

  function chatUsage(g: Generation, t: Tokens): string {
    const u: Record<string, unknown> = {
      prompt_tokens: t.prompt,
      completion_tokens: t.completion,
      total_tokens: t.prompt + t.completion,
      prompt_tokens_details: { cached_tokens: t.cached, cache_write_tokens: t.cacheWrite, audio_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: t.reasoning, image_tokens: 0 },
    };
    if (!g.d.noCost) {
      u.cost = t.cost;
      u.is_byok = false;
      u.cost_details = { upstream_inference_cost: null, upstream_inference_prompt_cost: t.promptCost, upstream_inference_completions_cost: t.completionCost };
    }
    return JSON.stringify(u);
  }

  /** `final` adds cost (unless no-cost); `full` adds the fields only the non-streamed message carries. */
  function messagesUsage(g: Generation, t: Tokens, outputTokens: number, final: boolean, full: boolean): Record<string, unknown> {
    const u: Record<string, unknown> = {
      input_tokens: t.input,
      output_tokens: outputTokens,
      cache_creation_input_tokens: t.cacheWrite,
      cache_read_input_tokens: t.cached,
    };
    if (full) {
      u.cache_creation = { ephemeral_5m_input_tokens: t.cacheWrite, ephemeral_1h_input_tokens: 0 };
      u.service_tier = 'standard';
    }
    if (final && !g.d.noCost) {
      u.cost = t.cost;
      if (full) {
        u.is_byok = false;
        u.cost_details = { upstream_inference_cost: null, upstream_inference_prompt_cost: t.promptCost, upstream_inference_completions_cost: t.completionCost };
      }
    }
    return u;
  }

  // ----- chat completions -----

  async function chatStream(x: Exchange, g: Generation): Promise<void> {
    const { d, content } = g;
    const native = NATIVE_FINISH[g.provider] ?? NATIVE_FINISH_DEFAULT;
    const base = `data: {"id":"${g.id}","provider":${JSON.stringify(g.provider)},"model":${JSON.stringify(g.model)},"object":"chat.completion.chunk","created":${g.created}`;
    const head = `${base},"choices":[{"index":0,"delta":`;
    const tail = ',"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}\n\n';
    x.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-generation-id': g.id });
    if (!(await send(x, ': OPENROUTER PROCESSING\n\n'))) return;
    if (!(await send(x, `${head}{"role":"assistant","content":""}${tail}`))) return;
    const cut = cutPoint(d);
    const n = content.pieces.length;
    for (let i = 0; i <= n; i++) {
      if (i === cut) {
        return endEarly(x, g, i, `${base},"error":{"code":502,"message":"Provider disconnected unexpectedly","metadata":{"error_type":"provider_unavailable","provider_name":${JSON.stringify(g.provider)}}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","native_finish_reason":null,"logprobs":null}]}\n\n`);
      }
      if (i === n) break;
      if (i > 0 && !(await pause(x, d.chunkDelayMs))) return;
      if (!(await send(x, `${head}{"content":${content.json[i]}}${tail}`))) return;
    }
    let frags = 0;
    if (d.tool !== '') {
      if (!(await send(x, `${head}{"tool_calls":[{"index":0,"id":"call_${randomId(24)}","type":"function","function":{"name":${JSON.stringify(d.tool)},"arguments":""}}]}${tail}`))) return;
      for (const f of TOOL_FRAGMENTS) {
        if (!(await send(x, `${head}{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(f)}}}]}${tail}`))) return;
        frags++;
      }
    }
    const finish = d.tool !== '' ? 'tool_calls' : 'stop';
    const nativeFinish = d.tool !== '' ? native.tool : native.stop;
    if (!(await send(x, `${head}{},"finish_reason":"${finish}","native_finish_reason":"${nativeFinish}","logprobs":null}]}\n\n`))) return;
    const usageJson = chatUsage(g, settle(g, n, frags));
    const usageChunk = d.usageChoice
      ? `${head}{},"finish_reason":null,"native_finish_reason":null,"logprobs":null}],"usage":${usageJson}}\n\n`
      : `${base},"choices":[],"usage":${usageJson}}\n\n`;
    if (!(await send(x, usageChunk))) return;
    if (!(await send(x, 'data: [DONE]\n\n'))) return;
    x.res.end();
  }

  /**
   * The start of a non-streamed answer: paced like the stream it stands for, with drop-after and
   * silent-after carried out. Gives the number of content pieces the answer holds and where a
   * fail-after strikes, or undefined once the exchange has ended.
   */
  async function jsonPlan(x: Exchange, g: Generation): Promise<{ n: number; cut: number } | undefined> {
    const { d, content } = g;
    const cut = cutPoint(d);
    const n = cut >= 0 && cut < content.pieces.length ? cut : content.pieces.length;
    for (let i = 1; i < n; i++) if (!(await pause(x, d.chunkDelayMs))) return;
    if (cut >= 0 && cut <= content.pieces.length) {
      if (d.dropAfter === cut) { settle(g, cut, 0); await drop(x); return; }
      if (d.silentAfter === cut) return;
    }
    return { n, cut };
  }

  async function chatJson(x: Exchange, g: Generation): Promise<void> {
    const { d, content } = g;
    const native = NATIVE_FINISH[g.provider] ?? NATIVE_FINISH_DEFAULT;
    const plan = await jsonPlan(x, g);
    if (!plan) return;
    const { n, cut } = plan;
    const failed = d.failAfter === cut && cut >= 0 && cut <= content.pieces.length;
    const text = n === content.pieces.length ? content.text : content.pieces.slice(0, n).join('');
    const withTool = d.tool !== '' && !failed;
    const t = settle(g, n, withTool ? TOOL_FRAGMENTS.length : 0);
    const choice: Record<string, unknown> = {
      index: 0,
      finish_reason: failed ? 'error' : withTool ? 'tool_calls' : 'stop',
      native_finish_reason: failed ? null : withTool ? native.tool : native.stop,
      logprobs: null,
      message: {
        role: 'assistant',
        content: text === '' && withTool ? null : text,
        refusal: null,
        reasoning: null,
        tool_calls: withTool ? [{ id: `call_${randomId(24)}`, type: 'function', function: { name: d.tool, arguments: TOOL_ARGS } }] : [],
      },
    };
    if (failed) choice.error = { code: 502, message: 'Provider disconnected unexpectedly', metadata: { error_type: 'provider_unavailable' } };
    const body = `{"id":"${g.id}","provider":${JSON.stringify(g.provider)},"model":${JSON.stringify(g.model)},"object":"chat.completion","created":${g.created},"system_fingerprint":null,"choices":[${JSON.stringify(choice)}],"usage":${chatUsage(g, t)}}`;
    x.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-generation-id': g.id });
    x.res.end(body);
  }

  // ----- messages -----

  async function messagesStream(x: Exchange, g: Generation): Promise<void> {
    const { d, content } = g;
    const t0 = tokens(g, 0, 0);
    const start = {
      type: 'message_start',
      message: {
        id: g.id, type: 'message', role: 'assistant', model: g.model, provider: g.provider, content: [],
        stop_reason: null, stop_sequence: null, usage: messagesUsage(g, t0, 1, false, false),
      },
    };
    x.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-generation-id': g.id });
    if (!(await send(x, `event: message_start\ndata: ${JSON.stringify(start)}\n\n`))) return;
    const n = content.pieces.length;
    const withText = n > 0 || d.tool === '';
    let index = 0;
    let pinged = false;
    if (withText) {
      if (!(await send(x, `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`))) return;
      if (!(await send(x, 'event: ping\ndata: {"type":"ping"}\n\n'))) return;
      pinged = true;
    }
    const cut = cutPoint(d);
    const delta = '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":';
    for (let i = 0; i <= n; i++) {
      if (i === cut) {
        return endEarly(x, g, i, 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded","error_type":"provider_overloaded"}}\n\n');
      }
      if (i === n) break;
      if (i > 0 && !(await pause(x, d.chunkDelayMs))) return;
      if (!(await send(x, `event: content_block_delta\ndata: ${delta}${content.json[i]}}}\n\n`))) return;
    }
    if (withText) {
      if (!(await send(x, 'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'))) return;
      index++;
    }
    let frags = 0;
    if (d.tool !== '') {
      const block = { type: 'content_block_start', index, content_block: { type: 'tool_use', id: `toolu_${randomId(24)}`, name: d.tool, input: {} } };
      if (!(await send(x, `event: content_block_start\ndata: ${JSON.stringify(block)}\n\n`))) return;
      if (!pinged && !(await send(x, 'event: ping\ndata: {"type":"ping"}\n\n'))) return;
      for (const f of ['', ...TOOL_FRAGMENTS]) {
        if (!(await send(x, `event: content_block_delta\ndata: {"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(f)}}}\n\n`))) return;
        if (f !== '') frags++;
      }
      if (!(await send(x, `event: content_block_stop\ndata: {"type":"content_block_stop","index":${index}}\n\n`))) return;
    }
    const t = settle(g, n, frags);
    const md = { type: 'message_delta', delta: { stop_reason: d.tool !== '' ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: messagesUsage(g, t, t.completion, true, false) };
    if (!(await send(x, `event: message_delta\ndata: ${JSON.stringify(md)}\n\n`))) return;
    if (!(await send(x, 'event: message_stop\ndata: {"type":"message_stop"}\n\n'))) return;
    x.res.end();
  }

  async function messagesJson(x: Exchange, g: Generation): Promise<void> {
    const { d, content } = g;
    const plan = await jsonPlan(x, g);
    if (!plan) return;
    const { n, cut } = plan;
    if (cut >= 0 && cut <= content.pieces.length) {
      if (d.failAfter === cut) {
        // A non-streamed Anthropic answer has no way to carry a partial failure: an error status.
        settle(g, cut, 0);
        return sendJson(x.res, 502, messagesErrorBody('api_error', 'Provider returned error', 'provider_unavailable'));
      }
    }
    const blocks: unknown[] = [];
    if (n > 0 || d.tool === '') blocks.push({ type: 'text', text: content.text, citations: null });
    if (d.tool !== '') blocks.push({ type: 'tool_use', id: `toolu_${randomId(24)}`, name: d.tool, input: SIM_TOOL_INPUT });
    const t = settle(g, n, d.tool !== '' ? TOOL_FRAGMENTS.length : 0);
    const body = JSON.stringify({
      id: g.id, type: 'message', role: 'assistant', model: g.model, provider: g.provider, content: blocks,
      stop_reason: d.tool !== '' ? 'tool_use' : 'end_turn', stop_sequence: null,
      usage: messagesUsage(g, t, t.completion, true, true),
    });
    x.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-generation-id': g.id });
    x.res.end(body);
  }

  // ----- inference entry -----

  function bearerOf(headers: IncomingHttpHeaders): string | undefined {
    const auth = headers.authorization;
    if (typeof auth !== 'string' || auth.length <= 7 || auth.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
    const k = auth.slice(7).trim();
    return k === '' ? undefined : k;
  }

  /** Why a bearer may not run inference (deleted / disabled / expired / over its limit), or undefined. */
  function keyRefusal(bearer: string, dialect: Dialect): { status: number; body: string } | undefined {
    if (deletedSecrets.has(bearer)) return authRefusal(dialect, 'User not found.');
    const k = keysBySecret.get(bearer);
    if (k === undefined) return undefined;
    if (k.disabled) return authRefusal(dialect, 'Key is disabled');
    if (k.expires_at !== null && Date.parse(k.expires_at) <= now()) return authRefusal(dialect, 'Key has expired');
    if (k.limit !== null && usageInLimitPeriod(viewUsage(usage.get(bearer), periods(now())), k.limit_reset) >= k.limit) {
      const message = `Key limit exceeded (${k.limit_reset ?? 'total'} limit). Manage it using https://openrouter.ai/settings/keys`;
      return {
        status: 402,
        body: dialect === 'chat'
          ? chatErrorBody(402, message, { limit_source: 'openrouter_key_limit', provider_name: null })
          : messagesErrorBody('billing_error', message, 'payment_required'),
      };
    }
    return undefined;
  }

  function authRefusal(dialect: Dialect, message: string): { status: number; body: string } {
    return { status: 401, body: dialect === 'chat' ? chatErrorBody(401, message) : messagesErrorBody('authentication_error', message, 'authentication') };
  }

  async function inference(x: Exchange, dialect: Dialect): Promise<void> {
    const { sim, res } = x;
    const bearer = bearerOf(sim.headers);
    if (bearer === undefined) return sendJson(res, 401, dialect === 'chat' ? MISSING_AUTH : MISSING_AUTH_MESSAGES);
    const json = sim.json;
    if (json === null || typeof json !== 'object' || Array.isArray(json)) return sendJson(res, 400, dialect === 'chat' ? BAD_JSON : BAD_JSON_MESSAGES);
    const refusal = keyRefusal(bearer, dialect);
    if (refusal !== undefined) return sendJson(res, refusal.status, refusal.body);

    const d = parseDirectives(sim.headers['x-sim']);
    if (d.hang) return; // never answer; 'closed' fires when the caller gives up
    if (!(await pause(x, d.delayMs))) return;

    const model: string = typeof json.model === 'string' ? json.model : Array.isArray(json.models) && typeof json.models[0] === 'string' ? json.models[0] : 'openrouter/auto';
    const colon = model.indexOf(':');
    const base = colon < 0 ? model : model.slice(0, colon);
    const provider = d.provider !== '' ? d.provider : (PROVIDER_BY_AUTHOR[base.slice(0, base.indexOf('/'))] ?? 'DeepInfra');
    if (d.status !== 0) return sendJson(res, d.status, simulatedErrorBody(dialect, d.status, model, provider), d.status === 429 || d.status === 503 ? RETRY_AFTER : undefined);
    const created = Math.floor(now() / 1000);
    const g: Generation = {
      id: `gen-${created}-${randomId(20)}`,
      created,
      model,
      provider,
      price: prices.get(base) ?? UNKNOWN_PRICE,
      d,
      content: contentPlan(json, d),
      bearer,
      promptTokens: Math.ceil(x.bodyBytes / 4),
      charged: false,
    };
    const stream = json.stream === true;
    if (dialect === 'chat') return stream ? chatStream(x, g) : chatJson(x, g);
    return stream ? messagesStream(x, g) : messagesJson(x, g);
  }

  // ----- key management -----

  function keyObject(k: ManagedKey): Record<string, unknown> {
    const v = viewUsage(usage.get(k.secret), periods(now()));
    return {
      hash: k.hash,
      name: k.name,
      label: k.label,
      disabled: k.disabled,
      limit: k.limit,
      limit_remaining: k.limit === null ? null : round10(Math.max(0, k.limit - usageInLimitPeriod(v, k.limit_reset))),
      limit_reset: k.limit_reset,
      include_byok_in_limit: k.include_byok_in_limit,
      ...v,
      byok_usage: 0,
      byok_usage_daily: 0,
      byok_usage_weekly: 0,
      byok_usage_monthly: 0,
      created_at: k.created_at,
      updated_at: k.updated_at,
      expires_at: k.expires_at,
      creator_user_id: CREATOR,
      workspace_id: WORKSPACE_ID,
    };
  }

  function management(x: Exchange, pathname: string, query: string): void {
    const { sim, res } = x;
    const bearer = bearerOf(sim.headers);
    if (provisioningKey === undefined || bearer !== provisioningKey) return sendJson(res, 401, MGMT_UNAUTHORIZED);
    if (pathname === '/api/v1/keys') {
      if (sim.method === 'GET') {
        const q = new URLSearchParams(query);
        const includeDisabled = q.get('include_disabled') === 'true';
        const offset = Math.max(0, Number.parseInt(q.get('offset') ?? '0', 10) || 0);
        const all = [...keysByHash.values()].filter((k) => includeDisabled || !k.disabled);
        return sendJson(res, 200, JSON.stringify({ data: all.slice(offset, offset + 100).map(keyObject) }));
      }
      if (sim.method !== 'POST') return sendJson(res, 405, METHOD_NOT_ALLOWED, { allow: 'GET, POST' });
      const f = keyFields(sim.json, true);
      if (typeof f === 'string') return sendJson(res, 400, JSON.stringify({ error: { code: 400, message: f } }));
      const secret = `sk-or-v1-${randomBytes(32).toString('hex')}`;
      const k: ManagedKey = {
        secret,
        hash: createHash('sha256').update(secret).digest('hex'),
        name: f.name!,
        label: maskKey(secret),
        disabled: false,
        limit: f.limit ?? null,
        limit_reset: f.limit_reset ?? null,
        include_byok_in_limit: f.include_byok_in_limit ?? false,
        created_at: new Date(now()).toISOString(),
        updated_at: null,
        expires_at: f.expires_at ?? null,
      };
      keysByHash.set(k.hash, k);
      keysBySecret.set(secret, k);
      return sendJson(res, 201, JSON.stringify({ data: keyObject(k), key: secret }));
    }
    const k = keysByHash.get(decodeURIComponent(pathname.slice('/api/v1/keys/'.length)));
    if (sim.method !== 'GET' && sim.method !== 'PATCH' && sim.method !== 'DELETE') return sendJson(res, 405, METHOD_NOT_ALLOWED, { allow: 'GET, PATCH, DELETE' });
    if (k === undefined) return sendJson(res, 404, KEY_NOT_FOUND);
    if (sim.method === 'GET') return sendJson(res, 200, JSON.stringify({ data: keyObject(k) }));
    if (sim.method === 'DELETE') {
      keysByHash.delete(k.hash);
      keysBySecret.delete(k.secret);
      deletedSecrets.add(k.secret);
      return sendJson(res, 200, '{"deleted":true}');
    }
    const f = keyFields(sim.json, false);
    if (typeof f === 'string') return sendJson(res, 400, JSON.stringify({ error: { code: 400, message: f } }));
    Object.assign(k, f);
    k.updated_at = new Date(now()).toISOString();
    return sendJson(res, 200, JSON.stringify({ data: keyObject(k) }));
  }

  function currentKey(x: Exchange): void {
    const bearer = bearerOf(x.sim.headers);
    if (bearer === undefined) return sendJson(x.res, 401, MISSING_AUTH);
    if (deletedSecrets.has(bearer)) return sendJson(x.res, 401, chatErrorBody(401, 'User not found.'));
    const k = keysBySecret.get(bearer);
    const v = viewUsage(usage.get(bearer), periods(now()));
    const isManagement = provisioningKey !== undefined && bearer === provisioningKey;
    const data = {
      label: k?.label ?? maskKey(bearer),
      limit: k?.limit ?? null,
      limit_remaining: k === undefined || k.limit === null ? null : round10(Math.max(0, k.limit - usageInLimitPeriod(v, k.limit_reset))),
      limit_reset: k?.limit_reset ?? null,
      include_byok_in_limit: k?.include_byok_in_limit ?? false,
      ...v,
      byok_usage: 0,
      byok_usage_daily: 0,
      byok_usage_weekly: 0,
      byok_usage_monthly: 0,
      is_free_tier: false,
      is_management_key: isManagement,
      is_provisioning_key: isManagement,
      creator_user_id: CREATOR,
      expires_at: k?.expires_at ?? null,
    };
    sendJson(x.res, 200, JSON.stringify({ data }));
  }

  async function catalog(x: Exchange): Promise<void> {
    // The catalog honours the pre-response directives, so a gateway's catalog failure paths can be tested.
    const d = parseDirectives(x.sim.headers['x-sim']);
    if (d.hang) return;
    if (!(await pause(x, d.delayMs))) return;
    if (d.status !== 0) return sendJson(x.res, d.status, simulatedErrorBody('chat', d.status, 'models', 'OpenRouter'));
    sendJson(x.res, 200, modelsBody);
  }

  // ----- dispatch -----

  function dispatch(x: Exchange): void | Promise<void> {
    const path = x.sim.path;
    const q = path.indexOf('?');
    const pathname = q < 0 ? path : path.slice(0, q);
    const method = x.sim.method;
    switch (pathname) {
      case '/api/v1/chat/completions':
        return method === 'POST' ? inference(x, 'chat') : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'POST' });
      case '/api/v1/messages':
        return method === 'POST' ? inference(x, 'messages') : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'POST' });
      case '/api/v1/models':
        return method === 'GET' ? catalog(x) : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'GET' });
      case '/api/v1/key':
      case '/api/v1/auth/key':
        return method === 'GET' ? currentKey(x) : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'GET' });
      case '/api/v1/keys':
        return management(x, pathname, q < 0 ? '' : path.slice(q + 1));
      default:
        if (pathname.startsWith('/api/v1/keys/') && pathname.indexOf('/', 13) < 0) return management(x, pathname, '');
        return sendJson(x.res, 404, NOT_FOUND);
    }
  }

  const server = createServer((req, res) => {
    const sim: SimRequest = { method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body: '', json: undefined, aborted: false };
    const x: Exchange = { sim, req, res, done: false, droppedBySim: false, abort: undefined, bodyBytes: 0 };
    res.once('close', () => {
      x.done = true;
      if (!res.writableFinished && !x.droppedBySim && !closing) sim.aborted = true;
      x.abort?.abort();
      events.emit('closed', sim);
    });
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      parts.push(c);
      x.bodyBytes += c.length;
    });
    req.on('error', () => {}); // a caller vanishing mid-body surfaces as res 'close'
    req.on('end', () => {
      if (x.bodyBytes > 0) {
        sim.body = parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts, x.bodyBytes).toString('utf8');
        const c = sim.body.charCodeAt(0);
        if (c === 123 /* { */ || c === 91 /* [ */ || c === 32 || c === 10 || c === 13 || c === 9) {
          try {
            sim.json = JSON.parse(sim.body);
          } catch {
            sim.json = undefined;
          }
        }
      }
      if (record) received.push(sim);
      events.emit('request', sim);
      let p: void | Promise<void>;
      try {
        p = dispatch(x);
      } catch (err) {
        fail(x, err);
        return;
      }
      if (p !== undefined) p.catch((err: unknown) => fail(x, err));
    });
  });
  server.on('clientError', (_err, socket) => socket.destroy());

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    received,
    events,
    usageByKey: (key) => usage.get(key)?.total ?? 0,
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        server.close(() => resolve());
        // Hung and silent exchanges would otherwise hold the server open forever.
        server.closeAllConnections();
      }),
  };
}

function sendJson(res: ServerResponse, status: number, body: string, extra?: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, extra === undefined ? { ...JSON_HEADERS, 'content-length': Buffer.byteLength(body) } : { ...JSON_HEADERS, ...extra, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/** A bug in the sim itself: answer 500 if nothing was sent yet, else cut the connection. */
function fail(x: Exchange, err: unknown): void {
  if (!x.res.headersSent) sendJson(x.res, 500, chatErrorBody(500, `simulated router bug: ${(err as Error)?.message ?? String(err)}`));
  else x.res.destroy();
}
