// Configuration loading (docs/configuration.md): the example config/ loads as documented, every problem in
// both files is reported in one ConfigError naming file and path (unknown fields, bad values,
// missing `fast`, dangling tier and router names, bad names, YAML errors, missing files), the
// documented defaults apply, and upstreamKeyVar names the profile's environment variable.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { upstreamKeyVar } from '../../lib/settings.ts';

const EXAMPLE = resolve(import.meta.dirname, '../../config');

function configDir(t: Test, files: { profiles?: string; tiers?: string }): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-config-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  if (files.profiles !== undefined) writeFileSync(join(dir, 'profiles.yaml'), files.profiles);
  if (files.tiers !== undefined) writeFileSync(join(dir, 'tiers.yaml'), files.tiers);
  return dir;
}

/** The problems loadConfig reports, or [] when it loads. */
function problems(dir: string): string[] {
  try {
    loadConfig(dir);
    return [];
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return err.problems;
  }
}

const GOOD_TIERS = `tiers:
  fast:
    model: google/gemini-2.5-flash
    price: { input_per_mtok: 0.3, output_per_mtok: 2.5 }
    max_output_tokens: 8192
auto:
  decision_model: google/gemini-2.5-flash-lite
  ladder: [fast]
`;

const GOOD_PROFILES = `routers:
  openrouter:
    url: https://openrouter.ai
profiles:
  dev:
    default_tier: fast
    router: openrouter
    budget: { daily_usd: 5, monthly_usd: 60 }
`;

t.test('the example config/ loads', async (t) => {
  const c = loadConfig(EXAMPLE);
  t.strictSame([...c.profiles.keys()], ['dev', 'assistant', 'car', 'ago', 'benchmark']);
  t.strictSame([...c.tiers.keys()], ['fast', 'agent', 'reasoning']);
  t.strictSame([...c.routers.keys()], ['openrouter']);
  t.equal(c.routers.get('openrouter')!.url.href, 'https://openrouter.ai/');
  t.strictSame(c.profiles.get('dev'), {
    name: 'dev', default_tier: 'agent', router: 'openrouter', budget: { daily_usd: 5, monthly_usd: 60 }, l2_cache: false,
    rate_limits: { per_key_per_minute: 60, per_user_per_minute: 10 }, session_daily_usd: null, budget_headers: true,
  });
  t.strictSame(c.tiers.get('fast'), {
    name: 'fast', model: 'google/gemini-2.5-flash', fallbacks: ['openai/gpt-4.1-mini'],
    price: { input_per_mtok: 0.3, output_per_mtok: 2.5 }, max_output_tokens: 8192,
  });
  t.strictSame(c.auto, { decision_model: 'google/gemini-2.5-flash-lite', ladder: ['fast', 'agent', 'reasoning'], session_ttl_minutes: 360, decision_timeout_ms: 2500 });
  for (const p of c.profiles.values()) {
    t.ok(c.tiers.has(p.default_tier), `${p.name}: default tier exists`);
    t.ok(c.routers.has(p.router), `${p.name}: router exists`);
  }
});

t.test('defaults', async (t) => {
  const dir = configDir(t, { profiles: GOOD_PROFILES, tiers: GOOD_TIERS });
  const c = loadConfig(dir);
  const dev = c.profiles.get('dev')!;
  t.strictSame(dev.rate_limits, { per_key_per_minute: 60, per_user_per_minute: 10 }, 'rate limits default to 60/10');
  t.equal(dev.l2_cache, false, 'l2_cache defaults to false');
  t.strictSame(c.tiers.get('fast')!.fallbacks, [], 'no fallbacks by default');
  t.equal(c.auto.session_ttl_minutes, 360, 'auto session ttl default');
  t.equal(c.auto.decision_timeout_ms, 2500, 'auto decision timeout default');
  t.equal(c.dir, dir);

  const partial = configDir(t, {
    profiles: GOOD_PROFILES.replace('budget: { daily_usd: 5, monthly_usd: 60 }', 'budget: { daily_usd: 5, monthly_usd: 60 }\n    rate_limits: { per_user_per_minute: 3 }\n    l2_cache: true'),
    tiers: GOOD_TIERS,
  });
  const p = loadConfig(partial).profiles.get('dev')!;
  t.strictSame(p.rate_limits, { per_key_per_minute: 60, per_user_per_minute: 3 }, 'an omitted limit keeps its default');
  t.equal(p.l2_cache, true);
});

