// What the key and session cap tests build by hand: a profile, key rows with or without caps, a
// read-phase context for a request of a key (and session), and the row a finished request of
// theirs writes. No behaviour of its own.

import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { Profile } from '../../lib/config.ts';
import type { ReadCtx } from '../../lib/context.ts';
import type { KeyRow, RequestRow } from '../../lib/store/store.ts';

export function capsProfile(name: string, o: { daily?: number; monthly?: number; session?: number | null } = {}): Profile {
  return {
    name, default_tier: 'fast', router: 'sim', budget: { daily_usd: o.daily ?? 100, monthly_usd: o.monthly ?? 1000 }, l2_cache: false,
    rate_limits: { per_key_per_minute: 10_000, per_user_per_minute: 10_000 }, session_daily_usd: o.session ?? null, budget_headers: true,
  };
}

export function keyRow(id: number, name: string, profile: string, caps: { daily?: number | null; monthly?: number | null } = {}): KeyRow {
  return {
    id, key_hash: `${id}`.padStart(64, '0'), prefix: `sluice_${profile}_…${String(id).padStart(4, '0')}`, profile, name, ip_allow: '',
    created_at: '2025-03-01T00:00:00.000Z', expires_at: null, last_used_at: null, revoked_at: null,
    daily_usd: caps.daily ?? null, monthly_usd: caps.monthly ?? null,
  };
}

/** A request of `key` on `profile` at the read phase, in session `session` (null: none). */
export function requestCtx(profile: Profile, key: KeyRow, session: string | null = null): ReadCtx {
  return {
    id: randomUUID(), req: { headers: {} } as IncomingMessage, res: {} as ReadCtx['res'], route: 'chat', dialect: 'chat', t0: 0,
    ip: '192.0.2.1', key: { row: key, allow: undefined }, profile, router: { name: 'sim', url: new URL('http://127.0.0.1:9/') },
    upstreamKey: 'sk', raw: Buffer.alloc(0), body: { model: 'm' }, stream: false, endUser: null, session, run: null,
    requestedModel: 'm', tier: null, model: null, degradation: 'none', budget: null, removed: [], adjusted: [],
  };
}

/** The row a finished request of `key` writes: its cost, at `at`. */
export function spentRow(key: KeyRow, usd: number, at: number, session: string | null = null): RequestRow {
  return {
    id: randomUUID(), ts: new Date(at).toISOString(), endpoint: 'chat', profile: key.profile, key_prefix: key.prefix, key_id: key.id,
    end_user: null, session, run: null, tier: 'fast', requested_model: 'sluice/fast', model: 'google/gemini-2.5-flash', stream: false,
    status: 200, outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0,
    cost_usd: usd, cost_source: 'upstream', provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2,
    overhead_ms: 0.1, tools: [],
  };
}

/**
 * profiles.yaml text (under `profiles:`) of a shared profile `team` and a profile `looped` whose
 * sessions are capped at `sessionCapUsd` a day, and the variables of their upstream keys.
 */
export function teamProfiles(sessionCapUsd: number): { yaml: string; env: Record<string, string> } {
  return {
    yaml: `  team:
    default_tier: agent
    router: sim
    budget: { daily_usd: 10, monthly_usd: 100 }
  looped:
    default_tier: fast
    router: sim
    budget: { daily_usd: 10, monthly_usd: 100 }
    session_daily_usd: ${sessionCapUsd}
`,
    env: {
      SLUICE_UPSTREAM_KEY_TEAM: 'sk-or-v1-teamteamteamteamteamteamteamteamteamteamteamteamteamteam00',
      SLUICE_UPSTREAM_KEY_LOOPED: 'sk-or-v1-loopedloopedloopedloopedloopedloopedloopedloopedlooped',
    },
  };
}
