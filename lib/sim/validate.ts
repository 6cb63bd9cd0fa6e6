// What the real routers refuse before they route (docs/simulator.md, "Rules it enforces"): an
// unknown model id, a `models` list that is not ids or is longer than 3, an output limit above the
// model's maximum, and an Anthropic thinking budget below 1024 or not below max_tokens. Each answer
// carries the real status and text in the dialect's envelope. A lenient stand-in hides exactly the
// bugs real users meet; this file only judges a body, it never touches the response.

import type { IncomingHttpHeaders } from 'node:http';
import { SIM_CATALOG } from './catalog.ts';
import { chatErrorBody, messagesErrorBody, type Dialect } from './errors.ts';

export interface Refusal { status: number; body: string }

/** OpenRouter's limit on the fallback list. */
export const MAX_MODELS = 3;
/** Anthropic's smallest thinking budget. */
export const MIN_BUDGET = 1024;
/** The beta that lets Anthropic's thinking budget exceed max_tokens (it then spans the whole turn). */
const INTERLEAVED = 'interleaved-thinking-';

const MAX_OUT = new Map(SIM_CATALOG.map((m) => [m.id, m.top_provider.max_completion_tokens ?? null]));
/** OpenRouter's own routing models: valid ids the catalog does not list. */
const ROUTER_MODELS = new Set(['openrouter/auto']);

function baseOf(id: string): string {
  const colon = id.indexOf(':');
  return colon < 0 ? id : id.slice(0, colon);
}

function known(id: string): boolean {
  return MAX_OUT.has(baseOf(id)) || ROUTER_MODELS.has(id);
}

function refuse(dialect: Dialect, message: string, provider?: string): Refusal {
  if (dialect === 'messages') return { status: 400, body: messagesErrorBody('invalid_request_error', message, 'invalid_request') };
  // A provider's refusal reaches chat and responses callers wrapped, with the provider's text as `raw`.
  const body = provider === undefined ? chatErrorBody(400, message)
    : chatErrorBody(400, 'Provider returned error', { raw: JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', message } }), provider_name: provider });
  return { status: 400, body };
}

/** The output limit field of a dialect, as the client named it. */
function outputLimit(dialect: Dialect, json: Record<string, any>): [string, unknown] | undefined {
  if (dialect === 'responses') return json.max_output_tokens === undefined ? undefined : ['max_output_tokens', json.max_output_tokens];
  if (dialect === 'chat' && json.max_completion_tokens !== undefined) return ['max_completion_tokens', json.max_completion_tokens];
  return json.max_tokens === undefined ? undefined : ['max_tokens', json.max_tokens];
}

/** Why the router would refuse this body, or undefined when it would route it. */
export function validate(dialect: Dialect, json: Record<string, any>, headers: IncomingHttpHeaders): Refusal | undefined {
  const model = json.model;
  if (typeof model === 'string' && !known(model)) return refuse(dialect, `${model} is not a valid model ID`);
  const models = json.models;
  if (models !== undefined) {
    if (!Array.isArray(models) || models.some((m) => typeof m !== 'string')) return refuse(dialect, "'models' must be an array of model IDs.");
    if (models.length > MAX_MODELS) return refuse(dialect, `'models' array must have ${MAX_MODELS} items or fewer.`);
    const bad = models.find((m: string) => !known(m));
    if (bad !== undefined) return refuse(dialect, `${bad} is not a valid model ID`);
  }
  if (dialect === 'responses') {
    if (json.previous_response_id !== undefined && json.previous_response_id !== null) {
      return refuse(dialect, 'previous_response_id is not supported: the Responses API here is stateless. Send the whole conversation in `input`.');
    }
    if (json.store === true) return refuse(dialect, 'store: true is not supported: the Responses API here is stateless.');
  }

  const limit = outputLimit(dialect, json);
  if (limit !== undefined) {
    const [field, value] = limit;
    if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) return refuse(dialect, `${field}: Input should be a valid integer greater than or equal to 1`);
    // Every model that may serve must take the limit: the primary, then the fallbacks.
    for (const id of [model, ...(Array.isArray(models) ? models : [])]) {
      if (typeof id !== 'string') continue;
      const max = MAX_OUT.get(baseOf(id));
      if (typeof max === 'number' && value > max) {
        return refuse(dialect, `${field}: ${value} > ${max}, which is the maximum allowed number of output tokens for ${baseOf(id)}`, dialect === 'messages' ? undefined : 'Router');
      }
    }
  }
  const maxTokens = typeof limit?.[1] === 'number' ? limit[1] : undefined;

  if (dialect === 'messages' && json.thinking !== undefined) {
    const th = json.thinking;
    if (!th || typeof th !== 'object' || !['enabled', 'disabled', 'adaptive'].includes(th.type)) {
      return refuse(dialect, "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'");
    }
    if (th.type === 'enabled') {
      const budget = th.budget_tokens;
      if (typeof budget !== 'number' || !Number.isInteger(budget)) return refuse(dialect, 'thinking.enabled.budget_tokens: Field required');
      if (budget < MIN_BUDGET) return refuse(dialect, `thinking.enabled.budget_tokens: Input should be greater than or equal to ${MIN_BUDGET}`);
      const beta = headers['anthropic-beta'];
      const interleaved = (Array.isArray(beta) ? beta.join(',') : beta ?? '').includes(INTERLEAVED);
      if (maxTokens !== undefined && budget >= maxTokens && !interleaved) return refuse(dialect, '`max_tokens` must be greater than `thinking.budget_tokens`.');
    }
  }
  // OpenRouter turns `reasoning.max_tokens` into Anthropic's budget_tokens for Anthropic models.
  if (dialect !== 'messages' && typeof model === 'string' && model.startsWith('anthropic/')) {
    const budget = json.reasoning?.max_tokens;
    if (typeof budget === 'number' && maxTokens !== undefined && budget >= maxTokens) {
      return refuse(dialect, '`max_tokens` must be greater than `thinking.budget_tokens`.', 'Anthropic');
    }
  }
  return undefined;
}
