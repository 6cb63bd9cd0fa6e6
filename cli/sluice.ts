#!/usr/bin/env node
// The `sluice` command: the gateway (`serve`), the admin tool on the server (`keys …`, and ring 1's
// `upstream …` and `usage snapshot`), the simulated router (`simulate`) and client set-up
// (`setup --proxy`, `setup --statusline`). Wiring only: each command's work lives in its own module.
// Exit codes: 0 done, 1 failed, 2 bad usage, 78 bad configuration.
// Nothing here prints a secret except `keys create`, which prints the new key once on stdout.

import { enableCompileCache } from 'node:module';
import { join, resolve } from 'node:path';
import yargs from 'yargs';
import { hideBin } from 'yargs/helpers';
import { ConfigError, loadConfig } from '../lib/config.ts';
import { readSettingsOf, type Settings } from '../lib/settings.ts';
import { openStore } from '../lib/store/open.ts';
import type { Store } from '../lib/store/store.ts';
import { UsageError } from './errors.ts';
import { statuslineSetting } from './setup.ts';
import { capsChange, describeCaps, formatKeyTable, insertKey, listKeys, prepareKey, revokeKey, setCaps } from './keys.ts';

const env = process.env;

/**
 * The settings an admin command's defaults come from (lib/settings.ts), read when a command needs
 * them (a bad one exits 78); `serve` reads every setting itself, so it reports all problems at once.
 */
const defaults = (): Pick<Settings, 'configDir' | 'dataDir' | 'databaseUrl' | 'listen' | 'provisioningKey'> =>
  readSettingsOf(env, ['configDir', 'dataDir', 'databaseUrl', 'listen', 'provisioningKey']);
const configOpt = { type: 'string', describe: 'directory holding profiles.yaml and tiers.yaml (default: SLUICE_CONFIG_DIR, else ./config)' } as const;

/** Loads (and so validates) the configuration: every keys command refuses to run on a bad one (exit 78). */
const config = (dir: string | undefined) => loadConfig(resolve(dir ?? defaults().configDir));

