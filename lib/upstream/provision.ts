// Each profile's upstream key at its router (ring 1): provision creates the missing ones with a
// daily limit equal to the profile's daily budget, sync moves each limit to the current budget,
// list reads them back. "Already has a key" is the router's own list (a key named sluice:<profile>)
// or the local upstream_keys table, so a lost table or a second machine never mints a duplicate.
// A new secret goes only to the env file, written right after its creation; it is never returned.

import type { Config, Profile } from '../config.ts';
import { upstreamKeyVar } from '../settings.ts';
import type { Store, UpstreamKeyRow } from '../store/store.ts';
import { envFileSets, writeEnvVar } from './env-file.ts';
import { ManagementError, type ApiKey, type ManagementClient } from './management.ts';

/** The name a profile's upstream key carries at the router. */
export function upstreamKeyName(profile: string): string {
  return `sluice:${profile}`;
}

export interface UpstreamContext {
  config: Config;
  store: Store;
  client: ManagementClient;
  provisioningKey: string;
  now: () => number;
  /** One line of progress per profile (stdout in the CLI). */
  say: (line: string) => void;
}

export const usd = (n: number | null | undefined): string => (n === null || n === undefined ? '-' : `$${n.toFixed(n !== 0 && Math.abs(n) < 0.01 ? 4 : 2)}`);
const shortHash = (hash: string) => `${hash.slice(0, 12)}…`;

/** The profiles a command acts on: all of them, or the one --only names. */
export function selectProfiles(config: Config, only: string | undefined): Profile[] {
  if (only === undefined) return [...config.profiles.values()];
  const p = config.profiles.get(only);
  if (!p) throw new UnknownProfileError(only, [...config.profiles.keys()]);
  return [p];
}

export class UnknownProfileError extends Error {
  constructor(only: string, known: string[]) {
    super(`--only: unknown profile "${only}" (configured: ${known.join(', ')})`);
    this.name = 'UnknownProfileError';
  }
}

/** The router's key list, fetched once per router per command (named after the first profile needing it). */
function routerLists(ctx: UpstreamContext) {
  const lists = new Map<string, Promise<ApiKey[]>>();
  return (p: Profile): Promise<ApiKey[]> => {
    let list = lists.get(p.router);
    if (!list) {
      list = ctx.client.listKeys({ router: ctx.config.routers.get(p.router)!.url, profile: p.name, bearer: ctx.provisioningKey });
      lists.set(p.router, list);
    }
    return list;
  };
}

function rowFor(p: Profile, key: ApiKey, at: string, created?: string): UpstreamKeyRow {
  return { profile: p.name, hash: key.hash, name: key.name, label: key.label, limit_usd: key.limit, limit_reset: key.limit_reset, created_at: created ?? at, updated_at: at };
}

/**
 * A skipped profile whose secret is not in the env file (another machine's file, or a create that
 * failed after the router made the key): the router shows a secret only once, so say what to do.
 */
function noSecretNote(p: Profile, envOut: string): string {
  const name = upstreamKeyVar(p.name);
  return envFileSets(envOut, name) !== false ? ''
    : `; note: ${envOut} does not set ${name}: if its secret is lost, delete that key at the router and run provision again`;
}

/**
 * Creates the missing keys. Stops at the first failure (a ManagementError naming the profile);
 * every key created before it is already in the env file and the store.
 */
export async function provision(ctx: UpstreamContext, profiles: Profile[], envOut: string): Promise<{ created: string[]; skipped: string[] }> {
  const local = new Map((await ctx.store.upstreamKeys()).map((k) => [k.profile, k]));
  const list = routerLists(ctx);
  const created: string[] = [];
  const skipped: string[] = [];
  for (const p of profiles) {
    const name = upstreamKeyName(p.name);
    const at = new Date(ctx.now()).toISOString();
    const existing = (await list(p)).find((k) => k.name === name);
    if (existing) {
      // Recorded locally too, so sync and the board find it even when this table was lost.
      if (local.get(p.name)?.hash !== existing.hash) await ctx.store.putUpstreamKey(rowFor(p, existing, at));
      ctx.say(`${p.name}: skipped, the router already has a key named ${name} (hash ${shortHash(existing.hash)})${noSecretNote(p, envOut)}`);
      skipped.push(p.name);
      continue;
    }
    const mine = local.get(p.name);
    if (mine) {
      ctx.say(`${p.name}: skipped, upstream_keys already records its key ${mine.name} (hash ${shortHash(mine.hash)}), which the router does not list${noSecretNote(p, envOut)}`);
      skipped.push(p.name);
      continue;
    }
    const call = { router: ctx.config.routers.get(p.router)!.url, profile: p.name, bearer: ctx.provisioningKey };
    const { key, secret } = await ctx.client.createKey(call, { name, limit: p.budget.daily_usd, limit_reset: 'daily' });
    try {
      writeEnvVar(envOut, upstreamKeyVar(p.name), secret);
    } catch (err) {
      throw new ManagementError(p.name, 'bad_response', `key ${name} was created at the router (hash ${shortHash(key.hash)}) but ${envOut} could not be written (${(err as NodeJS.ErrnoException).code ?? (err as Error).message}); the router shows a secret only once: delete that key at the router and run provision again`);
    }
    await ctx.store.putUpstreamKey(rowFor(p, key, at));
    ctx.say(`${p.name}: created ${name}, limit ${usd(key.limit)} per day (reset ${key.limit_reset ?? '-'}); ${upstreamKeyVar(p.name)} written to ${envOut}`);
    created.push(p.name);
  }
  return { created, skipped };
}

