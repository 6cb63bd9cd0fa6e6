// `sluice keys …` and `sluice setup` as real processes (docs/operation.md): the key alone on stdout,
// only its hash and prefix stored (the SQLite file's bytes are searched), conflicts, bad usage and
// bad configuration exit codes, expiry and IP lists, list (table and --json, never a key) and
// revoke with its audit row; one create/list/revoke pass against Postgres.

import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { DatabaseSync } from 'node:sqlite';
import postgres from 'postgres';
import t, { type Test } from 'tap';
import { sluice, tempDir, type Run } from '../helpers/cli.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

// Each case spawns real processes; allow for a loaded machine beyond tap's 30 s default.
t.setTimeout(120_000);

const ROOT = resolve(import.meta.dirname, '../..');
const EXAMPLE_CONFIG = join(ROOT, 'config');
const KEY_RE = /^sluice_([a-z][a-z0-9-]{0,31})_([A-Za-z0-9]{32})$/;
const JSON_FIELDS = ['prefix', 'profile', 'name', 'created_at', 'last_used_at', 'expires_at', 'revoked_at', 'ip_allow', 'state', 'daily_usd', 'monthly_usd', 'day_usd', 'month_usd'];


/** A data directory, the example configuration and a runner bound to them. */
function setup(t: Test, extraEnv: Record<string, string> = {}) {
  const dataDir = tempDir(t, 'sluice-cli-data-');
  const cwd = tempDir(t, 'sluice-cli-cwd-');
  const env = { SLUICE_DATA_DIR: dataDir, SLUICE_CONFIG_DIR: EXAMPLE_CONFIG, ...extraEnv };
  return { dataDir, cwd, run: (...args: string[]) => sluice(args, env, cwd) };
}

function sqlite(dataDir: string): DatabaseSync {
  return new DatabaseSync(join(dataDir, 'sluice.db'), { readOnly: true });
}

const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

async function createOk(t: Test, run: (...a: string[]) => Promise<Run>, ...args: string[]): Promise<string> {
  const r = await run('keys', 'create', ...args);
  t.equal(r.code, 0, `keys create ${args.join(' ')}: exit 0 (${r.stderr.trim()})`);
  return r.stdout.trim();
}

t.test('keys create prints the key alone and stores only its hash and prefix', async (t) => {
  const { dataDir, run } = setup(t);
  const r = await run('keys', 'create', '--profile', 'dev', '--name', 'laptop');
  t.equal(r.code, 0);
  const lines = r.stdout.split('\n');
  t.equal(lines.length, 2, 'one line on stdout');
  t.equal(lines[1], '', 'ending in a newline');
  const key = lines[0]!;
  const m = KEY_RE.exec(key);
  t.ok(m, 'the line is a well-formed key');
  t.equal(m?.[1], 'dev');
  t.notOk(r.stderr.includes(key) || r.stderr.includes(m![2]!), 'stderr never shows the key');
  t.ok(r.stderr.trim().length > 0, 'the explanation goes to stderr');

  const db = sqlite(dataDir);
  const rows = db.prepare('SELECT * FROM keys').all() as Array<Record<string, unknown>>;
  db.close();
  t.equal(rows.length, 1);
  t.equal(rows[0]!.key_hash, sha256(key), 'key_hash is the lower-case hex sha256 of the whole key');
  t.equal(rows[0]!.prefix, `sluice_dev_…${key.slice(-4)}`);
  t.strictSame([rows[0]!.profile, rows[0]!.name, rows[0]!.ip_allow, rows[0]!.expires_at, rows[0]!.revoked_at], ['dev', 'laptop', '', null, null]);
  for (const v of Object.values(rows[0]!)) t.notOk(String(v).includes(m![2]!.slice(0, 8)), 'no column holds the token');
  const files = readdirSync(dataDir);
  t.ok(files.includes('sluice.db'));
  for (const f of files) {
    const bytes = readFileSync(join(dataDir, f));
    t.equal(bytes.indexOf(key), -1, `${f}: the key string is nowhere in the bytes`);
    t.equal(bytes.indexOf(m![2]!), -1, `${f}: nor its token`);
    t.equal(bytes.indexOf(Buffer.from(key, 'utf16le')), -1, `${f}: nor in UTF-16`);
  }

  const [again, other] = await Promise.all([run('keys', 'create', '--profile', 'dev', '--name', 'laptop'), createOk(t, run, '--profile', 'assistant', '--name', 'laptop')]);
  t.equal(again.code, 1, 'a second active key for the same profile and name fails');
  t.equal(again.stdout, '', 'nothing on stdout');
  t.match(again.stderr, /already exists/);
  t.match(other, KEY_RE, 'the same name in another profile is fine');
  t.not(other, key);
});

