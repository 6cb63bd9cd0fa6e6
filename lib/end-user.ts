// End user and auto session of a request (CONTRACT §6). The Claude Code session header wins and
// spares reading the body; otherwise chat `user` or messages `metadata.user_id`, where a Claude
// Code blob (JSON or the older `user_…_session_<uuid>` form) is reduced to `cc:<session id>`.

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
  let ccSession: string | undefined;
  const body = ctx.body;
  if (ctx.dialect === 'chat') {
    if (typeof body?.user === 'string' && body.user) user = body.user;
  } else {
    const id = body?.metadata?.user_id;
    if (typeof id === 'string' && id) {
      ccSession = claudeCodeSession(id);
      user = ccSession ? `cc:${ccSession}` : id;
    }
  }
  ctx.endUser = user ? user.slice(0, MAX_LEN) : null;
  ctx.session = explicit ?? ccSession ?? null;
}
