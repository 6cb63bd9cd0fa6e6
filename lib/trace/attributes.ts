// The names sluice's spans carry, and the small rules that turn a request into their values. The
// HTTP ones follow the Stable HTTP semantic conventions. The gen_ai.* ones follow the GenAI
// semantic conventions (Development status) at the version pinned in GENAI_SEMCONV: the names
// @opentelemetry/semantic-conventions 1.45.0 exports (tests/trace/names.test.ts holds every one
// against that package). The sluice.* ones are sluice's own. No name here ever carries prompt or
// response content: only counts, ids, model names, labels and codes.

import type { ProxiedRoute } from '../routes.ts';
import type { Outcome } from '../store/store.ts';

/**
 * The GenAI conventions followed: those of semantic-conventions v1.41, the last release of that
 * repository to define gen_ai.* before they moved to open-telemetry/semantic-conventions-genai
 * (which has published no release yet), as @opentelemetry/semantic-conventions 1.45.0 exports them.
 */
export const GENAI_SEMCONV = 'OpenTelemetry semantic conventions v1.41 (GenAI: Development), as @opentelemetry/semantic-conventions 1.45.0 exports them';

/** The instrumentation scope of every span. */
export const SCOPE = 'sluice';

// HTTP (Stable).
export const HTTP_REQUEST_METHOD = 'http.request.method';
export const HTTP_ROUTE = 'http.route';
export const HTTP_RESPONSE_STATUS_CODE = 'http.response.status_code';
export const URL_PATH = 'url.path';
export const URL_SCHEME = 'url.scheme';
export const CLIENT_ADDRESS = 'client.address';
export const SERVER_ADDRESS = 'server.address';
export const SERVER_PORT = 'server.port';
export const USER_AGENT_ORIGINAL = 'user_agent.original';
export const NETWORK_PROTOCOL_VERSION = 'network.protocol.version';
export const ERROR_TYPE = 'error.type';

// GenAI (Development).
export const GEN_AI_OPERATION_NAME = 'gen_ai.operation.name';
export const GEN_AI_PROVIDER_NAME = 'gen_ai.provider.name';
export const GEN_AI_REQUEST_MODEL = 'gen_ai.request.model';
export const GEN_AI_REQUEST_STREAM = 'gen_ai.request.stream';
export const GEN_AI_REQUEST_MAX_TOKENS = 'gen_ai.request.max_tokens';
export const GEN_AI_RESPONSE_ID = 'gen_ai.response.id';
export const GEN_AI_RESPONSE_MODEL = 'gen_ai.response.model';
export const GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK = 'gen_ai.response.time_to_first_chunk';
export const GEN_AI_USAGE_INPUT_TOKENS = 'gen_ai.usage.input_tokens';
export const GEN_AI_USAGE_OUTPUT_TOKENS = 'gen_ai.usage.output_tokens';
export const GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = 'gen_ai.usage.cache_read.input_tokens';
export const GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS = 'gen_ai.usage.cache_creation.input_tokens';
export const GEN_AI_USAGE_REASONING_OUTPUT_TOKENS = 'gen_ai.usage.reasoning.output_tokens';
export const OPENAI_API_TYPE = 'openai.api.type';

/** The router, as gen_ai.provider.name names it: not a well-known value, so a custom one (the conventions allow it). */
export const PROVIDER = 'openrouter';

// sluice's own.
export const SLUICE_REQUEST_ID = 'sluice.request.id';
export const SLUICE_REQUEST_MODEL = 'sluice.request.model';
export const SLUICE_PROFILE = 'sluice.profile';
export const SLUICE_KEY_PREFIX = 'sluice.key.prefix';
export const SLUICE_TIER = 'sluice.tier';
export const SLUICE_DEGRADATION = 'sluice.degradation';
export const SLUICE_COST_USD = 'sluice.cost.usd';
export const SLUICE_COST_SOURCE = 'sluice.cost.source';
export const SLUICE_END_USER = 'sluice.end_user';
export const SLUICE_SESSION = 'sluice.session';
export const SLUICE_REWRITES = 'sluice.rewrites';
export const SLUICE_OUTCOME = 'sluice.outcome';
export const SLUICE_PROVIDER = 'sluice.provider';