t.test('bad usage exits 2', async (t) => {
  const { run } = setup(t);
  const cases: Array<[string, string[]]> = [
    ['unknown profile', ['keys', 'create', '--profile', 'nope', '--name', 'x']],
    ['--expires not a date', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--expires', 'tomorrow']],
    ['--expires month 13', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--expires', '2030-13-01']],
    ['--expires Feb 30', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--expires', '2030-02-30']],
    ['--ip garbage', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--ip', 'example.com']],
    ['--name missing', ['keys', 'create', '--profile', 'dev']],
    ['unknown command', ['frobnicate']],
    ['keys without a subcommand', ['keys']],
    ['unknown option', ['keys', 'list', '--colour']],
  ];
  const results = await Promise.all(cases.map(([, args]) => run(...args)));
  cases.forEach(([name], i) => {
    const r = results[i]!;
    t.equal(r.code, 2, `${name}: exit 2`);
    t.equal(r.stdout, '', `${name}: nothing on stdout`);
    t.ok(r.stderr.trim().length > 0, `${name}: a message on stderr`);
  });
  t.match(results[0]!.stderr, /unknown profile "nope"/);
  t.match(results[1]!.stderr, /--expires/);
  const [table, json] = await Promise.all([run('keys', 'list'), run('keys', 'list', '--json')]);
  t.equal(table.code, 0);
  t.equal(table.stdout, '', 'no key was created by any of them: an empty table');
  t.strictSame(JSON.parse(json.stdout), [], 'and an empty JSON array');
});

t.test('expiry, IP lists, list and revoke', async (t) => {
  const { dataDir, run } = setup(t);
  // The first process creates the schema; the next two run at once against the same file.
  const past = await createOk(t, run, '--profile', 'dev', '--name', 'old', '--expires', '2020-01-01');
  const [future, car] = await Promise.all([
    createOk(t, run, '--profile', 'dev', '--name', 'new', '--expires', '2999-12-31', '--ip', '10.0.0.1', '--ip', '192.168.0.0/16', '--ip', '2001:db8::/32'),
    createOk(t, run, '--profile', 'car', '--name', 'dash'),
  ]);
  const keys = [past, future, car];

  const [json, carJson, table, devTable] = await Promise.all([
    run('keys', 'list', '--json'), run('keys', 'list', '--json', '--profile', 'car'), run('keys', 'list'), run('keys', 'list', '--profile', 'dev'),
  ]);
  t.equal(json.code, 0);
  const rows = JSON.parse(json.stdout) as Array<Record<string, unknown>>;
  t.equal(rows.length, 3);
  for (const row of rows) t.strictSame(Object.keys(row).sort(), [...JSON_FIELDS].sort(), 'exactly the contract fields');
  const byName = new Map(rows.map((r) => [r.name, r]));
  t.match(byName.get('old'), { profile: 'dev', state: 'expired', expires_at: '2020-01-01T00:00:00.000Z', revoked_at: null, last_used_at: null, ip_allow: '', prefix: `sluice_dev_…${past.slice(-4)}` });
  t.match(byName.get('new'), { state: 'active', expires_at: '2999-12-31T00:00:00.000Z', ip_allow: '10.0.0.1,192.168.0.0/16,2001:db8::/32' });
  t.match(byName.get('dash'), { profile: 'car', state: 'active', expires_at: null, daily_usd: null, monthly_usd: null, day_usd: 0, month_usd: 0 });
  t.ok(Number.isFinite(Date.parse(byName.get('dash')!.created_at as string)), 'created_at is a timestamp');

  const carOnly = JSON.parse(carJson.stdout) as Array<Record<string, unknown>>;
  t.strictSame(carOnly.map((r) => r.name), ['dash'], '--profile filters');

  t.equal(table.code, 0);
  const lines = table.stdout.trimEnd().split('\n');
  t.strictSame(lines[0]!.split(/\s{2,}/), ['PREFIX', 'PROFILE', 'NAME', 'CREATED', 'LAST USED', 'STATE', 'TODAY USD', 'DAILY CAP', 'MONTH USD', 'MONTHLY CAP']);
  t.equal(lines.length, 4, 'a header and three rows');
  const cells = lines.slice(1).map((l) => l.split(/\s{2,}/));
  t.strictSame(cells.map((c) => [c[0], c[1], c[2], c[4], c[5], ...c.slice(6)]).sort(), [
    [`sluice_car_…${car.slice(-4)}`, 'car', 'dash', '-', 'active', '0.00', '-', '0.00', '-'],
    [`sluice_dev_…${past.slice(-4)}`, 'dev', 'old', '-', 'expired', '0.00', '-', '0.00', '-'],
    [`sluice_dev_…${future.slice(-4)}`, 'dev', 'new', '-', 'active', '0.00', '-', '0.00', '-'],
  ].sort());
  t.equal(devTable.stdout.trimEnd().split('\n').length, 3, 'the table filters by profile too');
  for (const out of [json.stdout, json.stderr, table.stdout, table.stderr]) {
    for (const k of keys) t.notOk(out.includes(k) || out.includes(k.slice(-32)), 'a listing never shows a key');
  }

  const revoke = await run('keys', 'revoke', '--profile', 'dev', '--name', 'new');
  t.equal(revoke.code, 0, revoke.stderr);
  t.equal(revoke.stdout, '');
  t.notOk(revoke.stderr.includes(future), 'revoke does not print the key');
  const [list, twice, none] = await Promise.all([
    run('keys', 'list', '--json', '--profile', 'dev'), run('keys', 'revoke', '--profile', 'dev', '--name', 'new'), run('keys', 'revoke', '--profile', 'dev', '--name', 'never-existed'),
  ]);
  const after = JSON.parse(list.stdout) as Array<Record<string, unknown>>;
  const revoked = after.find((r) => r.name === 'new')!;
  t.equal(revoked.state, 'revoked');
  t.ok(Number.isFinite(Date.parse(revoked.revoked_at as string)), 'revoked_at is set');
  const db = sqlite(dataDir);
  const audit = db.prepare('SELECT ip, prefix, outcome FROM auth_audit').all() as Array<Record<string, unknown>>;
  db.close();
  t.match(audit, [{ prefix: `sluice_dev_…${future.slice(-4)}`, outcome: 'revoked_by_admin' }]);
  t.equal(audit.length, 1, 'one audit row');

  t.equal(twice.code, 1, 'nothing active left: exit 1');
  t.match(twice.stderr, /no active key/);
  t.equal(none.code, 1);

  const again = await createOk(t, run, '--profile', 'dev', '--name', 'new');
  t.match(again, KEY_RE, 'after revocation the name can be used again');
  const final = JSON.parse((await run('keys', 'list', '--json', '--profile', 'dev')).stdout) as Array<Record<string, unknown>>;
  t.strictSame(final.filter((r) => r.name === 'new').map((r) => r.state), ['revoked', 'active']);
});

t.test('the same commands against Postgres', async (t) => {
  const url = await freshPostgresUrl(t);
  const { dataDir, run } = setup(t, { SLUICE_DATABASE_URL: url });
  const key = await createOk(t, run, '--profile', 'ago', '--name', 'ci', '--ip', '203.0.113.0/24');
  t.match(key, KEY_RE);
  const [conflict, list] = await Promise.all([run('keys', 'create', '--profile', 'ago', '--name', 'ci'), run('keys', 'list', '--json')]);
  t.equal(conflict.code, 1, 'conflict');
  const rows = JSON.parse(list.stdout) as Array<Record<string, unknown>>;
  t.equal(rows.length, 1);
  t.match(rows[0], { profile: 'ago', name: 'ci', state: 'active', ip_allow: '203.0.113.0/24', prefix: `sluice_ago_…${key.slice(-4)}` });
  t.equal((await run('keys', 'revoke', '--profile', 'ago', '--name', 'ci')).code, 0);
  const after = JSON.parse((await run('keys', 'list', '--json', '--profile', 'ago')).stdout) as Array<Record<string, unknown>>;
  t.equal(after[0]!.state, 'revoked');

  const sql = postgres(url, { max: 1, onnotice: () => {} });
  t.teardown(() => sql.end({ timeout: 5 }));
  const [k] = await sql`SELECT key_hash, prefix FROM keys`;
  t.equal(k!.key_hash, sha256(key));
  const audit = await sql`SELECT prefix, outcome FROM auth_audit`;
  t.match([...audit], [{ prefix: `sluice_ago_…${key.slice(-4)}`, outcome: 'revoked_by_admin' }]);
  t.strictSame(readdirSync(dataDir), [], 'nothing written to the embedded store');
});

t.test('a bad configuration exits 78 with every problem', async (t) => {
  const cfg = tempDir(t, 'sluice-cli-cfg-');
  writeFileSync(join(cfg, 'profiles.yaml'), readFileSync(join(EXAMPLE_CONFIG, 'profiles.yaml'), 'utf8').replace('router: openrouter', 'router: elsewhere').replace('budget: { daily_usd: 3, monthly_usd: 40 }', 'budget: { daily_usd: 3, monthly_usd: 40, yearly_usd: 400 }'));
  writeFileSync(join(cfg, 'tiers.yaml'), readFileSync(join(EXAMPLE_CONFIG, 'tiers.yaml'), 'utf8').replace('  fast:', '  quick:').replace('[fast, agent, reasoning]', '[quick, agent, reasoning]'));
  const p = join(cfg, 'profiles.yaml');
  const want = [
    `${join(cfg, 'tiers.yaml')}: tiers.fast: is required (budget degradation falls back to it)`,
    `${p}: profiles.dev.router: names unknown router "elsewhere"`,
    `${p}: profiles.assistant.default_tier: names unknown tier "fast"`,
    `${p}: profiles.assistant.budget.yearly_usd: unknown field (allowed: daily_usd, monthly_usd)`,
    `${p}: profiles.car.default_tier: names unknown tier "fast"`,
    `${p}: profiles.benchmark.default_tier: names unknown tier "fast"`,
  ];
  const { run, cwd } = setup(t, { SLUICE_CONFIG_DIR: cfg });
  const argsList = [['keys', 'list'], ['keys', 'create', '--profile', 'dev', '--name', 'x'], ['keys', 'list', '--config', cfg]];
  const [results, missing] = await Promise.all([
    Promise.all(argsList.map((a) => run(...a))),
    sluice(['keys', 'list'], { SLUICE_DATA_DIR: cwd, SLUICE_CONFIG_DIR: join(cfg, 'nowhere') }, cwd),
  ]);
  for (const [i, args] of argsList.entries()) {
    const r = results[i]!;
    t.equal(r.code, 78, `${args.join(' ')}: exit 78`);
    t.equal(r.stdout, '');
    t.strictSame(r.stderr.trimEnd().split('\n').map((l) => l.trim()), ['sluice: configuration is invalid:', ...want], `${args.join(' ')}: every problem on stderr`);
  }
  t.equal(missing.code, 78, 'a missing configuration directory exits 78');
  t.match(missing.stderr, /profiles\.yaml: cannot be read/);
  t.match(missing.stderr, /tiers\.yaml: cannot be read/);
});

t.test('setup --proxy prints the exports', async (t) => {
  const { run } = setup(t);
  const [r, slash, bare] = await Promise.all([
    run('setup', '--proxy', '--url', 'http://x:1', '--key', 'K'), run('setup', '--proxy', '--url', 'https://gw.example/', '--key', 'K'), run('setup', '--proxy', '--url', 'http://x:1'),
  ]);
  t.equal(r.code, 0);
  const exports = new Map<string, string>();
  const comments: string[] = [];
  for (const line of r.stdout.trimEnd().split('\n')) {
    if (line.startsWith('# ')) {
      comments.push(line.slice(2));
      continue;
    }
    const m = /^export ([A-Z_]+)=(.*)$/.exec(line);
    t.ok(m, `a shell export or a comment: ${line}`);
    if (m) exports.set(m[1]!, m[2]!);
  }
  const KEYS = ['ANTHROPIC_BASE_URL', 'ANTHROPIC_AUTH_TOKEN', 'OPENAI_BASE_URL', 'OPENAI_API_KEY', 'SLUICE_KEY'];
  t.strictSame(
    Object.fromEntries(KEYS.map((k) => [k, exports.get(k)])),
    { ANTHROPIC_BASE_URL: 'http://x:1', ANTHROPIC_AUTH_TOKEN: 'K', OPENAI_BASE_URL: 'http://x:1/v1', OPENAI_API_KEY: 'K', SLUICE_KEY: 'K' },
  );
  // Anything else may only clear ANTHROPIC_API_KEY, which would otherwise win over the token.
  for (const [k, v] of exports) if (!KEYS.includes(k)) t.strictSame([k, v], ['ANTHROPIC_API_KEY', '']);
  // Codex's provider block, as comments (the output stays eval-able): the Responses dialect at /v1, its key from SLUICE_KEY.
  const toml = comments.filter((c) => /^[a-z_]+ = |^\[/.test(c));
  t.strictSame(toml, ['model = "sluice/auto"', 'model_provider = "sluice"', '[model_providers.sluice]', 'name = "sluice"', 'base_url = "http://x:1/v1"', 'env_key = "SLUICE_KEY"', 'wire_api = "responses"']);
  t.match(slash.stdout, /^export OPENAI_BASE_URL=https:\/\/gw\.example\/v1$/m, 'a trailing slash is not doubled');
  t.notMatch(bare.stdout, /^export SLUICE_KEY=/m, 'without --key, SLUICE_KEY is already the variable Codex reads');
  t.match(bare.stdout, /^export OPENAI_API_KEY=\$SLUICE_KEY$/m);
});