t.test('session_daily_usd and budget_headers: defaults, values, and strict checks', async (t) => {
  const dev = (extra: string) => configDir(t, {
    profiles: GOOD_PROFILES.replace('budget: { daily_usd: 5, monthly_usd: 60 }', `budget: { daily_usd: 5, monthly_usd: 60 }\n${extra}`),
    tiers: GOOD_TIERS,
  });
  const plain = loadConfig(dev('')).profiles.get('dev')!;
  t.equal(plain.session_daily_usd, null, 'no session cap by default');
  t.equal(plain.budget_headers, true, 'budget headers on by default');
  const set = loadConfig(dev('    session_daily_usd: 0.5\n    budget_headers: false')).profiles.get('dev')!;
  t.equal(set.session_daily_usd, 0.5);
  t.equal(set.budget_headers, false);
  t.equal(loadConfig(dev('    session_daily_usd: ~')).profiles.get('dev')!.session_daily_usd, null, 'null states no cap');
  const bad = dev('    session_daily_usd: 0\n    budget_headers: "no"');
  const p = join(bad, 'profiles.yaml');
  t.strictSame(problems(bad), [
    `${p}: profiles.dev.session_daily_usd: must be greater than 0`,
    `${p}: profiles.dev.budget_headers: must be true or false`,
  ]);
  const text = dev('    session_daily_usd: lots');
  t.strictSame(problems(text), [`${join(text, 'profiles.yaml')}: profiles.dev.session_daily_usd: must be a number`]);
});

t.test('every problem of both files at once, each with file and path', async (t) => {
  const dir = configDir(t, {
    profiles: `routers:
  openrouter:
    url: https://openrouter.ai
  broken:
    url: "not a url"
  ftp:
    url: ftp://example.com
color: blue
profiles:
  dev:
    default_tier: agent
    router: openrouter
    budget: { daily_usd: -5, monthly_usd: 60 }
    colour: red
  car:
    default_tier: turbo
    router: nowhere
    budget: { daily_usd: 1, monthly_usd: "lots" }
  my_profile:
    default_tier: agent
    router: openrouter
    budget: { daily_usd: 1, monthly_usd: 2 }
  assistant:
    default_tier: reasoning
    router: toString
    budget: { daily_usd: 1, monthly_usd: 2 }
    rate_limits: { per_key_per_minute: 1.5 }
`,
    tiers: `tiers:
  agent:
    model: x/agent
    price: { input_per_mtok: 1, output_per_mtok: 2, currency: usd }
    max_output_tokens: 100
  reasoning:
    model: x/reasoning
    price: { input_per_mtok: 1, output_per_mtok: 2 }
    max_output_tokens: 0
auto:
  decision_model: m
  ladder: [agent, huge, constructor]
`,
  });
  const p = join(dir, 'profiles.yaml');
  const ti = join(dir, 'tiers.yaml');
  t.strictSame(problems(dir), [
    `${ti}: tiers.agent.price.currency: unknown field (allowed: input_per_mtok, output_per_mtok)`,
    `${ti}: tiers.reasoning.max_output_tokens: must be greater than 0`,
    `${ti}: tiers.fast: is required (budget degradation falls back to it)`,
    `${ti}: auto.ladder[1]: names unknown tier "huge"`,
    `${ti}: auto.ladder[2]: names unknown tier "constructor"`,
    `${p}: (top).color: unknown field (allowed: routers, profiles)`,
    `${p}: routers.broken.url: is not a URL: not a url`,
    `${p}: routers.ftp.url: must be an http or https URL`,
    `${p}: profiles.my_profile: name must match ^[a-z][a-z0-9-]{0,31}$`,
    `${p}: profiles.dev.colour: unknown field (allowed: default_tier, router, budget, l2_cache, rate_limits, session_daily_usd, budget_headers)`,
    `${p}: profiles.dev.budget.daily_usd: must be greater than 0`,
    `${p}: profiles.car.default_tier: names unknown tier "turbo"`,
    `${p}: profiles.car.router: names unknown router "nowhere"`,
    `${p}: profiles.car.budget.monthly_usd: must be a number`,
    // `reasoning` is declared (only its own field is wrong): no second, misleading problem here.
    `${p}: profiles.assistant.router: names unknown router "toString"`,
    `${p}: profiles.assistant.rate_limits.per_key_per_minute: must be an integer`,
  ]);
});