async function withStore<T>(fn: (store: Store) => Promise<T>): Promise<T> {
  const { databaseUrl, dataDir } = defaults();
  const store = await openStore({ databaseUrl, dataDir: resolve(dataDir) });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

/** What the ring-1 commands print through and open the store with (cli/upstream.ts). */
const io = { env, withStore, out: (s: string) => void process.stdout.write(s), err: (s: string) => void process.stderr.write(s) };

const cli = yargs(hideBin(process.argv))
  .scriptName('sluice')
  .strict()
  .demandCommand(1, 'name a command')
  .recommendCommands()
  .command('serve', 'run the gateway', (y) => y
    .option('config', configOpt)
    .option('listen', { type: 'string', describe: 'HOST:PORT to listen on (default: SLUICE_LISTEN, else 127.0.0.1:8080)' }),
  async (a) => {
    // V8's code cache for the gateway's modules (loaded below, after this call): a restart compiles
    // nothing it compiled before. NODE_COMPILE_CACHE wins; else <data dir>/compile-cache. A cache
    // that cannot be written only costs the saving (enableCompileCache reports, never throws).
    enableCompileCache(env.NODE_COMPILE_CACHE ?? join(resolve(readSettingsOf(env, ['dataDir']).dataDir), 'compile-cache'));
    // Loaded on demand: the gateway's modules would double the start-up time of every admin command.
    const { serve } = await import('./serve.ts');
    await serve({ config: a.config, listen: a.listen });
  })
  .command('check', 'validate the settings and the configuration as serve would, before a restart (exit 78 on any problem)', (y) => y
    .option('config', configOpt),
  async (a) => {
    const { check } = await import('./check.ts');
    const { summary, notes } = check({ config: a.config, env });
    for (const n of notes) process.stderr.write(`note: ${n}\n`);
    process.stdout.write(`${summary}\n`);
  })
  .command('keys', 'manage client keys', (y) => y
    .command('create', 'create a key and print it once', (k) => k
      .option('profile', { type: 'string', demandOption: true })
      .option('name', { type: 'string', demandOption: true })
      .option('expires', { type: 'string', describe: 'YYYY-MM-DD: the key stops working at 00:00 UTC that day' })
      .option('ip', { type: 'string', array: true, describe: 'allowed client IP or CIDR (repeatable)' })
      .option('daily-usd', { type: 'string', describe: "the key's own cap in USD per UTC day, inside its profile's budget" })
      .option('monthly-usd', { type: 'string', describe: "the key's own cap in USD per UTC month, inside its profile's budget" })
      .option('config', configOpt),
    async (a) => {
      // Validated before the store is opened: a bad call creates no database.
      const prepared = prepareKey(config(a.config), { profile: a.profile, name: a.name, expires: a.expires, ip: a.ip, dailyUsd: a['daily-usd'], monthlyUsd: a['monthly-usd'] });
      const key = await withStore((store) => insertKey(store, prepared));
      process.stderr.write(`created a key for profile ${a.profile} (${a.name}); it is shown only this once:\n`);
      process.stdout.write(`${key}\n`);
    })
    .command('list', 'list keys (never the keys themselves)', (k) => k
      .option('profile', { type: 'string' })
      .option('json', { type: 'boolean', default: false })
      .option('config', configOpt),
    async (a) => {
      config(a.config);
      const rows = await withStore((store) => listKeys(store, a.profile));
      process.stdout.write(a.json ? `${JSON.stringify(rows, null, 2)}\n` : rows.length ? `${formatKeyTable(rows)}\n` : '');
      if (!a.json && rows.length === 0) process.stderr.write('no keys\n');
    })
    .command('revoke', 'revoke the active key of a profile and name', (k) => k
      .option('profile', { type: 'string', demandOption: true })
      .option('name', { type: 'string', demandOption: true })
      .option('config', configOpt),
    async (a) => {
      config(a.config);
      const prefix = await withStore((store) => revokeKey(store, { profile: a.profile, name: a.name }));
      process.stderr.write(`revoked ${prefix}; running servers refuse it within 60 s\n`);
    })
    .command('caps', "change or clear the caps of the active key of a profile and name (USD per UTC day and month)", (k) => k
      .option('profile', { type: 'string', demandOption: true })
      .option('name', { type: 'string', demandOption: true })
      .option('daily-usd', { type: 'string', describe: 'the new daily cap in USD, or none to clear it (left out: kept)' })
      .option('monthly-usd', { type: 'string', describe: 'the new monthly cap in USD, or none to clear it (left out: kept)' })
      .option('config', configOpt),
    async (a) => {
      config(a.config);
      const change = capsChange({ dailyUsd: a['daily-usd'], monthlyUsd: a['monthly-usd'] });
      const now = await withStore((store) => setCaps(store, { profile: a.profile, name: a.name }, change));
      // Running servers hold a key's row in their key cache (SLUICE_KEY_CACHE_TTL_S, at most 60 s).
      process.stderr.write(`${now.prefix} (${a.name}, profile ${a.profile}): ${describeCaps(now)}; running servers apply it within 60 s\n`);
    })
    .demandCommand(1, 'name a keys command: create, list, revoke or caps'))
  // Ring 1: each profile's upstream key at its router, and the usage readouts (cli/upstream.ts)
  .command('upstream', "manage each profile's upstream key at its router", (y) => y
    .command('provision', 'create the missing upstream keys, limit = daily budget; secrets go only to --env-out', (k) => k
      .option('only', { type: 'string', describe: 'only this profile' })
      .option('env-out', { type: 'string', describe: 'env file to write SLUICE_UPSTREAM_KEY_<PROFILE>= lines into (mode 0600); required' })
      .option('config', configOpt),
    async (a) => {
      const { upstreamProvision } = await import('./upstream.ts');
      await upstreamProvision(config(a.config), { only: a.only, envOut: a['env-out'] }, io);
    })
    .command('sync', "set each upstream key's limit to its profile's daily budget (secret unchanged)", (k) => k
      .option('only', { type: 'string', describe: 'only this profile' })
      .option('config', configOpt),
    async (a) => {
      const { upstreamSync } = await import('./upstream.ts');
      await upstreamSync(config(a.config), { only: a.only }, io);
    })
    .command('list', "each profile's upstream key: label, limit, usage, remaining", (k) => k
      .option('json', { type: 'boolean', default: false })
      .option('config', configOpt),
    async (a) => {
      const { upstreamList } = await import('./upstream.ts');
      await upstreamList(config(a.config), { json: a.json }, io);
    })
    .demandCommand(1, 'name an upstream command: provision, sync or list'))
  .command('usage', 'usage readouts from the router', (y) => y
    .command('snapshot', "store each profile's GET /api/v1/key readout beside the ledger, and print it", (k) => k
      .option('config', configOpt),
    async (a) => {
      const { usageSnapshot } = await import('./upstream.ts');
      await usageSnapshot(config(a.config), io);
    })
    .demandCommand(1, 'name a usage command: snapshot'))
  .command('simulate', 'run the simulated router (for tests, benchmarks and demos)', (y) => y
    .option('listen', { type: 'string', default: '127.0.0.1:9090' })
    .option('provisioning-key', { type: 'string', describe: 'the management key its /api/v1/keys API accepts (default: SLUICE_PROVISIONING_KEY)' }),
  async (a) => {
    const { startSimulatedRouter } = await import('../lib/sim/index.ts');
    const { parseListen } = await import('./serve.ts');
    const { host, port } = parseListen(a.listen);
    const sim = await startSimulatedRouter({ host, port, provisioningKey: a['provisioning-key'] ?? defaults().provisioningKey, record: false });
    process.stderr.write(`simulated router listening on ${sim.url} (point a router url at it)\n`);
    const stop = () => void sim.close().then(() => process.exit(0));
    process.once('SIGTERM', stop);
    process.once('SIGINT', stop);
  })
  .command('setup', 'print the settings that point clients at sluice, or that show the budget in Claude Code', (y) => y
    .option('proxy', { type: 'boolean', describe: 'print the exports for using sluice as the clients\' base URL' })
    .option('statusline', { type: 'boolean', describe: "print Claude Code's statusLine setting (JSON for ~/.claude/settings.json): the budget in one line" })
    .conflicts('proxy', 'statusline')
    .check((a) => {
      if (!a.proxy && !a.statusline) throw new UsageError('name what to set up: --proxy or --statusline');
      return true;
    })
    .option('url', { type: 'string', describe: 'sluice\'s base URL (default: http:// and SLUICE_LISTEN, else 127.0.0.1:8080)' })
    .option('key', { type: 'string', default: '$SLUICE_KEY', describe: 'the client key (default: a $SLUICE_KEY reference, so no key lands in shell history)' }),
  (a) => {
    if (a.statusline) {
      // The script reads the key and base URL Claude Code already has: nothing secret goes in the setting.
      process.stdout.write(statuslineSetting());
      process.stderr.write('merge this into ~/.claude/settings.json; the line reads ANTHROPIC_BASE_URL and ANTHROPIC_AUTH_TOKEN (or ANTHROPIC_API_KEY) as Claude Code does\n');
      return;
    }
    const base = (a.url ?? `http://${defaults().listen}`).replace(/\/+$/, '');
    process.stdout.write([
      `export ANTHROPIC_BASE_URL=${base}`,
      `export ANTHROPIC_AUTH_TOKEN=${a.key}`,
      `export ANTHROPIC_API_KEY=`,
      `export OPENAI_BASE_URL=${base}/v1`,
      `export OPENAI_API_KEY=${a.key}`,
      // Codex reads its key from the variable its provider's env_key names (the default already is that variable).
      ...(a.key === '$SLUICE_KEY' ? [] : [`export SLUICE_KEY=${a.key}`]),
      // Comments, so the output stays something a shell can eval (docs/responses.md).
      '# Codex CLI: add to ~/.codex/config.toml',
      '# model = "sluice/auto"',
      '# model_provider = "sluice"',
      '# [model_providers.sluice]',
      '# name = "sluice"',
      `# base_url = "${base}/v1"`,
      '# env_key = "SLUICE_KEY"',
      '# wire_api = "responses"',
      // The server side of a front proxy, which no client setting can fix (docs/configuration.md).
      '# On the sluice server behind a front proxy: name the proxy, or every client counts as its address',
      '# (IP block, key allowlists). Nothing is trusted by default. nginx or Caddy on the server itself,',
      '# proxying to 127.0.0.1:8080: SLUICE_TRUSTED_PROXIES=127.0.0.1 in the server\'s environment;',
      '# nginx also needs: proxy_set_header X-Forwarded-For $remote_addr;',
      '# Caddy\'s reverse_proxy sets X-Forwarded-For by default. A proxy elsewhere: its address instead.',
      '',
    ].join('\n'));
  })
  .fail((msg, err) => {
    if (err) throw err;
    process.stderr.write(`sluice: ${msg}\nRun with --help for usage.\n`);
    process.exit(2);
  });

try {
  await cli.parseAsync();
} catch (err) {
  if (err instanceof ConfigError) {
    process.stderr.write(`sluice: ${err.message}\n`);
    process.exit(78);
  }
  if (err instanceof UsageError) {
    process.stderr.write(`sluice: ${err.message}\n`);
    process.exit(err.exitCode);
  }
  process.stderr.write(`sluice: ${(err as Error).message}\n`);
  process.exit(1);
}
