// `sluice keys create|list|revoke|caps`: the only way client keys come to be, stop, and get caps
// (spec "Admin command-line tool"). A new key is printed once, alone, on stdout; only its sha256
// and display prefix are stored. Listings show prefixes, states, caps and spend, never a key.
// A key's caps (USD per UTC day and month) limit it inside its profile's budget (lib/budget.ts).

import { micro, windows } from '../lib/budget.ts';
import type { Config } from '../lib/config.ts';
import { compileIpList } from '../lib/client-ip.ts';
import { displayPrefix, generateKey, hashKey, keyState, parseKey } from '../lib/keys.ts';
import { KeyConflictError, type KeyCaps, type NewKey, type Store } from '../lib/store/store.ts';
import { UsageError } from './errors.ts';

/**
 * A cap as given on the command line: a positive number of USD; with `clearable`, also `none`
 * (null: no cap). Left out: undefined. Anything else is bad usage (exit 2).
 */
export function parseCap(flag: string, value: string | undefined, clearable: boolean): number | null | undefined {
  if (value === undefined) return undefined;
  if (clearable && value === 'none') return null;
  const n = /^\s*(\d+(\.\d*)?|\.\d+)\s*$/.test(value) ? Number(value) : NaN;
  if (!(n > 0) || !Number.isFinite(n)) throw new UsageError(`${flag} must be a number of USD greater than 0${clearable ? ', or none' : ''}, got "${value}"`);
  return n;
}

/** Validates the options and mints a key, touching no store (so a bad call creates no database). */
export function prepareKey(
  config: Config,
  opts: { profile: string; name: string; expires?: string; ip?: string[]; dailyUsd?: string; monthlyUsd?: string },
  now = Date.now(),
): { key: string; row: NewKey } {
  if (!config.profiles.has(opts.profile)) throw new UsageError(`unknown profile "${opts.profile}" (configured: ${[...config.profiles.keys()].join(', ')})`);
  if (!opts.name.trim()) throw new UsageError('--name must not be empty');
  let expires_at: string | null = null;
  if (opts.expires !== undefined) {
    const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(opts.expires);
    const t = m ? Date.UTC(+m[1], +m[2] - 1, +m[3]) : NaN;
    if (!m || new Date(t).toISOString().slice(0, 10) !== opts.expires) throw new UsageError(`--expires must be a date YYYY-MM-DD, got "${opts.expires}"`);
    expires_at = new Date(t).toISOString();
  }
  const daily_usd = parseCap('--daily-usd', opts.dailyUsd, false) ?? null;
  const monthly_usd = parseCap('--monthly-usd', opts.monthlyUsd, false) ?? null;
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
      ip_allow: ips.join(','), created_at: new Date(now).toISOString(), expires_at, daily_usd, monthly_usd,
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

/**
 * Every key (of a profile), with its caps and its spend of the current UTC day and month from the
 * store's ledger (rows still queued in a running server count once they are written).
 */
export async function listKeys(store: Store, profile: string | undefined, now = Date.now()) {
  const w = windows(now);
  const [day, month] = [new Date(w.dayStart).toISOString(), new Date(w.monthStart).toISOString()];
  return Promise.all((await store.listKeys(profile)).map(async (k) => {
    const [day_usd, month_usd] = await Promise.all([store.keyLedgerSpendSince(k.id, day), store.keyLedgerSpendSince(k.id, month)]);
    return {
      prefix: k.prefix, profile: k.profile, name: k.name, created_at: k.created_at, last_used_at: k.last_used_at,
      expires_at: k.expires_at, revoked_at: k.revoked_at, ip_allow: k.ip_allow, state: keyState(k, now),
      daily_usd: k.daily_usd, monthly_usd: k.monthly_usd, day_usd: whole(day_usd), month_usd: whole(month_usd),
    };
  }));
}

/** A sum of float costs in the whole micro-dollars the budget counts in (no 0.30000000000000004). */
function whole(usd: number): number {
  return micro(usd) / 1e6;
}

/** USD in the table: to the cent, or to the micro-dollar below a cent (a cheap key still shows spend). */
function usd(v: number): string {
  return v === 0 || v >= 0.01 ? v.toFixed(2) : String(v);
}

export function formatKeyTable(rows: Awaited<ReturnType<typeof listKeys>>): string {
  const head = ['PREFIX', 'PROFILE', 'NAME', 'CREATED', 'LAST USED', 'STATE', 'TODAY USD', 'DAILY CAP', 'MONTH USD', 'MONTHLY CAP'];
  const body = rows.map((r) => [
    r.prefix, r.profile, r.name, r.created_at.slice(0, 19).replace('T', ' '), r.last_used_at?.slice(0, 19).replace('T', ' ') ?? '-', r.state,
    usd(r.day_usd), r.daily_usd === null ? '-' : usd(r.daily_usd), usd(r.month_usd), r.monthly_usd === null ? '-' : usd(r.monthly_usd),
  ]);
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

/** The caps change the options ask for, checked before any store is opened: a number sets a cap, `none` clears it, left out keeps it. */
export function capsChange(opts: { dailyUsd?: string; monthlyUsd?: string }): Partial<KeyCaps> {
  const caps: Partial<KeyCaps> = {};
  const daily = parseCap('--daily-usd', opts.dailyUsd, true);
  const monthly = parseCap('--monthly-usd', opts.monthlyUsd, true);
  if (daily !== undefined) caps.daily_usd = daily;
  if (monthly !== undefined) caps.monthly_usd = monthly;
  if (daily === undefined && monthly === undefined) throw new UsageError('name a cap to change: --daily-usd N|none and/or --monthly-usd N|none');
  return caps;
}

/**
 * Applies a caps change to the active key of (profile, name); returns its prefix and its caps now.
 * No audit row: the audit table records authentication events and revocations only.
 */
export async function setCaps(store: Store, opts: { profile: string; name: string }, caps: Partial<KeyCaps>): Promise<{ prefix: string } & KeyCaps> {
  const row = await store.setKeyCaps(opts.profile, opts.name, caps);
  if (!row) throw new UsageError(`no active key named "${opts.name}" in profile "${opts.profile}"`, 1);
  return { prefix: row.prefix, daily_usd: row.daily_usd, monthly_usd: row.monthly_usd };
}

/** A key's caps in words, for the CLI's confirmation. */
export function describeCaps(c: KeyCaps): string {
  const one = (v: number | null) => (v === null ? 'none' : `${v} USD`);
  return `daily cap ${one(c.daily_usd)}, monthly cap ${one(c.monthly_usd)}`;
}
