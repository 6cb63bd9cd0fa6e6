// Loads and validates profiles.yaml and tiers.yaml into one Config, built once at start-up.
// Validation is strict and exhaustive: unknown fields, bad values and dangling references are
// all collected and thrown together as one ConfigError (exit 78), each naming file and path.
// Nothing here reads the environment: the SLUICE_* variables are lib/settings.ts's.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';

export interface Router { name: string; url: URL }
export interface Tier {
  name: string;
  model: string;
  fallbacks: string[];
  price: { input_per_mtok: number; output_per_mtok: number };
  max_output_tokens: number;
}
export interface Profile {
  name: string;
  default_tier: string;
  router: string;
  budget: { daily_usd: number; monthly_usd: number };
  l2_cache: boolean;
  rate_limits: { per_key_per_minute: number; per_user_per_minute: number };
  /** USD a session may spend per UTC day (null: no cap). loadConfig always sets it; a Profile built elsewhere may leave it out (no cap). */
  session_daily_usd?: number | null;
  /** Whether responses carry the budget headers (default true). loadConfig always sets it; left out: true. */
  budget_headers?: boolean;
}
export interface AutoConfig {
  decision_model: string;
  ladder: string[];
  session_ttl_minutes: number;
  decision_timeout_ms: number;
}
export interface Config {
  dir: string;
  routers: Map<string, Router>;
  profiles: Map<string, Profile>;
  tiers: Map<string, Tier>;
  auto: AutoConfig;
}

export const NAME_RE = /^[a-z][a-z0-9-]{0,31}$/;

export class ConfigError extends Error {
  readonly problems: string[];
  constructor(problems: string[]) {
    super(`configuration is invalid:\n  ${problems.join('\n  ')}`);
    this.name = 'ConfigError';
    this.problems = problems;
  }
}

// A tiny declarative checker: each field names a reader that returns the value or records a
// problem. Readers never throw, so every problem of both files is reported in one pass.
type Problems = string[];
type Obj = Record<string, unknown>;

class Reader {
  readonly file: string;
  readonly problems: Problems;
  constructor(file: string, problems: Problems) {
    this.file = file;
    this.problems = problems;
  }
  fail(path: string, msg: string): undefined {
    this.problems.push(`${this.file}: ${path}: ${msg}`);
    return undefined;
  }
  object(v: unknown, path: string, allowed: string[], required: string[] = []): Obj | undefined {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return this.fail(path, 'must be a mapping');
    const o = v as Obj;
    for (const k of Object.keys(o)) if (!allowed.includes(k)) this.fail(`${path}.${k}`, `unknown field (allowed: ${allowed.join(', ')})`);
    for (const k of required) if (o[k] === undefined) this.fail(`${path}.${k}`, 'is required');
    return o;
  }
  map(v: unknown, path: string): Obj | undefined {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return this.fail(path, 'must be a mapping');
    const o = v as Obj;
    for (const k of Object.keys(o)) if (!NAME_RE.test(k)) this.fail(`${path}.${k}`, 'name must match ^[a-z][a-z0-9-]{0,31}$');
    return o;
  }
  string(v: unknown, path: string): string | undefined {
    if (typeof v !== 'string' || v.trim() === '') return this.fail(path, 'must be a non-empty string');
    return v;
  }
  number(v: unknown, path: string, opts: { min?: number; int?: boolean; positive?: boolean } = {}): number | undefined {
    if (typeof v !== 'number' || !Number.isFinite(v)) return this.fail(path, 'must be a number');
    if (opts.int && !Number.isInteger(v)) return this.fail(path, 'must be an integer');
    if (opts.positive && v <= 0) return this.fail(path, 'must be greater than 0');
    if (opts.min !== undefined && v < opts.min) return this.fail(path, `must be at least ${opts.min}`);
    return v;
  }
  boolean(v: unknown, path: string): boolean | undefined {
    if (typeof v !== 'boolean') return this.fail(path, 'must be true or false');
    return v;
  }
  strings(v: unknown, path: string): string[] | undefined {
    if (!Array.isArray(v)) return this.fail(path, 'must be a list of strings');
    v.forEach((s, i) => this.string(s, `${path}[${i}]`));
    return v.filter((s): s is string => typeof s === 'string');
  }
}

