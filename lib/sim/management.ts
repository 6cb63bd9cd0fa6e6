// The management side (protocols.md §4): keys created through /api/v1/keys with the provisioning
// key (create 201 with the secret shown once, list 100 a page, get, patch, delete), the
// GET /api/v1/key readout for whichever key calls it, and why a key may not run inference
// (management key 403, deleted/disabled/expired 401, limit exhausted 402). Secrets never appear
// in a list, a get or an error; only the create answer carries one.

import { createHash, randomBytes } from 'node:crypto';
import { MISSING_AUTH, USER_NOT_FOUND, managementErrorBody, METHOD_NOT_ALLOWED, refusalBody, sendJson, type Dialect } from './errors.ts';
import { bearerOf, type Exchange } from './exchange.ts';
import { gate } from './faults.ts';
import type { SimState } from './state.ts';
import type { ManagedKey } from './keyring.ts';
import { limitRemaining, usageInLimitPeriod } from './usage.ts';


const LIMIT_RESETS = new Set(['daily', 'weekly', 'monthly']);
const WORKSPACE_ID = '00000000-0000-0000-0000-000000000000';
const CREATOR = 'user_simulated';
const PAGE = 100;
const KEY_NOT_FOUND = managementErrorBody(404, 'Key not found');
const FORBIDDEN = managementErrorBody(403);

function maskKey(secret: string): string {
  return secret.length > 16 ? `${secret.slice(0, 12)}...${secret.slice(-3)}` : `${secret.slice(0, 3)}...`;
}

/** The {hash} of /api/v1/keys/{hash}; a malformed escape names no key. */
function hashIn(pathname: string): string {
  try {
    return decodeURIComponent(pathname.slice('/api/v1/keys/'.length));
  } catch {
    return '';
  }
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


function keyObject(state: SimState, k: ManagedKey): Record<string, unknown> {
  const v = state.ledger.view(k.secret);
  return {
    hash: k.hash,
    name: k.name,
    label: k.label,
    disabled: k.disabled,
    limit: k.limit,
    limit_remaining: limitRemaining(k.limit, k.limit_reset, v),
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

/** 401 for no key or one the sim does not know as management key, 403 for a live inference key. */
function managementAuth(x: Exchange, state: SimState): boolean {
  const bearer = bearerOf(x.sim.headers);
  if (bearer !== undefined && bearer === state.provisioningKey) return true;
  if (bearer === undefined) sendJson(x.res, 401, MISSING_AUTH);
  else if (state.keys.bySecret.has(bearer)) sendJson(x.res, 403, FORBIDDEN);
  else sendJson(x.res, 401, USER_NOT_FOUND);
  return false;
}

/** /api/v1/keys and /api/v1/keys/{hash}. */
export async function serveKeys(x: Exchange, state: SimState, pathname: string, query: string): Promise<void> {
  if (!(await gate(x, state.faults, 'keys'))) return;
  if (!managementAuth(x, state)) return;
  const { sim, res } = x;
  if (pathname === '/api/v1/keys') {
    if (sim.method === 'GET') {
      const q = new URLSearchParams(query);
      const includeDisabled = q.get('include_disabled') === 'true';
      const offset = Math.max(0, Number.parseInt(q.get('offset') ?? '0', 10) || 0);
      const workspace = q.get('workspace_id');
      const all = workspace !== null && workspace !== WORKSPACE_ID ? [] : [...state.keys.byHash.values()].filter((k) => includeDisabled || !k.disabled);
      return sendJson(res, 200, JSON.stringify({ data: all.slice(offset, offset + PAGE).map((k) => keyObject(state, k)) }));
    }
    if (sim.method !== 'POST') return sendJson(res, 405, METHOD_NOT_ALLOWED, { allow: 'GET, POST' });
    const f = keyFields(sim.json, true);
    if (typeof f === 'string') return sendJson(res, 400, managementErrorBody(400, f));
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
      created_at: new Date(state.now()).toISOString(),
      updated_at: null,
      expires_at: f.expires_at ?? null,
    };
    state.keys.add(k);
    return sendJson(res, 201, JSON.stringify({ data: keyObject(state, k), key: secret }));
  }
  if (sim.method !== 'GET' && sim.method !== 'PATCH' && sim.method !== 'DELETE') return sendJson(res, 405, METHOD_NOT_ALLOWED, { allow: 'GET, PATCH, DELETE' });
  const k = state.keys.byHash.get(hashIn(pathname));
  if (k === undefined) return sendJson(res, 404, KEY_NOT_FOUND);
  if (sim.method === 'GET') return sendJson(res, 200, JSON.stringify({ data: keyObject(state, k) }));
  if (sim.method === 'DELETE') {
    state.keys.remove(k);
    return sendJson(res, 200, '{"deleted":true}');
  }
  const f = keyFields(sim.json, false);
  if (typeof f === 'string') return sendJson(res, 400, managementErrorBody(400, f));
  Object.assign(k, f);
  k.updated_at = new Date(state.now()).toISOString();
  return sendJson(res, 200, JSON.stringify({ data: keyObject(state, k) }));
}

/** GET /api/v1/key (and the legacy /api/v1/auth/key): the readout of the key that calls it. */
export async function serveCurrentKey(x: Exchange, state: SimState): Promise<void> {
  if (!(await gate(x, state.faults, 'key'))) return;
  const bearer = bearerOf(x.sim.headers);
  if (bearer === undefined) return sendJson(x.res, 401, MISSING_AUTH);
  if (state.keys.isDeleted(bearer)) return sendJson(x.res, 401, USER_NOT_FOUND);
  const k = state.keys.bySecret.get(bearer);
  const v = state.ledger.view(bearer);
  const isManagement = bearer === state.provisioningKey;
  const data = {
    label: k?.label ?? maskKey(bearer),
    limit: k?.limit ?? null,
    limit_remaining: k === undefined ? null : limitRemaining(k.limit, k.limit_reset, v),
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

/** Why a bearer may not run inference, as OpenRouter answers it; undefined when it may. */
export function keyRefusal(state: SimState, bearer: string, dialect: Dialect): { status: number; body: string } | undefined {
  if (bearer === state.provisioningKey) {
    return { status: 403, body: refusalBody(dialect, 403, 'Management keys cannot be used for inference; use an API key') };
  }
  if (state.keys.isDeleted(bearer)) return { status: 401, body: refusalBody(dialect, 401, 'User not found.') };
  const k = state.keys.bySecret.get(bearer);
  if (k === undefined) return undefined;
  if (k.disabled) return { status: 401, body: refusalBody(dialect, 401, 'Key is disabled') };
  if (k.expires_at !== null && Date.parse(k.expires_at) <= state.now()) return { status: 401, body: refusalBody(dialect, 401, 'Key has expired') };
  if (k.limit !== null && usageInLimitPeriod(state.ledger.view(bearer), k.limit_reset) >= k.limit) {
    const message = `Key limit exceeded (${k.limit_reset ?? 'total'} limit). Manage it using https://openrouter.ai/settings/keys`;
    return { status: 402, body: refusalBody(dialect, 402, message, { limit_source: 'openrouter_key_limit', provider_name: null }) };
  }
  return undefined;
}