/** Finds the profile's key: the hash upstream_keys records, else the router's list by name. */
async function locate(p: Profile, list: (p: Profile) => Promise<ApiKey[]>, local: Map<string, UpstreamKeyRow>): Promise<{ hash: string; from: string } | undefined> {
  const mine = local.get(p.name);
  if (mine) return { hash: mine.hash, from: 'upstream_keys' };
  const found = (await list(p)).find((k) => k.name === upstreamKeyName(p.name));
  return found ? { hash: found.hash, from: 'the router list' } : undefined;
}

/** Moves each key's limit to the profile's daily budget. Returns the profiles whose key is missing. */
export async function sync(ctx: UpstreamContext, profiles: Profile[]): Promise<{ changed: string[]; unchanged: string[]; missing: string[] }> {
  const local = new Map((await ctx.store.upstreamKeys()).map((k) => [k.profile, k]));
  const list = routerLists(ctx);
  const out = { changed: [] as string[], unchanged: [] as string[], missing: [] as string[] };
  for (const p of profiles) {
    const where = await locate(p, list, local);
    const call = { router: ctx.config.routers.get(p.router)!.url, profile: p.name, bearer: ctx.provisioningKey };
    const key = where && (await ctx.client.getKey(call, where.hash));
    if (!where || !key) {
      ctx.say(where
        ? `${p.name}: MISSING, the key ${upstreamKeyName(p.name)} (hash ${shortHash(where.hash)}, from ${where.from}) is not at the router; sync does not recreate keys`
        : `${p.name}: MISSING, no upstream key (run: sluice upstream provision --only ${p.name} --env-out FILE)`);
      out.missing.push(p.name);
      continue;
    }
    const at = new Date(ctx.now()).toISOString();
    const target = p.budget.daily_usd;
    if (key.limit === target) {
      ctx.say(`${p.name}: limit ${usd(target)} unchanged`);
      out.unchanged.push(p.name);
    } else {
      const after = await ctx.client.patchKey(call, key.hash, { limit: target });
      if (!after) {
        ctx.say(`${p.name}: MISSING, the key vanished at the router while its limit was being changed`);
        out.missing.push(p.name);
        continue;
      }
      ctx.say(`${p.name}: limit ${usd(key.limit)} → ${usd(after.limit)}`);
      out.changed.push(p.name);
      Object.assign(key, after);
    }
    await ctx.store.putUpstreamKey(rowFor(p, key, at, local.get(p.name)?.created_at));
  }
  return out;
}

export interface ListedKey {
  profile: string;
  name: string | null;
  hash: string | null;
  label: string | null;
  limit: number | null;
  limit_reset: string | null;
  usage_daily: number | null;
  usage_weekly: number | null;
  usage_monthly: number | null;
  limit_remaining: number | null;
  disabled: boolean | null;
}

/** Each profile's key as the router reports it (one list call per router). */
export async function listUpstream(ctx: UpstreamContext, profiles: Profile[]): Promise<ListedKey[]> {
  const local = new Map((await ctx.store.upstreamKeys()).map((k) => [k.profile, k]));
  const list = routerLists(ctx);
  const rows: ListedKey[] = [];
  for (const p of profiles) {
    const keys = await list(p);
    const hash = local.get(p.name)?.hash;
    const k = keys.find((x) => x.hash === hash) ?? keys.find((x) => x.name === upstreamKeyName(p.name));
    rows.push({
      profile: p.name, name: k?.name ?? null, hash: k?.hash ?? null, label: k?.label ?? null, limit: k?.limit ?? null,
      limit_reset: k?.limit_reset ?? null, usage_daily: k?.usage_daily ?? null, usage_weekly: k?.usage_weekly ?? null,
      usage_monthly: k?.usage_monthly ?? null, limit_remaining: k?.limit_remaining ?? null, disabled: k?.disabled ?? null,
    });
  }
  return rows;
}

export function formatUpstreamTable(rows: ListedKey[]): string {
  const head = ['PROFILE', 'NAME', 'LABEL', 'LIMIT', 'RESET', 'TODAY', 'WEEK', 'MONTH', 'REMAINING', 'DISABLED'];
  const body = rows.map((r) => r.name === null
    ? [r.profile, '(no key)', '-', '-', '-', '-', '-', '-', '-', '-']
    : [r.profile, r.name, r.label ?? '-', usd(r.limit), r.limit_reset ?? '-', usd(r.usage_daily), usd(r.usage_weekly), usd(r.usage_monthly), usd(r.limit_remaining), r.disabled ? 'yes' : 'no']);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i].length)));
  return [head, ...body].map((row) => row.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}