function readYaml(file: string, problems: Problems): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    problems.push(`${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
    return undefined;
  }
  try {
    return parse(text);
  } catch (err) {
    problems.push(`${file}: is not valid YAML (${(err as Error).message.split('\n')[0]})`);
    return undefined;
  }
}

export function loadConfig(dir: string): Config {
  const problems: Problems = [];
  const profilesFile = join(dir, 'profiles.yaml');
  const tiersFile = join(dir, 'tiers.yaml');
  const rawProfiles = readYaml(profilesFile, problems);
  const rawTiers = readYaml(tiersFile, problems);

  const tiers = new Map<string, Tier>();
  // Every tier the file declares, valid or not: references are checked against these names, so a
  // tier with a bad field is reported once, not again by every profile that names it.
  let tierNames: Set<string> | undefined;
  let auto: AutoConfig | undefined;
  if (rawTiers !== undefined) {
    const r = new Reader(tiersFile, problems);
    const top = r.object(rawTiers, '(top)', ['tiers', 'auto'], ['tiers', 'auto']);
    const tierMap = top?.tiers === undefined ? undefined : r.map(top.tiers, 'tiers');
    if (tierMap) tierNames = new Set(Object.keys(tierMap));
    for (const [name, raw] of Object.entries(tierMap ?? {})) {
      const p = `tiers.${name}`;
      const o = r.object(raw, p, ['model', 'fallbacks', 'price', 'max_output_tokens'], ['model', 'price', 'max_output_tokens']);
      if (!o) continue;
      const model = o.model === undefined ? undefined : r.string(o.model, `${p}.model`);
      const fallbacks = o.fallbacks === undefined ? [] : r.strings(o.fallbacks, `${p}.fallbacks`);
      const price = o.price === undefined ? undefined : r.object(o.price, `${p}.price`, ['input_per_mtok', 'output_per_mtok'], ['input_per_mtok', 'output_per_mtok']);
      const input = price?.input_per_mtok === undefined ? undefined : r.number(price.input_per_mtok, `${p}.price.input_per_mtok`, { min: 0 });
      const output = price?.output_per_mtok === undefined ? undefined : r.number(price.output_per_mtok, `${p}.price.output_per_mtok`, { min: 0 });
      const maxOut = o.max_output_tokens === undefined ? undefined : r.number(o.max_output_tokens, `${p}.max_output_tokens`, { int: true, positive: true });
      if (model && fallbacks && input !== undefined && output !== undefined && maxOut !== undefined) {
        tiers.set(name, { name, model, fallbacks, price: { input_per_mtok: input, output_per_mtok: output }, max_output_tokens: maxOut });
      }
    }
    if (tierNames && !tierNames.has('fast')) r.fail('tiers.fast', 'is required (budget degradation falls back to it)');
    const a = top?.auto === undefined ? undefined : r.object(top.auto, 'auto', ['decision_model', 'ladder', 'session_ttl_minutes', 'decision_timeout_ms'], ['decision_model', 'ladder']);
    if (a) {
      const decision_model = a.decision_model === undefined ? undefined : r.string(a.decision_model, 'auto.decision_model');
      const ladder = a.ladder === undefined ? undefined : r.strings(a.ladder, 'auto.ladder');
      ladder?.forEach((t, i) => { if (tierNames && !tierNames.has(t)) r.fail(`auto.ladder[${i}]`, `names unknown tier "${t}"`); });
      if (ladder && ladder.length === 0) r.fail('auto.ladder', 'must name at least one tier');
      const ttl = a.session_ttl_minutes === undefined ? 360 : r.number(a.session_ttl_minutes, 'auto.session_ttl_minutes', { positive: true });
      const timeout = a.decision_timeout_ms === undefined ? 2500 : r.number(a.decision_timeout_ms, 'auto.decision_timeout_ms', { int: true, positive: true });
      if (decision_model && ladder && ttl !== undefined && timeout !== undefined) {
        auto = { decision_model, ladder, session_ttl_minutes: ttl, decision_timeout_ms: timeout };
      }
    }
  }

  const routers = new Map<string, Router>();
  const profiles = new Map<string, Profile>();
  if (rawProfiles !== undefined) {
    const r = new Reader(profilesFile, problems);
    const top = r.object(rawProfiles, '(top)', ['routers', 'profiles'], ['routers', 'profiles']);
    const routerMap = top?.routers === undefined ? undefined : r.map(top.routers, 'routers');
    for (const [name, raw] of Object.entries(routerMap ?? {})) {
      const o = r.object(raw, `routers.${name}`, ['url'], ['url']);
      const url = o?.url === undefined ? undefined : r.string(o.url, `routers.${name}.url`);
      if (url === undefined) continue;
      try {
        const parsed = new URL(url);
        if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') r.fail(`routers.${name}.url`, 'must be an http or https URL');
        else routers.set(name, { name, url: parsed });
      } catch {
        r.fail(`routers.${name}.url`, `is not a URL: ${url}`);
      }
    }
    const profileMap = top?.profiles === undefined ? undefined : r.map(top.profiles, 'profiles');
    for (const [name, raw] of Object.entries(profileMap ?? {})) {
      const p = `profiles.${name}`;
      const o = r.object(raw, p, ['default_tier', 'router', 'budget', 'l2_cache', 'rate_limits', 'session_daily_usd', 'budget_headers'], ['default_tier', 'router', 'budget']);
      if (!o) continue;
      const default_tier = o.default_tier === undefined ? undefined : r.string(o.default_tier, `${p}.default_tier`);
      if (default_tier && tierNames && !tierNames.has(default_tier)) r.fail(`${p}.default_tier`, `names unknown tier "${default_tier}"`);
      const router = o.router === undefined ? undefined : r.string(o.router, `${p}.router`);
      // Own keys only: `in` would accept inherited names such as "toString".
      if (router && routerMap && !Object.hasOwn(routerMap, router)) r.fail(`${p}.router`, `names unknown router "${router}"`);
      const b = o.budget === undefined ? undefined : r.object(o.budget, `${p}.budget`, ['daily_usd', 'monthly_usd'], ['daily_usd', 'monthly_usd']);
      const daily = b?.daily_usd === undefined ? undefined : r.number(b.daily_usd, `${p}.budget.daily_usd`, { positive: true });
      const monthly = b?.monthly_usd === undefined ? undefined : r.number(b.monthly_usd, `${p}.budget.monthly_usd`, { positive: true });
      const l2 = o.l2_cache === undefined ? false : r.boolean(o.l2_cache, `${p}.l2_cache`);
      const rl = o.rate_limits === undefined ? {} : r.object(o.rate_limits, `${p}.rate_limits`, ['per_key_per_minute', 'per_user_per_minute']);
      const perKey = rl?.per_key_per_minute === undefined ? 60 : r.number(rl.per_key_per_minute, `${p}.rate_limits.per_key_per_minute`, { int: true, positive: true });
      const perUser = rl?.per_user_per_minute === undefined ? 10 : r.number(rl.per_user_per_minute, `${p}.rate_limits.per_user_per_minute`, { int: true, positive: true });
      // null (YAML `~`) states "no cap" as leaving the field out does.
      const sessionCap = o.session_daily_usd === undefined || o.session_daily_usd === null ? null : r.number(o.session_daily_usd, `${p}.session_daily_usd`, { positive: true });
      const headers = o.budget_headers === undefined ? true : r.boolean(o.budget_headers, `${p}.budget_headers`);
      if (default_tier && router && daily !== undefined && monthly !== undefined && l2 !== undefined && perKey !== undefined && perUser !== undefined
        && sessionCap !== undefined && headers !== undefined) {
        profiles.set(name, {
          name, default_tier, router, budget: { daily_usd: daily, monthly_usd: monthly }, l2_cache: l2,
          rate_limits: { per_key_per_minute: perKey, per_user_per_minute: perUser },
          session_daily_usd: sessionCap, budget_headers: headers,
        });
      }
    }
  }

  if (problems.length > 0 || !auto) throw new ConfigError(problems.length ? problems : [`${tiersFile}: auto: is required`]);
  return { dir, routers, profiles, tiers, auto };
}

/** A URL with a trailing slash on its path, so relative API paths join under a prefix. */
export function withSlash(url: URL): URL {
  return url.pathname.endsWith('/') ? url : new URL(`${url.href}/`);
}
