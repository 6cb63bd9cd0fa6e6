// `sluice keys create --daily-usd/--monthly-usd`, `sluice keys caps` and `keys list` with caps and
// spend, as real processes on both stores (docs/operation.md): caps set at creation, changed,
// kept and cleared on the active key; the exit codes (2 bad usage before any store is opened, 1 no
// such active key, 78 bad configuration); the listing's caps and the spend of today and of this
// month, read from the store's ledger by key id (two keys of a profile apart, rows of another
// month or without a key left out).

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t, { type Test } from 'tap';
import { sluice, tempDir } from '../helpers/cli.ts';
import { windows } from '../../lib/budget.ts';
import { openStore } from '../../lib/store/open.ts';
import type { KeyRow } from '../../lib/store/store.ts';
import { spentRow } from '../helpers/budget-caps.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';

t.setTimeout(120_000);

const ROOT = resolve(import.meta.dirname, '../..');
const EXAMPLE_CONFIG = join(ROOT, 'config');


type Row = Record<string, unknown>;

/** The same checks on either store: `env` points the processes at it, `store()` opens it here. */
async function capsAndSpend(t: Test, env: Record<string, string>, dataDir: string) {
  const cwd = tempDir(t, 'sluice-caps-cwd-');
  const run = (...args: string[]) => sluice(args, { SLUICE_CONFIG_DIR: EXAMPLE_CONFIG, SLUICE_DATA_DIR: dataDir, ...env }, cwd);
  const list = async (...args: string[]) => {
    const r = await run('keys', 'list', '--json', ...args);
    t.equal(r.code, 0, r.stderr);
    return new Map((JSON.parse(r.stdout) as Row[]).map((k) => [k.name, k]));
  };

  const created = await run('keys', 'create', '--profile', 'dev', '--name', 'runaway', '--daily-usd', '1', '--monthly-usd', '12.5');
  t.equal(created.code, 0, created.stderr);
  t.equal(created.stdout.split('\n').length, 2, 'the key alone on stdout');
  t.equal((await run('keys', 'create', '--profile', 'dev', '--name', 'colleague')).code, 0);
  t.equal((await run('keys', 'create', '--profile', 'dev', '--name', 'monthly', '--monthly-usd', '0.5')).code, 0);
  let keys = await list();
  t.match(keys.get('runaway'), { daily_usd: 1, monthly_usd: 12.5, day_usd: 0, month_usd: 0 }, 'created with both caps');
  t.match(keys.get('colleague'), { daily_usd: null, monthly_usd: null }, 'no caps unless given');
  t.match(keys.get('monthly'), { daily_usd: null, monthly_usd: 0.5 });

  // Spend in the store, as a running server writes it: rows carry the key's id.
  const store = await openStore({ databaseUrl: env.SLUICE_DATABASE_URL, dataDir });
  const rows = new Map<string, KeyRow>((await store.listKeys('dev')).map((k) => [k.name, k]));
  const now = Date.now();
  const w = windows(now);
  const today = Math.max(w.dayStart, now - 1000);
  const runaway = rows.get('runaway')!;
  const colleague = rows.get('colleague')!;
  const spent = [spentRow(runaway, 0.25, today), spentRow(runaway, 0.125, today), spentRow(colleague, 2, today), spentRow(runaway, 9, w.monthStart - 1)];
  // Earlier this month, when today is not its first day.
  const earlier = w.dayStart > w.monthStart;
  if (earlier) spent.push(spentRow(runaway, 3, w.dayStart - 1));
  await store.insertRequests([...spent, { ...spentRow(runaway, 40, today), key_id: null }]);
  await store.close();

  keys = await list();
  t.match(keys.get('runaway'), { day_usd: 0.375, month_usd: earlier ? 3.375 : 0.375 }, "its own rows only: today's and this month's");
  t.match(keys.get('colleague'), { day_usd: 2, month_usd: 2 }, 'another key of the same profile apart');
  const table = await run('keys', 'list', '--profile', 'dev');
  const line = table.stdout.split('\n').find((l) => l.includes(' runaway '))!.split(/\s{2,}/);
  t.strictSame(line.slice(6), ['0.38', '1.00', earlier ? '3.38' : '0.38', '12.50'], 'the table: today, daily cap, month, monthly cap');
  t.strictSame(table.stdout.split('\n').find((l) => l.includes(' colleague '))!.split(/\s{2,}/).slice(6), ['2.00', '-', '2.00', '-'], 'no cap: -');

  const change = await run('keys', 'caps', '--profile', 'dev', '--name', 'runaway', '--daily-usd', '2.5');
  t.equal(change.code, 0, change.stderr);
  t.equal(change.stdout, '', 'nothing on stdout');
  t.match(change.stderr, /daily cap 2\.5 USD, monthly cap 12\.5 USD; running servers apply it within 60 s/);
  t.match((await list()).get('runaway'), { daily_usd: 2.5, monthly_usd: 12.5 }, 'a cap left out is kept');
  t.equal((await run('keys', 'caps', '--profile', 'dev', '--name', 'runaway', '--monthly-usd', 'none', '--daily-usd', 'none')).code, 0);
  t.match((await list()).get('runaway'), { daily_usd: null, monthly_usd: null }, 'none clears');
  t.equal((await run('keys', 'caps', '--profile', 'dev', '--name', 'colleague', '--monthly-usd', '30')).code, 0);
  t.match((await list('--profile', 'dev')).get('colleague'), { daily_usd: null, monthly_usd: 30 }, 'caps added to a key created without');

  const [missing, revoked] = await Promise.all([
    run('keys', 'caps', '--profile', 'dev', '--name', 'nobody', '--daily-usd', '1'),
    run('keys', 'revoke', '--profile', 'dev', '--name', 'monthly').then(() => run('keys', 'caps', '--profile', 'dev', '--name', 'monthly', '--daily-usd', '1')),
  ]);
  t.equal(missing.code, 1, 'no such key: exit 1');
  t.match(missing.stderr, /no active key named "nobody" in profile "dev"/);
  t.equal(revoked.code, 1, 'a revoked key: exit 1');
}

