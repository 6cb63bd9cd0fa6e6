// The environment sluice reads: every SLUICE_* variable in one table (SETTINGS: the variable, its
// default, its rule and a one-line meaning) and the one reader of that table. readSettings(env)
// reads the environment once, at start-up, into one typed, frozen Settings; every bad value is
// collected and all of them are thrown together as one ConfigError (sluice exits 78), each naming
// the variable and what it must be. The per-profile upstream keys (SLUICE_UPSTREAM_KEY_<PROFILE>)
// are read here too; upstreamKeysOf() pairs them with the configured profiles. The gateway and the
// ring-1 loops take their values from a Settings passed in; the admin commands read the few they
// need through readSettingsOf(), the same table and rules.

import type { BlockList } from 'node:net';
import { compileIpList } from './client-ip.ts';
import { ConfigError, type Config } from './config.ts';

type Env = Readonly<Record<string, string | undefined>>;

/** How a variable's text becomes its value: `parse` returns undefined to refuse (or throws, its message shown too). */
interface Rule<T> {
  /** Completes "NAME must be …". */
  must: string;
  parse(text: string): T | undefined;
  /** The refused text is left out of the problem (it may carry a password). */
  secret?: boolean;
}

/** One row of the table. */
export interface Setting<T> {
  /** The variable (for the per-profile keys: the pattern, SLUICE_UPSTREAM_KEY_<PROFILE>). */
  name: string;
  /** The default as docs/configuration.md shows it; null: unset. */
  shown: string | null;
  /** What a value must be. */
  must: string;
  /** What the variable sets, in one line. */
  meaning: string;
  /** Its value from `env`: the default when unset or blank; a bad value is added to `problems`. */
  read(env: Env, problems: string[]): T;
}

// The rules.
const text: Rule<string> = { must: 'text', parse: (s) => s };
const number = (must: string, ok: (n: number) => boolean, scale = 1): Rule<number> => ({
  must, parse: (s) => { const n = Number(s); return Number.isFinite(n) && ok(n) ? n * scale : undefined; },
});
const seconds = (must: string, ok: (n: number) => boolean) => number(must, ok, 1000); // read in seconds, kept in ms
const whole = (must: string, min: number) => number(must, (n) => Number.isInteger(n) && n >= min);
const url = (protocols: string[]): Rule<string> => ({
  must: `a ${protocols.map((p) => `${p}//`).join(' or ')} URL`,
  parse: (s) => { try { return protocols.includes(new URL(s).protocol) ? s : undefined; } catch { return undefined; } },
  secret: true,
});
const oneOf = (values: string[]): Rule<string> => ({ must: `one of ${values.join(', ')}`, parse: (s) => (values.includes(s.trim()) ? s.trim() : undefined) });

/** HOST:PORT (an IPv6 host in brackets); undefined when `value` is not that. */
export function hostPort(value: string): { host: string; port: number } | undefined {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(value.trim());
  return m && Number(m[3]) <= 65535 ? { host: m[1] ?? m[2], port: Number(m[3]) } : undefined;
}

/** A variable with a default, given as the text it would be set to. */
function variable<T>(name: string, rule: Rule<T>, shown: string, meaning: string): Setting<T> {
  const fallback = rule.parse(shown);
  if (fallback === undefined) throw new Error(`${name}: its default "${shown}" breaks its own rule`);
  return withRule(name, rule, shown, fallback, meaning);
}

/** A variable that may stay unset; then its value is `unset`. */
function optional<T, U>(name: string, rule: Rule<T>, unset: U, meaning: string): Setting<T | U> {
  return withRule<T | U>(name, rule, null, unset, meaning);
}

