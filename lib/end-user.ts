// End user and auto session of a request (CONTRACT §6). The Claude Code session header wins and
// spares reading the body; otherwise chat `user`, responses `user` (else `safety_identifier`) or
// messages `metadata.user_id`, where a Claude Code blob (JSON or the older `user_…_session_<uuid>`
// form) is reduced to `cc:<session id>`. The auto session is `x-sluice-session`, else the coding
// agent's own: Claude Code's, or on the responses dialect Codex's `session-id` header.

import type { Ctx } from './context.ts';

const LEGACY_CC = /^user_[0-9a-f]{64}_account_[0-9a-f-]*_session_([0-9a-f-]{36})$/;
const MAX_LEN = 256;

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

function header(ctx: Ctx, name: string): string | null {
  const v = ctx.req.headers[name];
  return typeof v === 'string' && v !== '' ? v.slice(0, MAX_LEN) : null;
}

/** Sets ctx.endUser and ctx.session from headers and (when needed) the parsed body. */
export function identify(ctx: Ctx): void {
  const explicit = header(ctx, 'x-sluice-session');
  const cc = header(ctx, 'x-claude-code-session-id');
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
    agentSession = header(ctx, 'session-id');
  } else {
    const id = body?.metadata?.user_id;
    if (typeof id === 'string' && id) {
      const ccSession = claudeCodeSession(id);
      user = ccSession ? `cc:${ccSession}` : id;
      agentSession = ccSession ?? null;
    }
  }
  // A NUL (JSON allows `\u0000`) becomes U+FFFD: Postgres text cannot hold one.
  ctx.endUser = user ? user.slice(0, MAX_LEN).replaceAll('\0', '\ufffd') : null;
  ctx.session = explicit ?? agentSession;
}
