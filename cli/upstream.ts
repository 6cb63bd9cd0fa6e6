// `sluice upstream provision|sync|list` and `sluice usage snapshot` (ring 1): the admin side of
// each profile's upstream key. Checks its input before any call (exit 2 for bad usage, 78 for a bad
// setting, 1 for a missing provisioning key), turns router failures into one message naming the
// profile and the cause (exit 1), and never prints a secret: new secrets go only to --env-out.
// Its few SLUICE_* variables are read through lib/settings.ts, like the server's.

import type { Config } from '../lib/config.ts';
import { readSettingsOf, upstreamKeysOf, type Settings } from '../lib/settings.ts';
import type { Store } from '../lib/store/store.ts';
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

/** The settings these commands use; a bad one fails here (exit 78), before any call. */
function settingsOf(io: CliIo) {
  return readSettingsOf(io.env, ['managementTimeoutMs', 'driftPct', 'driftUsd', 'provisioningKey', 'upstreamKeyVars']);
}

function provisioningKey(settings: Pick<Settings, 'provisioningKey'>, what: string): string {
  const key = settings.provisioningKey;
  if (!key) throw new UsageError(`SLUICE_PROVISIONING_KEY is not set: ${what} needs the router's management (provisioning) key; nothing was called`, 1);
  return key;
}

/** Runs `work` with the router client; a router failure becomes exit 1 with its message. */
async function withRouter<T>(config: Config, io: CliIo, timeoutMs: number, key: string, work: (ctx: UpstreamContext) => Promise<T>, onFailure = ''): Promise<T> {
  const client = new ManagementClient({ timeoutMs });
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
  const settings = settingsOf(io);
  const key = provisioningKey(settings, 'provision');
  const r = await withRouter(config, io, settings.managementTimeoutMs, key, (ctx) => provision(ctx, profiles, a.envOut!),
    `. The env file holds only the keys created before this failure; run provision again to continue.`);
  io.err(r.created.length
    ? `created ${r.created.length} key(s), skipped ${r.skipped.length}; restart sluice so it loads ${a.envOut}\n`
    : `created nothing, skipped ${r.skipped.length}\n`);
}

export async function upstreamSync(config: Config, a: { only?: string }, io: CliIo): Promise<void> {
  const profiles = profilesFor(config, a.only);
  const settings = settingsOf(io);
  const key = provisioningKey(settings, 'sync');
  const r = await withRouter(config, io, settings.managementTimeoutMs, key, (ctx) => sync(ctx, profiles));
  if (r.missing.length) throw new UsageError(`no key at the router for: ${r.missing.join(', ')} (sync does not create keys; see above)`, 1);
  io.err(`changed ${r.changed.length}, unchanged ${r.unchanged.length}\n`);
}

export async function upstreamList(config: Config, a: { json: boolean }, io: CliIo): Promise<void> {
  const settings = settingsOf(io);
  const key = provisioningKey(settings, 'list');
  const rows = await withRouter(config, io, settings.managementTimeoutMs, key, (ctx) => listUpstream(ctx, [...config.profiles.values()]));
  io.out(a.json ? `${JSON.stringify(rows, null, 2)}\n` : `${formatUpstreamTable(rows)}\n`);
}

export async function usageSnapshot(config: Config, io: CliIo): Promise<void> {
  const settings = settingsOf(io);
  const client = new ManagementClient({ timeoutMs: settings.managementTimeoutMs });
  const { keys: upstreamKeys, missing } = upstreamKeysOf(config, settings);
  const failed: string[] = [];
  await io.withStore(async (store) => {
    const ctx = { config, store, client, upstreamKeys, drift: { pct: settings.driftPct, usd: settings.driftUsd }, now: io.now ?? Date.now };
    for (const p of config.profiles.keys()) {
      const unset = missing.find((m) => m.profile === p);
      if (unset) {
        io.out(`${p}: skipped, ${unset.variable} is not set\n`);
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
