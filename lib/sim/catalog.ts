// The model catalog: GET /api/v1/models (OpenRouter's `Model` items, protocols.md §3) and what
// inference needs from it: per-token prices, the serving provider's display name and its raw
// finish reasons. Everything here is computed once at import; the catalog route only sends the
// body serialised at start-up and never builds it per request.

import type { Exchange } from './exchange.ts';
import { sendJson } from './errors.ts';
import { gate } from './faults.ts';

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

// The serving provider's display name by model author; unknown authors are served by DeepInfra.
const PROVIDER_BY_AUTHOR: Record<string, string> = { google: 'Google', openai: 'OpenAI', anthropic: 'Anthropic', 'meta-llama': 'DeepInfra' };
// Raw finish reasons per provider, as OpenRouter passes them in native_finish_reason.
export const NATIVE_FINISH: Record<string, { stop: string; tool: string }> = {
  Google: { stop: 'STOP', tool: 'STOP' },
  Anthropic: { stop: 'end_turn', tool: 'tool_use' },
};
export const NATIVE_FINISH_DEFAULT = { stop: 'stop', tool: 'tool_calls' };
const UNKNOWN_PRICE = { prompt: 0.000001, completion: 0.000002, cacheRead: 0.000001, cacheWrite: 0.000001 };

export interface Price { prompt: number; completion: number; cacheRead: number; cacheWrite: number }

const PRICES = new Map<string, Price>();
for (const m of SIM_CATALOG) {
  PRICES.set(m.id, {
    prompt: Number(m.pricing.prompt),
    completion: Number(m.pricing.completion),
    cacheRead: Number(m.pricing.input_cache_read ?? m.pricing.prompt),
    cacheWrite: Number(m.pricing.input_cache_write ?? m.pricing.prompt),
  });
}

/** The price of a model id without its `:variant`; unlisted models get a fixed made-up price. */
export function priceOf(base: string): Price {
  return PRICES.get(base) ?? UNKNOWN_PRICE;
}

/** The provider that serves `base` (a model id without its variant), unless a directive names one. */
export function providerOf(base: string, directive: string): string {
  return directive !== '' ? directive : (PROVIDER_BY_AUTHOR[base.slice(0, base.indexOf('/'))] ?? 'DeepInfra');
}

const MODELS_BODY = JSON.stringify({ data: SIM_CATALOG });

/** GET /api/v1/models: honours the pre-response directives, so a gateway's catalog failure paths can be tested. */
export async function serveCatalog(x: Exchange): Promise<void> {
  if (await gate(x, undefined)) sendJson(x.res, 200, MODELS_BODY);
}