/**
 * gen_ai.operation.name per route. Chat Completions, Messages and Responses are all `chat`: the
 * OpenAI conventions describe one inference span for both OpenAI APIs, told apart by
 * openai.api.type, and document no other name for the Responses API, so the predefined `chat`
 * applies. Token counting is not an operation the conventions name: `count_tokens` is a custom value.
 */
export const OPERATION: Record<ProxiedRoute, string> = { chat: 'chat', messages: 'chat', responses: 'chat', count_tokens: 'count_tokens' };

/** openai.api.type for the routes that speak an OpenAI API (the Messages routes speak Anthropic's). */
export const OPENAI_API: Partial<Record<ProxiedRoute, string>> = { chat: 'chat_completions', responses: 'responses' };

/** The longest user_agent.original kept (the rest is cut: a client chooses it). */
export const MAX_USER_AGENT = 256;

/**
 * The output-token limit the upstream request carries, as the body holds it after every rewrite
 * (budget degradation caps it): chat's max_completion_tokens or max_tokens, the Messages API's
 * max_tokens, the Responses API's max_output_tokens. Undefined when the body sets none.
 */
export function maxTokensOf(route: ProxiedRoute, body: Record<string, any>): number | undefined {
  const v = route === 'responses' ? body.max_output_tokens : route === 'chat' ? (body.max_completion_tokens ?? body.max_tokens) : body.max_tokens;
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** What the exchange knew when its row was made, for error.type (a view of lib/proxy/exchange.ts's Exchange). */
export interface ExchangeFacts {
  /** The router's status once its headers arrived; 0 before. */
  readonly upstreamStatus: number;
  /** The upstream went silent past the limit. */
  readonly timedOut: boolean;
  /** The upstream response reached its natural end. */
  readonly upstreamEnded: boolean;
  /** The usage read from the response, once its headers arrived. */
  readonly tap: { readonly usage: { readonly model: string | null } } | null;
}

/**
 * error.type of an exchange, from its row's outcome: the router's HTTP status when it answered
 * 4xx/5xx (as the HTTP conventions record one), else the catalogue code sluice answered or ended
 * the stream with (upstream_unreachable, upstream_timeout, upstream_stream_failed, shutting_down),
 * or upstream_error_event for an error the router reported inside a 2xx response. Undefined for
 * `ok` and for a client that hung up (not an error: sluice.outcome records it).
 */
export function errorTypeOf(outcome: Outcome, ex: ExchangeFacts): string | undefined {
  switch (outcome) {
    case 'ok':
    case 'client_disconnect':
      return undefined;
    case 'gateway_error':
      return 'shutting_down'; // the exchange makes this outcome only when a shutdown's grace ends it
    case 'upstream_error':
      if (ex.upstreamStatus >= 400) return String(ex.upstreamStatus);
      if (ex.upstreamStatus === 0) return ex.timedOut ? 'upstream_timeout' : 'upstream_unreachable';
      if (!ex.upstreamEnded) return ex.timedOut ? 'upstream_timeout' : 'upstream_stream_failed';
      return 'upstream_error_event';
  }
}

/** server.address and server.port from a Host header (`name`, `name:port`, `[v6]:port`); port 80 when it names none. */
export function hostOf(host: string | undefined): { address: string; port: number } | undefined {
  if (!host) return undefined;
  const m = /^(\[[^\]]*\]|[^:]*)(?::(\d{1,5}))?$/.exec(host);
  if (!m || m[1] === '') return undefined;
  return { address: m[1].startsWith('[') ? m[1].slice(1, -1) : m[1], port: m[2] === undefined ? 80 : Number(m[2]) };
}
