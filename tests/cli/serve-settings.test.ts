// `sluice serve`'s settings (lib/settings.ts): every default as the table shows it and as the
// gateway's own defaults are, the result frozen, each variable read, the per-profile upstream
// keys paired with the profiles, and a bad value of each SLUICE_* variable refused with a problem
// naming the variable, in the function and through a real process that exits 78 before it opens a
// store or listens; several bad values are all reported by one run. Also: `setup --proxy` says how
// to set SLUICE_TRUSTED_PROXIES behind nginx or Caddy and its output still evaluates in a shell.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';
import { inList } from '../../lib/client-ip.ts';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { readSettings, readSettingsOf, SETTINGS, upstreamKeysOf, type SettingName } from '../../lib/settings.ts';

// Real processes on a possibly loaded machine: more than tap's 30 s default.
t.setTimeout(120_000);

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'cli', 'sluice.ts');

/** `sluice ARGS` in a fresh working and data directory, with only the SLUICE_* variables given here. */
async function run(args: string[], env: Record<string, string>) {
  const cwd = mkdtempSync(join(tmpdir(), 'sluice-settings-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_'))) as Record<string, string>;
  const child = spawn(process.execPath, [CLI, ...args], { cwd, env: { ...base, SLUICE_CONFIG_DIR: join(ROOT, 'config'), SLUICE_DATA_DIR: cwd, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr, storeOpened: existsSync(join(cwd, 'sluice.db')) };
}

/** One bad value of every variable that has a rule (the others take any text). */
const BAD: Record<string, string> = {
  SLUICE_LISTEN: 'localhost',
  SLUICE_DATABASE_URL: 'mysql://sluice:hunter2@db/sluice',
  SLUICE_REDIS_URL: 'memcached://cache:11211',
  SLUICE_USAGE_REFRESH_S: '-1',
  SLUICE_RECONCILE_POLL_S: 'often',
  SLUICE_MANAGEMENT_TIMEOUT_S: '0',
  SLUICE_DRIFT_PCT: 'x',
  SLUICE_DRIFT_USD: '-0.01',
  SLUICE_TRUSTED_PROXIES: '127.0.0.1,nginx.local',
  SLUICE_MAX_CONNECTIONS: '1.5',
  SLUICE_MAX_CONNECTIONS_PER_IP: 'many',
  SLUICE_HEADERS_TIMEOUT_S: '121',
  SLUICE_KEEPALIVE_TIMEOUT_S: 'NaN',
  SLUICE_UPSTREAM_TIMEOUT_S: '-5',
  SLUICE_KEY_CACHE_TTL_S: '61',
  SLUICE_SHUTDOWN_GRACE_S: '10s',
  SLUICE_WARMUP_REQUESTS: 'lots',
  SLUICE_LOG_LEVEL: 'loud',
  SLUICE_REQUEST_RETENTION_DAYS: '0',
};
const ANY_TEXT = ['SLUICE_CONFIG_DIR', 'SLUICE_DATA_DIR', 'SLUICE_UPSTREAM_KEY_<PROFILE>', 'SLUICE_PROVISIONING_KEY'];
const SECRET = ['SLUICE_DATABASE_URL', 'SLUICE_REDIS_URL'];
const fields = Object.keys(SETTINGS) as SettingName[];
const must = (name: string) => Object.values(SETTINGS).find((s) => s.name === name)!.must;

/** The problem a bad value makes: the variable, what it must be, and the value unless it may hold a password. */
const problem = (name: string, value: string) => SECRET.includes(name)
  ? `${name} must be ${must(name)}, got something else (the value is not shown: it may hold a password)`
  : `${name} must be ${must(name)}, got "${value}"`;

t.test('the defaults', async (t) => {
  const s = readSettings({});
  t.same({ maxConnections: s.maxConnections, maxPerAddress: s.maxPerAddress, headersTimeoutMs: s.headersTimeoutMs, keepAliveTimeoutMs: s.keepAliveTimeoutMs },
    { maxConnections: 16_384, maxPerAddress: 256, headersTimeoutMs: 10_000, keepAliveTimeoutMs: 65_000 }, 'the connection bounds');
  t.ok(s.keepAliveTimeoutMs > 60_000, "idle connections outlast nginx's upstream keepalive_timeout (60 s)");
  t.match(s, {
    configDir: './config', listen: '127.0.0.1:8080', dataDir: './data', databaseUrl: undefined, redisUrl: undefined, provisioningKey: undefined,
    usageRefreshMs: 300_000, reconcilePollMs: 2000, managementTimeoutMs: 15_000, driftPct: 2, driftUsd: 0.05,
    upstreamTimeoutMs: 300_000, keyCacheTtlMs: 60_000, shutdownGraceMs: 600_000, warmupRequests: 1000, logLevel: 'info', requestRetentionDays: null,
  });
  t.strictSame(s.upstreamKeyVars, {});
  for (const ip of ['127.0.0.1', '::1', '10.0.0.5']) t.notOk(inList(s.trustedProxies, ip), `${ip} is not trusted by default`);
  // Each default is the value its documented text gives, and a blank value is the default too.
  for (const f of fields) {
    const { shown } = SETTINGS[f];
    const name = SETTINGS[f].name.replace('<PROFILE>', 'DEV');
    if (shown !== null) t.same(readSettingsOf({ [name]: shown }, [f]), readSettingsOf({}, [f]), `${name}=${shown} is the default`);
    t.same(readSettingsOf({ [name]: ' ' }, [f]), readSettingsOf({}, [f]), `${name} blank is the default`);
  }
});

t.test('read once into one frozen object', async (t) => {
  const env: Record<string, string> = { SLUICE_UPSTREAM_TIMEOUT_S: '30' };
  const s = readSettings(env);
  env.SLUICE_UPSTREAM_TIMEOUT_S = '60';
  t.equal(s.upstreamTimeoutMs, 30_000, 'a later change of the environment changes nothing');
  t.ok(Object.isFrozen(s) && Object.isFrozen(s.upstreamKeyVars));
  t.throws(() => { (s as { upstreamTimeoutMs: number }).upstreamTimeoutMs = 1; }, TypeError);
});

t.test('each variable is read', async (t) => {
  const s = readSettings({
    SLUICE_CONFIG_DIR: '/etc/sluice', SLUICE_LISTEN: '[::1]:9000', SLUICE_DATA_DIR: '/var/lib/sluice',
    SLUICE_DATABASE_URL: 'postgresql://u:p@db/sluice', SLUICE_REDIS_URL: 'rediss://cache:6380/1', SLUICE_PROVISIONING_KEY: 'sk-or-v1-p',
    SLUICE_USAGE_REFRESH_S: '0', SLUICE_RECONCILE_POLL_S: '0.5', SLUICE_MANAGEMENT_TIMEOUT_S: '1.5', SLUICE_DRIFT_PCT: '0', SLUICE_DRIFT_USD: '1',
    SLUICE_TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8', SLUICE_MAX_CONNECTIONS: '5000', SLUICE_MAX_CONNECTIONS_PER_IP: '0',
    SLUICE_HEADERS_TIMEOUT_S: '2.5', SLUICE_KEEPALIVE_TIMEOUT_S: '125', SLUICE_UPSTREAM_TIMEOUT_S: '30', SLUICE_KEY_CACHE_TTL_S: '0',
    SLUICE_SHUTDOWN_GRACE_S: '0', SLUICE_WARMUP_REQUESTS: '0', SLUICE_LOG_LEVEL: ' warn ', SLUICE_REQUEST_RETENTION_DAYS: '30',
  });
  t.match(s, {
    configDir: '/etc/sluice', listen: '[::1]:9000', dataDir: '/var/lib/sluice',
    databaseUrl: 'postgresql://u:p@db/sluice', redisUrl: 'rediss://cache:6380/1', provisioningKey: 'sk-or-v1-p',
    usageRefreshMs: 0, reconcilePollMs: 500, managementTimeoutMs: 1500, driftPct: 0, driftUsd: 1,
    maxConnections: 5000, maxPerAddress: 0, headersTimeoutMs: 2500, keepAliveTimeoutMs: 125_000,
    upstreamTimeoutMs: 30_000, keyCacheTtlMs: 0, shutdownGraceMs: 0, warmupRequests: 0, logLevel: 'warn', requestRetentionDays: 30,
  });
  t.ok(inList(s.trustedProxies, '127.0.0.1') && inList(s.trustedProxies, '10.1.2.3') && !inList(s.trustedProxies, '11.0.0.1'));
});

t.test('the per-profile upstream keys: one lookup, paired with the configured profiles', async (t) => {
  const config = loadConfig(join(ROOT, 'config'));
  const s = readSettings({ SLUICE_UPSTREAM_KEY_DEV: 'sk-dev', SLUICE_UPSTREAM_KEY_CAR: '', SLUICE_UPSTREAM_KEY_NOBODY: 'sk-x' });
  const { keys, missing } = upstreamKeysOf(config, s);
  t.strictSame([...keys], [['dev', 'sk-dev']], 'an empty key is no key; a variable for no profile is ignored');
  t.strictSame(missing.map((m) => m.profile), [...config.profiles.keys()].filter((p) => p !== 'dev'));
  t.match(missing.find((m) => m.profile === 'car'), { variable: 'SLUICE_UPSTREAM_KEY_CAR' });
  t.notOk(JSON.stringify(missing).includes('sk-'), 'no key in what is logged about the missing ones');
});

t.test('a bad value of each variable is refused, naming the variable and what it must be', async (t) => {
  const names = Object.values(SETTINGS).map((s) => s.name);
  t.strictSame([...Object.keys(BAD), ...ANY_TEXT].sort(), [...names].sort(), 'every variable of the table is either checked here or takes any text');
  for (const [name, value] of Object.entries(BAD)) {
    const err = t.throws(() => readSettings({ [name]: value }), ConfigError, `${name}=${value} is refused`) as ConfigError;
    t.equal(err.problems.length, 1);
    t.match(err.problems[0], new RegExp(`^${name} must be `));
    t.ok(err.problems[0].startsWith(problem(name, value)), err.problems[0]);
  }
  t.doesNotThrow(() => readSettings({ SLUICE_CONFIG_DIR: '-/x y', SLUICE_DATA_DIR: '1.5', SLUICE_PROVISIONING_KEY: '?', SLUICE_UPSTREAM_KEY_DEV: ' ' }), 'the others take any text');
  const all = t.throws(() => readSettings(BAD)) as ConfigError;
  t.strictSame(all.problems.map((p) => p.split(' ')[0]), Object.keys(BAD), 'every bad value at once, in the table\'s order');
});

t.test('a bad value of each variable exits 78 naming it, before a store is opened or a port bound', async (t) => {
  const runs = await Promise.all(Object.entries(BAD).map(async ([name, value]) => ({ name, value, r: await run(['serve', '--listen', '127.0.0.1:0'], { [name]: value }) })));
  for (const { name, value, r } of runs) {
    t.equal(r.code, 78, `${name}=${value}: exit 78`);
    t.ok(r.stderr.startsWith(`sluice: configuration is invalid:\n  ${problem(name, value)}`), r.stderr);
    t.notMatch(r.stdout, /sluice ready/, `${name}: it never listened`);
    t.notOk(r.storeOpened, `${name}: no store was opened`);
  }
  const grace = runs.find((x) => x.name === 'SLUICE_SHUTDOWN_GRACE_S')!.r;
  t.equal(grace.stderr, 'sluice: configuration is invalid:\n  SLUICE_SHUTDOWN_GRACE_S must be a number of seconds, 0 or more, got "10s"\n');
  t.match(runs.find((x) => x.name === 'SLUICE_TRUSTED_PROXIES')!.r.stderr, /\(not an IP address or CIDR: nginx\.local\)/, 'the bad entry is named');
  t.notMatch(runs.find((x) => x.name === 'SLUICE_DATABASE_URL')!.r.stderr, /hunter2/, 'a URL\'s password is never echoed');
});

t.test('several bad values: all reported in one run', async (t) => {
  const r = await run(['serve', '--listen', '127.0.0.1:0'], BAD);
  t.equal(r.code, 78);
  const lines = r.stderr.trimEnd().split('\n');
  t.equal(lines[0], 'sluice: configuration is invalid:');
  t.equal(lines.length, 1 + Object.keys(BAD).length, 'one line per bad variable');
  for (const [name, value] of Object.entries(BAD)) t.ok(lines.some((l) => l.startsWith(`  ${problem(name, value)}`)), name);
  t.notOk(r.storeOpened);
});

t.test('setup --proxy says how to trust the front proxy, and stays eval-able', async (t) => {
  const r = await run(['setup', '--proxy', '--url', 'http://127.0.0.1:8080', '--key', 'K'], {});
  t.equal(r.code, 0);
  const comments = r.stdout.split('\n').filter((l) => l.startsWith('#')).join('\n');
  t.match(comments, /SLUICE_TRUSTED_PROXIES=127\.0\.0\.1/);
  t.match(comments, /proxy_set_header X-Forwarded-For \$remote_addr;/, 'the nginx line');
  t.match(comments, /Caddy/);
  const shell = spawn('sh', ['-c', `eval "$1"; printf '%s|%s' "$ANTHROPIC_BASE_URL" "$OPENAI_API_KEY"`, 'sh', r.stdout], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  shell.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const [code] = (await once(shell, 'close')) as [number | null];
  t.equal(code, 0, 'sh evaluates the output');
  t.equal(out, 'http://127.0.0.1:8080|K');
});