function withRule<T>(name: string, rule: Rule<T>, shown: string | null, fallback: T, meaning: string): Setting<T> {
  return {
    name, shown, must: rule.must, meaning,
    read(env, problems) {
      const raw = env[name];
      if (raw === undefined || raw.trim() === '') return fallback;
      let value: T | undefined;
      let why = '';
      try {
        value = rule.parse(raw);
      } catch (err) {
        why = ` (${(err as Error).message})`;
      }
      if (value !== undefined) return value;
      problems.push(`${name} must be ${rule.must}, ${rule.secret ? 'got something else (the value is not shown: it may hold a password)' : `got "${raw}"${why}`}`);
      return fallback;
    },
  };
}

const UPSTREAM_KEY_PREFIX = 'SLUICE_UPSTREAM_KEY_';

/** The variable that carries a profile's upstream key: the name upper-cased, `-` → `_`. */
export function upstreamKeyVar(profile: string): string {
  return `${UPSTREAM_KEY_PREFIX}${profile.toUpperCase().replaceAll('-', '_')}`;
}

/** Every SLUICE_UPSTREAM_KEY_* that is set, by variable (which profile each one is for is upstreamKeysOf's). */
const upstreamKeyVars: Setting<Readonly<Record<string, string>>> = {
  name: `${UPSTREAM_KEY_PREFIX}<PROFILE>`, shown: null, must: 'the profile\'s upstream key',
  meaning: 'the profile\'s upstream key; unset: that profile answers 503',
  read(env) {
    const out: Record<string, string> = {};
    for (const [k, v] of Object.entries(env)) if (k.startsWith(UPSTREAM_KEY_PREFIX) && v?.trim()) out[k] = v; // blank: unset, as everywhere
    return Object.freeze(out);
  },
};

const NONE = compileIpList([]);

