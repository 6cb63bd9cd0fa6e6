// `sluice upstream provision|sync|list` and `sluice usage snapshot` (CONTRACT §8, ring 1): the
// admin side of each profile's upstream key. Checks its input before any call (exit 2 for bad
// usage, 1 for a missing provisioning key), turns router failures into one message naming the
// profile and the cause (exit 1), and never prints a secret: new secrets go only to --env-out.

import { upstreamKeyVar, type Config } from '../lib/config.ts';
import type { Store } from '../lib/store/store.ts';
import { upstreamSettings } from '../lib/upstream/index.ts';
import { ManagementClient, ManagementError } from '../lib/upstream/management.ts';
import { formatUpstreamTable, listUpstream, provision, selectProfiles, sync, UnknownProfileError, type UpstreamContext } from '../lib/upstream/provision.ts';
import { describeSnapshot, snapshotProfile } from '../lib/upstream/usage.ts';
import { UsageError } from './errors.ts';

export interface CliIo {
  env: NodeJS.ProcessEnv;
  withStore: <T>(fn: (store: Store) => Promise<T>) => Promise<T>;
  out: (text: string) => void;
  err: (text: string) => void;
  now?: () => number;
}

function profilesFor(config: Config, only: string | undefined) {
  try {
    return selectProfiles(config, only);
  } catch (err) {
    if (err instanceof UnknownProfileError) throw new UsageError(err.message);
    throw err;
  }
}

function provisioningKey(env: NodeJS.ProcessEnv, what: string): string {
  const key = env.SLUICE_PROVISIONING_KEY;
  if (!key) throw new UsageError(`SLUICE_PROVISIONING_KEY is not set: ${what} needs the router's management (provisioning) key; nothing was called`, 1);
  return key;
}

/** Runs `work` with the router client; a router failure becomes exit 1 with its message. */
async function withRouter<T>(config: Config, io: CliIo, key: string, work: (ctx: UpstreamContext) => Promise<T>, onFailure = ''): Promise<T> {
  const client = new ManagementClient({ timeoutMs: upstreamSettings(io.env).managementTimeoutMs });
  return io.withStore(async (store) => {
    try {
      return await work({ config, store, client, provisioningKey: key, now: io.now ?? Date.now, say: (line) => io.out(`${line}\n`) });
    } catch (err) {
      if (err instanceof ManagementError) throw new UsageError(`${err.message}${onFailure}`, 1);
      throw err;
    }
  });
}

export async function upstreamProvision(config: Config, a: { only?: string; envOut?: string }, io: CliIo): Promise<void> {
  if (!a.envOut) {
    throw new UsageError('provision needs --env-out FILE: the router shows a new key\'s secret only once, and sluice prints no secret, so it must go straight into the env file the service loads. Nothing was created.');
  }
  const profiles = profilesFor(config, a.only);
  upstreamSettings(io.env); // a bad SLUICE_MANAGEMENT_TIMEOUT_S fails here (78), before any call
  const key = provisioningKey(io.env, 'provision');
  const r = await withRouter(config, io, key, (ctx) => provision(ctx, profiles, a.envOut!),
    `. The env file holds only the keys created before this failure; run provision again to continue.`);
  io.err(r.created.length
    ? `created ${r.created.length} key(s), skipped ${r.skipped.length}; restart sluice so it loads ${a.envOut}\n`
    : `created nothing, skipped ${r.skipped.length}\n`);
}

export async function upstreamSync(config: Config, a: { only?: string }, io: CliIo): Promise<void> {
  const profiles = profilesFor(config, a.only);
  upstreamSettings(io.env);
  const key = provisioningKey(io.env, 'sync');
  const r = await withRouter(config, io, key, (ctx) => sync(ctx, profiles));
  if (r.missing.length) throw new UsageError(`no key at the router for: ${r.missing.join(', ')} (sync does not create keys; see above)`, 1);
  io.err(`changed ${r.changed.length}, unchanged ${r.unchanged.length}\n`);
}

export async function upstreamList(config: Config, a: { json: boolean }, io: CliIo): Promise<void> {
  upstreamSettings(io.env);
  const key = provisioningKey(io.env, 'list');
  const rows = await withRouter(config, io, key, (ctx) => listUpstream(ctx, [...config.profiles.values()]));
  io.out(a.json ? `${JSON.stringify(rows, null, 2)}\n` : `${formatUpstreamTable(rows)}\n`);
}

export async function usageSnapshot(config: Config, io: CliIo): Promise<void> {
  const settings = upstreamSettings(io.env);
  const client = new ManagementClient({ timeoutMs: settings.managementTimeoutMs });
  const upstreamKeys = new Map<string, string>();
  for (const p of config.profiles.keys()) {
    const v = io.env[upstreamKeyVar(p)];
    if (v) upstreamKeys.set(p, v);
  }
  const failed: string[] = [];
  await io.withStore(async (store) => {
    const ctx = { config, store, client, upstreamKeys, drift: settings.drift, now: io.now ?? Date.now };
    for (const p of config.profiles.keys()) {
      if (!upstreamKeys.has(p)) {
        io.out(`${p}: skipped, ${upstreamKeyVar(p)} is not set\n`);
        continue;
      }
      try {
        io.out(`${describeSnapshot(await snapshotProfile(ctx, p))}\n`);
      } catch (err) {
        if (!(err instanceof ManagementError)) throw err;
        io.out(`${p}: FAILED, ${err.message.replace(/^profile [^:]+: /, '')}\n`);
        failed.push(p);
      }
    }
  });
  if (failed.length) throw new UsageError(`no snapshot for: ${failed.join(', ')} (see above)`, 1);
}
