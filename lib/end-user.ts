// End user and auto session of a request (docs/http.md). The Claude Code session header wins and
// spares reading the body; otherwise chat `user`, responses `user` (else `safety_identifier`) or
// messages `metadata.user_id`, where a Claude Code blob (JSON or the older `user_…_session_<uuid>`
// form) is reduced to `cc:<session id>`. The auto session is `x-sluice-session`, else the coding
// agent's own: Claude Code's, or on the responses dialect Codex's `session-id` header.
// Every such label is client-chosen and reaches a row, the rollups, the board and the counters'
// keys, so each is bounded (label()): at most 256 characters, a longer one shortened with a hash
// of the whole so that it still groups, and distinct long labels stay distinct.

import { createHash } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { Ctx } from './context.ts';

const LEGACY_CC = /^user_[0-9a-f]{64}_account_[0-9a-f-]*_session_([0-9a-f-]{36})$/;
/** The longest label kept as sent. */
export const MAX_LABEL = 256;
/** What a longer label keeps of its start; a `…#` and 32 hex digits of its SHA-256 follow. */
const KEPT = MAX_LABEL - 34;

/**
 * A client-chosen label as stored: unchanged up to MAX_LABEL characters, else its first characters
 * and a hash of the whole (MAX_LABEL in all). A NUL (JSON allows `\u0000`) becomes U+FFFD:
 * Postgres text cannot hold one.
 */
export function label(v: string): string {
  if (v.length > MAX_LABEL) v = `${v.slice(0, KEPT)}…#${createHash('sha256').update(v).digest('hex').slice(0, 32)}`;
  return v.includes('\0') ? v.replaceAll('\0', '\ufffd') : v;
}

/** The Claude Code session id inside a `metadata.user_id` value, if it is such a blob. */
export function claudeCodeSession(userId: string): string | undefined {
  if (userId.startsWith('{')) {
    try {
      const o = JSON.parse(userId);
      if (o && typeof o.session_id === 'string' && o.session_id && 'device_id' in o) return o.session_id;
    } catch {
      return undefined;
    }
    return undefined;
  }
  return LEGACY_CC.exec(userId)?.[1];
}

/** The session headers, strongest first: sluice's own, Claude Code's, Codex's (responses only, read by identify). */
const SESSION = 'x-sluice-session';
const CLAUDE_CODE_SESSION = 'x-claude-code-session-id';
const CODEX_SESSION = 'session-id';

/**
 * The session the headers alone name, as identify would take it from them (a GET has no body, so
 * Codex's header counts on any route): bounded like every label.
 */
export function headerSession(headers: IncomingHttpHeaders): string | null {
  for (const name of [SESSION, CLAUDE_CODE_SESSION, CODEX_SESSION]) {
    const v = headers[name];
    if (typeof v === 'string' && v !== '') return label(v);
  }
  return null;
}

function header(ctx: Ctx, name: string): string | null {
  const v = ctx.req.headers[name];
  return typeof v === 'string' && v !== '' ? label(v) : null;
}

/** Sets ctx.endUser and ctx.session from headers and (when needed) the parsed body. */
export function identify(ctx: Ctx): void {
  const explicit = header(ctx, SESSION);
  const cc = header(ctx, CLAUDE_CODE_SESSION);
  if (cc) {
    ctx.endUser = `cc:${cc}`;
    ctx.session = explicit ?? cc;
    return;
  }
  let user: string | null = null;
  /** The coding agent's own session id, when the request carries one. */
  let agentSession: string | null = null;
  const body = ctx.body;
  if (ctx.dialect === 'chat') {
    if (typeof body?.user === 'string' && body.user) user = body.user;
  } else if (ctx.dialect === 'responses') {
    // `safety_identifier` is OpenAI's newer name for the same thing; `user` wins when both are sent.
    if (typeof body?.user === 'string' && body.user) user = body.user;
    else if (typeof body?.safety_identifier === 'string' && body.safety_identifier) user = body.safety_identifier;
    // Codex sends its conversation's id on every request of it. Unlike Claude Code's it is not
    // made an end user: a Codex request without `user` counts toward the key's limit only.
    agentSession = header(ctx, CODEX_SESSION);
  } else {
    const id = body?.metadata?.user_id;
    if (typeof id === 'string' && id) {
      const ccSession = claudeCodeSession(id);
      user = ccSession ? `cc:${ccSession}` : id;
      agentSession = ccSession ?? null;
    }
  }
  ctx.endUser = user ? label(user) : null;
  ctx.session = explicit ?? (agentSession === null ? null : label(agentSession));
}