/** The table: every SLUICE_* variable, keyed by its field in Settings. */
export const SETTINGS = {
  configDir: variable('SLUICE_CONFIG_DIR', text, './config', 'directory holding profiles.yaml and tiers.yaml (also --config DIR)'),
  listen: variable('SLUICE_LISTEN', { must: 'HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080)', parse: (s) => (hostPort(s) ? s.trim() : undefined) }, '127.0.0.1:8080', 'host:port to listen on (also --listen)'),
  dataDir: variable('SLUICE_DATA_DIR', text, './data', 'directory of the embedded store (sluice.db) and the row spool'),
  databaseUrl: optional('SLUICE_DATABASE_URL', url(['postgres:', 'postgresql:']), undefined, 'when set, Postgres is the store'),
  redisUrl: optional('SLUICE_REDIS_URL', url(['redis:', 'rediss:']), undefined, 'when set, Redis holds the counters'),
  upstreamKeyVars,
  provisioningKey: optional('SLUICE_PROVISIONING_KEY', text, undefined, 'the router\'s management key, used only by `sluice upstream …`'),
  usageRefreshMs: variable('SLUICE_USAGE_REFRESH_S', seconds('a number of seconds, 0 or more (0 turns it off)', (n) => n >= 0), '300', 'how often the server reads each profile\'s usage at the router; 0 turns it off'),
  reconcilePollMs: variable('SLUICE_RECONCILE_POLL_S', seconds('a number of seconds, 0 or more (0 turns it off)', (n) => n >= 0), '2', 'how often the server looks for estimated rows to reconcile; 0 turns it off'),
  managementTimeoutMs: variable('SLUICE_MANAGEMENT_TIMEOUT_S', seconds('a positive number of seconds', (n) => n > 0), '15', 'longest wait for any management call'),
  driftPct: variable('SLUICE_DRIFT_PCT', number('a percentage, 0 or more', (n) => n >= 0), '2', 'a drift exceeds this percentage of the router\'s figure'),
  driftUsd: variable('SLUICE_DRIFT_USD', number('an amount in USD, 0 or more', (n) => n >= 0), '0.05', 'a drift exceeds this amount'),
  trustedProxies: optional<BlockList, BlockList>('SLUICE_TRUSTED_PROXIES', { must: 'comma-separated IP addresses or CIDRs', parse: (s) => compileIpList(s.split(',')) }, NONE, 'the peers whose X-Forwarded-For is believed; unset: none'),
  maxConnections: variable('SLUICE_MAX_CONNECTIONS', whole('a whole number of connections (0: no cap)', 0), '16384', 'open client connections in all (0: no cap)'),
  maxPerAddress: variable('SLUICE_MAX_CONNECTIONS_PER_IP', whole('a whole number of connections (0: no cap)', 0), '256', 'open client connections per socket address, IPv6 per /64 (0: no cap)'),
  headersTimeoutMs: variable('SLUICE_HEADERS_TIMEOUT_S', seconds('a number of seconds above 0, at most 120', (n) => n > 0 && n <= 120), '10', 'longest wait for a request\'s complete header block'),
  keepAliveTimeoutMs: variable('SLUICE_KEEPALIVE_TIMEOUT_S', seconds('a number of seconds above 0, at most 3600', (n) => n > 0 && n <= 3600), '65', 'how long an idle kept-alive connection stays open'),
  upstreamTimeoutMs: variable('SLUICE_UPSTREAM_TIMEOUT_S', seconds('a positive number of seconds', (n) => n > 0), '300', 'longest wait for upstream headers, and longest silence inside a stream'),
  keyCacheTtlMs: variable('SLUICE_KEY_CACHE_TTL_S', seconds('a number of seconds from 0 to 60', (n) => n >= 0 && n <= 60), '60', 'how long a key lookup is cached (how soon a revocation bites)'),
  shutdownGraceMs: variable('SLUICE_SHUTDOWN_GRACE_S', seconds('a number of seconds, 0 or more', (n) => n >= 0), '600', 'how long open streams may run on after SIGTERM (the drain; keep the unit\'s TimeoutStopSec above it)'),
  warmupRequests: variable('SLUICE_WARMUP_REQUESTS', whole('a whole number of requests (0: no warm-up)', 0), '1000', 'synthetic requests through two throwaway gateways before the server takes traffic, so its first requests are as fast as the rest (0: none)'),
  logLevel: variable('SLUICE_LOG_LEVEL', oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']), 'info', 'the log level'),
  requestRetentionDays: optional('SLUICE_REQUEST_RETENTION_DAYS', whole('a whole number of days, 1 or more', 1), null, 'days of raw request rows kept; unset: all'),
};

type Table = typeof SETTINGS;
export type SettingName = keyof Table;

/** Every value of the table, read once at start-up; durations are in milliseconds. */
export type Settings = { readonly [K in SettingName]: Table[K] extends Setting<infer T> ? T : never };

/**
 * Reads the named settings from `env`; every bad value is reported at once, in one ConfigError
 * (exit 78). For a command that needs only a few of them: the others are neither read nor checked.
 */
export function readSettingsOf<K extends SettingName>(env: Env, names: readonly K[]): Pick<Settings, K> {
  const problems: string[] = [];
  const out: Partial<Record<SettingName, unknown>> = {};
  for (const k of names) out[k] = SETTINGS[k].read(env, problems);
  if (problems.length > 0) throw new ConfigError(problems);
  return Object.freeze(out) as Pick<Settings, K>;
}

/** Every setting from `env` (the server's start-up read); all bad values at once, as one ConfigError. */
export function readSettings(env: Env): Settings {
  return readSettingsOf(env, Object.keys(SETTINGS) as SettingName[]);
}

/**
 * Each configured profile's upstream key, and the profiles without one (with the variable that
 * would carry it): those answer 503.
 */
export function upstreamKeysOf(config: Pick<Config, 'profiles'>, settings: Pick<Settings, 'upstreamKeyVars'>): { keys: Map<string, string>; missing: Array<{ profile: string; variable: string }> } {
  const keys = new Map<string, string>();
  const missing: Array<{ profile: string; variable: string }> = [];
  for (const profile of config.profiles.keys()) {
    const variable = upstreamKeyVar(profile);
    const key = settings.upstreamKeyVars[variable];
    if (key) keys.set(profile, key);
    else missing.push({ profile, variable });
  }
  return { keys, missing };
}
