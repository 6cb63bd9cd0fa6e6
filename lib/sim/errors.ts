// Error bodies as OpenRouter writes them (protocols.md §1.5, §2.5, §4.2): the chat envelope
// `{error:{code,message,metadata?}}`, the Anthropic envelope of /api/v1/messages, and the plain
// `{error:{code,message}}` of the management and readout side; plus the one function that writes a
// JSON answer. Static bodies are serialised once here; nothing in this file keeps state.

import type { ServerResponse } from 'node:http';

/** The inference dialects; 'responses' is judged by validate.ts ahead of its route. */
export type Dialect = 'chat' | 'messages' | 'responses';

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

export function chatErrorBody(status: number, message: string, metadata?: Record<string, unknown>): string {
  return JSON.stringify({ error: metadata === undefined ? { message, code: status } : { message, code: status, metadata } });
}

/** `requestId` is null before routing (auth, bad body) and the generation id afterwards (§2.5). */
export function messagesErrorBody(type: string, message: string, errorType: string, requestId: string | null = null): string {
  return JSON.stringify({ type: 'error', error: { type, message, error_type: errorType }, request_id: requestId });
}

/** An inference error in the request's dialect, as a `status=` directive asks for it. */
export function simulatedErrorBody(dialect: Dialect, status: number, model: string, provider: string): string {
  const k = errorKind(status);
  if (dialect === 'messages') return messagesErrorBody(k.anthropic, k.message, k.errorType);
  const metadata: Record<string, unknown> = { error_type: k.errorType, provider_name: k.provider ? provider : null };
  if (k.provider) metadata.raw = `${model} returned HTTP ${status} (simulated)`;
  return chatErrorBody(status, k.message, metadata);
}

/** An inference refusal in the request's dialect (401 auth, 402 billing, 403 permission). */
export function refusalBody(dialect: Dialect, status: 401 | 402 | 403, message: string, metadata?: Record<string, unknown>): string {
  if (dialect !== 'messages') return chatErrorBody(status, message, metadata);
  const k = errorKind(status);
  return messagesErrorBody(k.anthropic, message, k.errorType);
}

// The management and readout side answers in the bare `{error:{code,message}}` envelope (§4.2).
const MANAGEMENT_MESSAGES: Record<number, string> = {
  400: 'Bad Request',
  401: 'User not found.',
  403: 'Only management keys can perform this operation',
  404: 'Not Found',
  408: 'Request timed out',
  429: 'Rate limit exceeded',
  500: 'Internal Server Error',
  502: 'Bad Gateway',
  503: 'Service temporarily unavailable',
  504: 'Gateway Timeout',
};

export function managementErrorBody(status: number, message = MANAGEMENT_MESSAGES[status] ?? `Simulated error ${status}`): string {
  return JSON.stringify({ error: { code: status, message } });
}

// Static bodies, serialised once.
export const NOT_FOUND = chatErrorBody(404, 'Not Found');
export const METHOD_NOT_ALLOWED = chatErrorBody(405, 'Method Not Allowed');
export const MISSING_AUTH = chatErrorBody(401, 'Missing Authentication header');
export const MISSING_AUTH_MESSAGES = messagesErrorBody('authentication_error', 'Missing Authentication header', 'authentication');
export const BAD_JSON = chatErrorBody(400, 'Invalid JSON body: expected a JSON object');
export const BAD_JSON_MESSAGES = messagesErrorBody('invalid_request_error', 'Invalid JSON body: expected a JSON object', 'invalid_request');
export const USER_NOT_FOUND = chatErrorBody(401, 'User not found.');
const JSON_HEADERS = { 'content-type': 'application/json' };
/** Sent with every 429 and 503 the sim makes up: integer seconds, as OpenRouter does. */
const RETRY_AFTER = { 'retry-after': '7' };

/** Statuses whose simulated answers carry `retry-after`. */
export function retryHeaders(status: number): Record<string, string> | undefined {
  return status === 429 || status === 503 ? RETRY_AFTER : undefined;
}

/** Writes one JSON answer, unless something was already sent or the caller is gone. */
export function sendJson(res: ServerResponse, status: number, body: string, extra?: Record<string, string>): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, extra === undefined ? { ...JSON_HEADERS, 'content-length': Buffer.byteLength(body) } : { ...JSON_HEADERS, ...extra, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}
