// The catalogue of every error sluice itself answers with (docs/http.md), and the one function
// that renders a GatewayError in the request's dialect. Plugins only throw; the server renders.
// Static bodies are serialised once at start-up; messages never tell which check failed beyond
// the catalogue (all bad keys share one body, word for word). Upstream errors never pass here.
// The Responses API writes HTTP errors in the chat envelope (OpenAI uses one for both), so its
// bodies are the chat ones; only its in-stream failure has its own events (docs/responses.md).

import type { ServerResponse } from 'node:http';

/** The three wire dialects: chat completions, Anthropic messages, and the OpenAI Responses API. */
export type Dialect = 'chat' | 'messages' | 'responses';

interface Spec {
  status: number;
  messagesType: string;
  chatType: string;
  message: string;
  headers?: Record<string, string>;
}

export const CATALOGUE = {
  ip_blocked: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', message: 'Too many failed authentication attempts from this address. Try again later.', headers: { 'retry-after': '600' } },
  invalid_api_key: { status: 401, messagesType: 'authentication_error', chatType: 'invalid_api_key', message: 'Invalid API key.', headers: { 'x-should-retry': 'false' } },
  ip_not_allowed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', message: 'This API key may not be used from this address.', headers: { 'x-should-retry': 'false' } },
  profile_removed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', message: 'The profile of this API key is no longer configured.', headers: { 'x-should-retry': 'false' } },
  upstream_key_missing: { status: 503, messagesType: 'api_error', chatType: 'api_error', message: 'The gateway has no upstream key for this profile.' },
  rate_limit_exceeded: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', message: 'Rate limit exceeded. Slow down.', headers: { 'retry-after': '5' } },
  budget_exhausted: { status: 429, messagesType: 'rate_limit_error', chatType: 'insufficient_quota', message: 'Budget exhausted for this profile until the window resets.', headers: { 'x-should-retry': 'false' } },
  // A key's own cap, and a profile's cap per session: the same answer as the profile's budget,
  // counted apart on /metrics. The refusal names the budget and its reset (plugins/budget.ts).
  key_budget_exhausted: { status: 429, messagesType: 'rate_limit_error', chatType: 'insufficient_quota', message: 'The cap of this API key is exhausted until the window resets.', headers: { 'x-should-retry': 'false' } },
  session_budget_exhausted: { status: 429, messagesType: 'rate_limit_error', chatType: 'insufficient_quota', message: 'The session cap is exhausted for this session until the day ends (00:00 UTC).', headers: { 'x-should-retry': 'false' } },
  invalid_forwarded_for: { status: 400, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', message: 'The X-Forwarded-For header sent by the front proxy is not a list of IP addresses.' },
  invalid_body: { status: 400, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', message: 'The request body is not valid.' },
  request_too_large: { status: 413, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', message: 'The request body is larger than 32 MiB.' },
  body_timeout: { status: 408, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', message: 'The request body did not arrive in time.' },
  not_found: { status: 404, messagesType: 'not_found_error', chatType: 'invalid_request_error', message: 'No such route.' },
  method_not_allowed: { status: 405, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', message: 'Method not allowed on this route.' },
  upstream_unreachable: { status: 502, messagesType: 'api_error', chatType: 'api_error', message: 'The upstream router could not be reached.' },
  upstream_timeout: { status: 504, messagesType: 'api_error', chatType: 'api_error', message: 'The upstream router did not answer in time.' },
  upstream_stream_failed: { status: 502, messagesType: 'api_error', chatType: 'api_error', message: 'The upstream stream failed before it completed.' },
  shutting_down: { status: 503, messagesType: 'api_error', chatType: 'api_error', message: 'The gateway is shutting down; retry the request.', headers: { 'retry-after': '1' } },
  store_unavailable: { status: 503, messagesType: 'api_error', chatType: 'api_error', message: 'The gateway cannot verify keys right now. Try again shortly.', headers: { 'retry-after': '5' } },
  internal: { status: 500, messagesType: 'api_error', chatType: 'api_error', message: 'Internal gateway error.' },
} satisfies Record<string, Spec>;

export type ErrorCode = keyof typeof CATALOGUE;

/** The only way a plugin stops a request. `message` overrides the catalogue text (bad bodies only). */
export class GatewayError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly custom: boolean;
  constructor(code: ErrorCode, opts: { message?: string; headers?: Record<string, string> } = {}) {
    const spec: Spec = CATALOGUE[code];
    super(opts.message ?? spec.message);
    this.name = 'GatewayError';
    this.code = code;
    this.status = spec.status;
    this.headers = opts.headers ? { ...spec.headers, ...opts.headers } : (spec.headers ?? {});
    this.custom = opts.message !== undefined;
  }
}

/** The body of an error in a dialect: responses shares chat's `{"error":{message,type,param,code}}`. */
export function errorBody(dialect: Dialect, code: ErrorCode, message: string): string {
  const spec: Spec = CATALOGUE[code];
  return dialect === 'messages'
    ? JSON.stringify({ type: 'error', error: { type: spec.messagesType, message } })
    : JSON.stringify({ error: { message, type: spec.chatType, param: null, code } });
}

// Bodies for the catalogue's own messages, built once: the hot refusal paths allocate nothing.
const STATIC = new Map<string, Buffer>();
for (const code of Object.keys(CATALOGUE) as ErrorCode[]) {
  for (const d of ['chat', 'messages', 'responses'] as const) STATIC.set(`${d}:${code}`, Buffer.from(errorBody(d, code, CATALOGUE[code].message)));
}

/** Writes a GatewayError as a complete response. Never throws; a response already started is left alone. */
export function renderError(res: ServerResponse, dialect: Dialect, err: GatewayError): void {
  if (res.headersSent || res.destroyed) return;
  const body = err.custom ? Buffer.from(errorBody(dialect, err.code, err.message)) : STATIC.get(`${dialect}:${err.code}`)!;
  res.writeHead(err.status, { ...err.headers, 'content-type': 'application/json', 'content-length': body.length });
  res.end(body);
}

/** Where a Responses stream stood when it failed: its next sequence number and the response's id. */
export interface StreamPosition { sequence: number; responseId: string | null }

/**
 * The SSE that ends a stream failing after the response began (docs/http.md), in the stream's
 * dialect. Chat: one `data: {"error":…}` then `[DONE]`; messages: one `event: error`. Responses:
 * an `error` event (the openai SDK throws on it) then `response.failed` carrying the same code
 * (what Codex reads: an unknown code is retried, as a dropped stream is), then `[DONE]` as the
 * router ends its streams; both events carry `sequence_number`, which the AI SDK requires.
 */
export function streamErrorEvent(dialect: Dialect, code: ErrorCode, at: StreamPosition = { sequence: 0, responseId: null }): string {
  const spec: Spec = CATALOGUE[code];
  if (dialect === 'messages') return `event: error\ndata: ${JSON.stringify({ type: 'error', error: { type: spec.messagesType, message: spec.message } })}\n\n`;
  if (dialect === 'chat') return `data: ${JSON.stringify({ error: { message: spec.message, type: spec.chatType, code } })}\n\ndata: [DONE]\n\n`;
  const error = { type: 'error', code, message: spec.message, param: null, sequence_number: at.sequence };
  const failed = {
    type: 'response.failed', sequence_number: at.sequence + 1,
    response: { id: at.responseId, object: 'response', status: 'failed', error: { code, message: spec.message }, incomplete_details: null },
  };
  return `event: error\ndata: ${JSON.stringify(error)}\n\nevent: response.failed\ndata: ${JSON.stringify(failed)}\n\ndata: [DONE]\n\n`;
}