t.test('create with caps, caps change and clear, list with caps and spend: SQLite', async (t) => {
  await capsAndSpend(t, {}, tempDir(t, 'sluice-caps-data-'));
});

t.test('the same against Postgres', async (t) => {
  const dataDir = tempDir(t, 'sluice-caps-data-');
  await capsAndSpend(t, { SLUICE_DATABASE_URL: await freshPostgresUrl(t) }, dataDir);
  t.notOk(existsSync(join(dataDir, 'sluice.db')), 'nothing written to the embedded store');
});

t.test('bad usage exits 2 and opens no store; a bad configuration 78', async (t) => {
  const dataDir = tempDir(t, 'sluice-caps-data-');
  const cwd = tempDir(t, 'sluice-caps-cwd-');
  const env = { SLUICE_CONFIG_DIR: EXAMPLE_CONFIG, SLUICE_DATA_DIR: dataDir };
  const cases: Array<[string, string[]]> = [
    ['create: a cap of 0', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--daily-usd', '0']],
    ['create: a negative cap', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--monthly-usd', '-1']],
    ['create: none (nothing to clear)', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--daily-usd', 'none']],
    ['create: not a number', ['keys', 'create', '--profile', 'dev', '--name', 'x', '--daily-usd', '1e400']],
    ['caps: no cap named', ['keys', 'caps', '--profile', 'dev', '--name', 'x']],
    ['caps: a word', ['keys', 'caps', '--profile', 'dev', '--name', 'x', '--daily-usd', 'lots']],
    ['caps: no name', ['keys', 'caps', '--profile', 'dev', '--daily-usd', '1']],
  ];
  const results = await Promise.all(cases.map(([, args]) => sluice(args, env, cwd)));
  cases.forEach(([what], i) => {
    t.equal(results[i]!.code, 2, `${what}: exit 2`);
    t.equal(results[i]!.stdout, '', `${what}: nothing on stdout`);
    t.match(results[i]!.stderr, /^sluice: /, `${what}: a message`);
  });
  t.match(results[0]!.stderr, /--daily-usd must be a number of USD greater than 0, got "0"/);
  t.match(results[5]!.stderr, /--daily-usd must be a number of USD greater than 0, or none, got "lots"/);
  t.notOk(existsSync(join(dataDir, 'sluice.db')), 'no database was created by any of them');

  const cfg = tempDir(t, 'sluice-caps-cfg-');
  writeFileSync(join(cfg, 'profiles.yaml'), readFileSync(join(EXAMPLE_CONFIG, 'profiles.yaml'), 'utf8').replace('router: openrouter', 'router: elsewhere'));
  writeFileSync(join(cfg, 'tiers.yaml'), readFileSync(join(EXAMPLE_CONFIG, 'tiers.yaml'), 'utf8'));
  const bad = await sluice(['keys', 'caps', '--profile', 'dev', '--name', 'x', '--daily-usd', '1'], { ...env, SLUICE_CONFIG_DIR: cfg }, cwd);
  t.equal(bad.code, 78, 'a bad configuration: exit 78');
  t.match(bad.stderr, /names unknown router "elsewhere"/);
});