t.test('missing pieces and wrong shapes', async (t) => {
  const dir = configDir(t, {
    profiles: `routers:
  openrouter: {}
profiles:
  dev:
    router: openrouter
    budget: 5
    l2_cache: "no"
`,
    tiers: `tiers:
  fast:
    model: ""
    fallbacks: [ok/model, 3]
    price: { input_per_mtok: -1 }
    max_output_tokens: 10.5
`,
  });
  const p = join(dir, 'profiles.yaml');
  const ti = join(dir, 'tiers.yaml');
  t.strictSame(problems(dir), [
    `${ti}: (top).auto: is required`,
    `${ti}: tiers.fast.model: must be a non-empty string`,
    `${ti}: tiers.fast.fallbacks[1]: must be a non-empty string`,
    `${ti}: tiers.fast.price.output_per_mtok: is required`,
    `${ti}: tiers.fast.price.input_per_mtok: must be at least 0`,
    `${ti}: tiers.fast.max_output_tokens: must be an integer`,
    `${p}: routers.openrouter.url: is required`,
    `${p}: profiles.dev.default_tier: is required`,
    `${p}: profiles.dev.budget: must be a mapping`,
    `${p}: profiles.dev.l2_cache: must be true or false`,
  ]);
});

t.test('a default tier naming an unknown tier, with fast present', async (t) => {
  const dir = configDir(t, { profiles: GOOD_PROFILES.replace('default_tier: fast', 'default_tier: agent'), tiers: GOOD_TIERS });
  t.strictSame(problems(dir), [`${join(dir, 'profiles.yaml')}: profiles.dev.default_tier: names unknown tier "agent"`]);
});

t.test('YAML syntax errors and missing files', async (t) => {
  const broken = configDir(t, { profiles: 'routers:\n  openrouter:\n    url: [unclosed\nprofiles: {}\n', tiers: GOOD_TIERS });
  const got = problems(broken);
  t.equal(got.length, 1);
  t.match(got[0], new RegExp(`^${join(broken, 'profiles.yaml').replaceAll('/', '\\/')}: is not valid YAML \\(.*line \\d+, column \\d+`));

  const missing = configDir(t, { tiers: GOOD_TIERS });
  t.strictSame(problems(missing), [`${join(missing, 'profiles.yaml')}: cannot be read (ENOENT)`]);

  const none = configDir(t, {});
  t.strictSame(problems(none), [`${join(none, 'profiles.yaml')}: cannot be read (ENOENT)`, `${join(none, 'tiers.yaml')}: cannot be read (ENOENT)`]);

  const empty = configDir(t, { profiles: '', tiers: '# nothing\n' });
  t.strictSame(problems(empty), [`${join(empty, 'tiers.yaml')}: (top): must be a mapping`, `${join(empty, 'profiles.yaml')}: (top): must be a mapping`]);

  const dup = configDir(t, { profiles: GOOD_PROFILES + '  dev:\n    default_tier: fast\n', tiers: GOOD_TIERS });
  t.match(problems(dup), [/profiles\.yaml: is not valid YAML/], 'a profile named twice is an error, not a silent override');
});

t.test('the error message lists every problem', async (t) => {
  const dir = configDir(t, { profiles: GOOD_PROFILES.replace('daily_usd: 5', 'daily_usd: zero'), tiers: GOOD_TIERS.replace('ladder: [fast]', 'ladder: []') });
  let err: unknown;
  try {
    loadConfig(dir);
  } catch (e) {
    err = e;
  }
  t.ok(err instanceof ConfigError);
  const e = err as ConfigError;
  t.strictSame(e.problems, [
    `${join(dir, 'tiers.yaml')}: auto.ladder: must name at least one tier`,
    `${join(dir, 'profiles.yaml')}: profiles.dev.budget.daily_usd: must be a number`,
  ]);
  t.strictSame(e.message.split('\n').slice(1).map((l) => l.trim()), e.problems);
});

t.test('upstreamKeyVar', async (t) => {
  t.equal(upstreamKeyVar('my-profile'), 'SLUICE_UPSTREAM_KEY_MY_PROFILE');
  t.equal(upstreamKeyVar('dev'), 'SLUICE_UPSTREAM_KEY_DEV');
  t.equal(upstreamKeyVar('a-b-c9'), 'SLUICE_UPSTREAM_KEY_A_B_C9');
});
