// `sluice keys create|list|revoke`: the only way client keys come to be and stop (spec "Admin
// command-line tool"). A new key is printed once, alone, on stdout; only its sha256 and display
// prefix are stored. Listings show prefixes and states, never a key.

import type { Config } from '../lib/config.ts';
import { compileIpList } from '../lib/client-ip.ts';
import { displayPrefix, generateKey, hashKey, keyState, parseKey } from '../lib/keys.ts';
import { KeyConflictError, type NewKey, type Store } from '../lib/store/store.ts';
import { UsageError } from './errors.ts';

/** Validates the options and mints a key, touching no store (so a bad call creates no database). */
export function prepareKey(config: Config, opts: { profile: string; name: string; expires?: string; ip?: string[] }, now = Date.now()): { key: string; row: NewKey } {
  if (!config.profiles.has(opts.profile)) throw new UsageError(`unknown profile "${opts.profile}" (configured: ${[...config.profiles.keys()].join(', ')})`);
  if (!opts.name.trim()) throw new UsageError('--name must not be empty');
  let expires_at: string | null = null;
  if (opts.expires !== undefined) {
    const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(opts.expires);
    const t = m ? Date.UTC(+m[1], +m[2] - 1, +m[3]) : NaN;
    if (!m || new Date(t).toISOString().slice(0, 10) !== opts.expires) throw new UsageError(`--expires must be a date YYYY-MM-DD, got "${opts.expires}"`);
    expires_at = new Date(t).toISOString();
  }
  const ips = (opts.ip ?? []).flatMap((s) => s.split(',')).map((s) => s.trim()).filter(Boolean);
  try {
    compileIpList(ips);
  } catch (err) {
    throw new UsageError(`--ip: ${(err as Error).message}`);
  }
  const key = generateKey(opts.profile);
  const { token } = parseKey(key)!;
  return {
    key,
    row: {
      key_hash: hashKey(key), prefix: displayPrefix(opts.profile, token), profile: opts.profile, name: opts.name,
      ip_allow: ips.join(','), created_at: new Date(now).toISOString(), expires_at,
    },
  };
}

/** Stores a prepared key; an active key of the same profile and name is a failure (exit 1). */
export async function insertKey(store: Store, prepared: { key: string; row: NewKey }): Promise<string> {
  try {
    await store.createKey(prepared.row);
  } catch (err) {
    const { profile, name } = prepared.row;
    if (err instanceof KeyConflictError) throw new UsageError(`${err.message}; revoke it first (sluice keys revoke --profile ${profile} --name ${name})`, 1);
    throw err;
  }
  return prepared.key;
}

export async function listKeys(store: Store, profile: string | undefined, now = Date.now()) {
  return (await store.listKeys(profile)).map((k) => ({
    prefix: k.prefix, profile: k.profile, name: k.name, created_at: k.created_at, last_used_at: k.last_used_at,
    expires_at: k.expires_at, revoked_at: k.revoked_at, ip_allow: k.ip_allow, state: keyState(k, now),
  }));
}

export function formatKeyTable(rows: Awaited<ReturnType<typeof listKeys>>): string {
  const head = ['PREFIX', 'PROFILE', 'NAME', 'CREATED', 'LAST USED', 'STATE'];
  const body = rows.map((r) => [r.prefix, r.profile, r.name, r.created_at.slice(0, 19).replace('T', ' '), r.last_used_at?.slice(0, 19).replace('T', ' ') ?? '-', r.state]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  return [head, ...body].map((row) => row.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}

export async function revokeKey(store: Store, opts: { profile: string; name: string }, now = Date.now()): Promise<string> {
  const at = new Date(now).toISOString();
  const row = await store.revokeKey(opts.profile, opts.name, at);
  if (!row) throw new UsageError(`no active key named "${opts.name}" in profile "${opts.profile}"`, 1);
  await store.insertAudit([{ ts: at, ip: 'cli', prefix: row.prefix, outcome: 'revoked_by_admin' }]);
  return row.prefix;
}
