// `sluice upstream provision|sync|list` and `sluice usage snapshot` as an operator runs them: real
// CLI processes against the simulated router's management API, on both stores. Covers the output
// of each command, the skip rules (router list, local table, a second machine), the env file, the
// exit codes of bad usage, and every management fault (unreachable, 401, 403, 5xx, a hang).

import { chmodSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { profilesYaml, startSimWithConfig } from '../helpers/gateway.ts';
import { freshPostgresUrl } from '../helpers/postgres.ts';
import { runCli } from '../helpers/processes.ts';

const PROVISIONING = 'sk-or-v1-provisioning';
const PROFILES = ['dev', 'assistant', 'tiny', 'nokey'];


async function setup(t: Test, kind: 'sqlite' | 'postgres') {
  const s = await startSimWithConfig(t);
  const databaseUrl = kind === 'postgres' ? await freshPostgresUrl(t) : undefined;
  const baseEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
  const env: Record<string, string | undefined> = { ...baseEnv, SLUICE_DATA_DIR: s.dataDir, SLUICE_PROVISIONING_KEY: PROVISIONING, SLUICE_MANAGEMENT_TIMEOUT_S: '2' };
  if (databaseUrl) env.SLUICE_DATABASE_URL = databaseUrl;
  const envFile = join(s.dataDir, 'sluice.env');
  const cli = (args: string[], extra: Record<string, string | undefined> = {}) => runCli([...args, '--config', s.configDir], { ...env, ...extra });
  const store = async () => {
    const st = await openStore({ databaseUrl, dataDir: s.dataDir });
    t.teardown(() => st.close());
    return st;
  };
  /** The env file's variables (name → value). */
  const envVars = () => Object.fromEntries(readFileSync(envFile, 'utf8').split('\n').filter((l) => l.includes('=')).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const mgmtCalls = () => s.sim.received.filter((r) => r.path.startsWith('/api/v1/keys'));
  return { ...s, cli, store, envFile, envVars, mgmtCalls, databaseUrl, env };
}

for (const kind of ['sqlite', 'postgres'] as const) {
  t.test(`${kind}: provision → env file, skip on a second run and on a second machine; sync; list; snapshot`, async (t) => {
    const s = await setup(t, kind);
    writeFileSync(s.envFile, '# sluice environment\nSLUICE_LISTEN=127.0.0.1:8080\nSLUICE_UPSTREAM_KEY_DEV=stale\n');
    chmodSync(s.envFile, 0o640);

    const first = await s.cli(['upstream', 'provision', '--env-out', s.envFile]);
    t.equal(first.code, 0, first.stderr);
    t.strictSame(first.stdout.trim().split('\n'), [
      `dev: created sluice:dev, limit $5.00 per day (reset daily); SLUICE_UPSTREAM_KEY_DEV written to ${s.envFile}`,
      `assistant: created sluice:assistant, limit $3.00 per day (reset daily); SLUICE_UPSTREAM_KEY_ASSISTANT written to ${s.envFile}`,
      `tiny: created sluice:tiny, limit $0.0010 per day (reset daily); SLUICE_UPSTREAM_KEY_TINY written to ${s.envFile}`,
      `nokey: created sluice:nokey, limit $1.00 per day (reset daily); SLUICE_UPSTREAM_KEY_NOKEY written to ${s.envFile}`,
    ]);
    t.equal(first.stderr, `created 4 key(s), skipped 0; restart sluice so it loads ${s.envFile}\n`);
    const creates = s.sim.received.filter((r) => r.method === 'POST' && r.path === '/api/v1/keys');
    t.strictSame(creates.map((r) => r.json), [
      { name: 'sluice:dev', limit: 5, limit_reset: 'daily' },
      { name: 'sluice:assistant', limit: 3, limit_reset: 'daily' },
      { name: 'sluice:tiny', limit: 0.001, limit_reset: 'daily' },
      { name: 'sluice:nokey', limit: 1, limit_reset: 'daily' },
    ], 'one create per profile: name, limit = daily budget, daily reset');
    t.ok(creates.every((r) => r.headers.authorization === `Bearer ${PROVISIONING}`), 'with the provisioning key');
    const vars = s.envVars();
    t.strictSame(Object.keys(vars), ['SLUICE_LISTEN', 'SLUICE_UPSTREAM_KEY_DEV', 'SLUICE_UPSTREAM_KEY_ASSISTANT', 'SLUICE_UPSTREAM_KEY_TINY', 'SLUICE_UPSTREAM_KEY_NOKEY'], 'other lines kept, the stale line replaced');
    t.ok(readFileSync(s.envFile, 'utf8').startsWith('# sluice environment\n'), 'comments kept');
    for (const p of PROFILES) t.match(vars[`SLUICE_UPSTREAM_KEY_${p.toUpperCase()}`], /^sk-or-v1-[0-9a-f]{64}$/);
    t.equal(statSync(s.envFile).mode & 0o777, 0o600, 'mode 0600 (never looser than it was)');
    for (const p of PROFILES) t.notOk(first.stdout.includes(vars[`SLUICE_UPSTREAM_KEY_${p.toUpperCase()}`]) || first.stderr.includes(vars[`SLUICE_UPSTREAM_KEY_${p.toUpperCase()}`]), `no secret printed (${p})`);
    const store = await s.store();
    t.strictSame((await store.upstreamKeys()).map((k) => [k.profile, k.name, k.limit_usd, k.limit_reset]), [
      ['assistant', 'sluice:assistant', 3, 'daily'], ['dev', 'sluice:dev', 5, 'daily'], ['nokey', 'sluice:nokey', 1, 'daily'], ['tiny', 'sluice:tiny', 0.001, 'daily'],
    ]);

    // Again: the router's list says each exists.
    const again = await s.cli(['upstream', 'provision', '--env-out', s.envFile]);
    t.equal(again.code, 0, again.stderr);
    t.match(again.stdout, /^dev: skipped, the router already has a key named sluice:dev \(hash [0-9a-f]{12}…\)$/m);
    t.equal(again.stdout.trim().split('\n').length, 4);
    t.equal(again.stderr, 'created nothing, skipped 4\n');
    t.strictSame(s.envVars(), vars, 'the env file is untouched');

    // A second machine: its own empty store and env file, the same router.
    const other = join(s.dataDir, 'machine-2');
    const second = await s.cli(['upstream', 'provision', '--only', 'dev', '--env-out', join(other, 'x.env')], { SLUICE_DATA_DIR: other, SLUICE_DATABASE_URL: undefined });
    t.equal(second.code, 0, second.stderr);
    t.equal(second.stdout, `dev: skipped, the router already has a key named sluice:dev (hash ${(await store.upstreamKeys()).find((k) => k.profile === 'dev')!.hash.slice(0, 12)}…); note: ${join(other, 'x.env')} does not set SLUICE_UPSTREAM_KEY_DEV: if its secret is lost, delete that key at the router and run provision again\n`, 'the secret is not in that machine\'s file: said so');
    t.equal(s.sim.received.filter((r) => r.method === 'POST' && r.path === '/api/v1/keys').length, 4, 'no duplicate minted');

    // sync: a budget changed in the configuration.
    writeFileSync(join(s.configDir, 'profiles.yaml'), profilesYaml(s.sim.url).replace('budget: { daily_usd: 5, monthly_usd: 60 }', 'budget: { daily_usd: 7.5, monthly_usd: 60 }'));
    const synced = await s.cli(['upstream', 'sync']);
    t.equal(synced.code, 0, synced.stderr);
    t.strictSame(synced.stdout.trim().split('\n'), ['dev: limit $5.00 → $7.50', 'assistant: limit $3.00 unchanged', 'tiny: limit $0.0010 unchanged', 'nokey: limit $1.00 unchanged']);
    t.equal(synced.stderr, 'changed 1, unchanged 3\n');
    const patches = s.sim.received.filter((r) => r.method === 'PATCH');
    t.equal(patches.length, 1, 'only the changed key is patched');
    t.strictSame(patches[0].json, { limit: 7.5 });
    t.equal((await store.upstreamKeys()).find((k) => k.profile === 'dev')!.limit_usd, 7.5);
    t.strictSame(s.envVars(), vars, 'the secret is unchanged');
    const only = await s.cli(['upstream', 'sync', '--only', 'dev']);
    t.strictSame([only.code, only.stdout], [0, 'dev: limit $7.50 unchanged\n']);

    // list: the table and --json.
    const list = await s.cli(['upstream', 'list']);
    t.equal(list.code, 0, list.stderr);
    const [head, ...body] = list.stdout.trim().split('\n');
    t.strictSame(head.split(/\s{2,}/), ['PROFILE', 'NAME', 'LABEL', 'LIMIT', 'RESET', 'TODAY', 'WEEK', 'MONTH', 'REMAINING', 'DISABLED']);
    t.strictSame(body.map((l) => l.split(/\s{2,}/).filter((_c, i) => i !== 2)), [
      ['dev', 'sluice:dev', '$7.50', 'daily', '$0.00', '$0.00', '$0.00', '$7.50', 'no'],
      ['assistant', 'sluice:assistant', '$3.00', 'daily', '$0.00', '$0.00', '$0.00', '$3.00', 'no'],
      ['tiny', 'sluice:tiny', '$0.0010', 'daily', '$0.00', '$0.00', '$0.00', '$0.0010', 'no'],
      ['nokey', 'sluice:nokey', '$1.00', 'daily', '$0.00', '$0.00', '$0.00', '$1.00', 'no'],
    ]);
    const json = await s.cli(['upstream', 'list', '--json']);
    const rows = JSON.parse(json.stdout);
    t.equal(rows.length, 4);
    t.match(rows[0], { profile: 'dev', name: 'sluice:dev', limit: 7.5, limit_reset: 'daily', usage_daily: 0, usage_weekly: 0, usage_monthly: 0, limit_remaining: 7.5, disabled: false });
    t.match(rows[0].hash, /^[0-9a-f]{64}$/);

    // usage snapshot with the provisioned keys; the ledger holds spend the router never saw (drift).
    const ts = new Date().toISOString();
    const row = (over: Partial<RequestRow>): RequestRow => ({
      id: `r-${Math.random()}`, ts, endpoint: 'chat', profile: 'dev', key_prefix: 'sk-sl-x', end_user: null, session: null, run: null, tier: null,
      requested_model: null, model: null, stream: false, status: 200, outcome: 'ok', input_tokens: 1, output_tokens: 1, cache_read_tokens: 0,
      cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0.25, cost_source: 'upstream', provider: null, degradation: 'none', generation_id: null,
      ttfb_ms: null, duration_ms: 1, overhead_ms: null, tools: [], ...over,
    });
    await store.insertRequests([row({}), row({ profile: 'assistant', cost_usd: 0.01 })]);
    const keys = { SLUICE_UPSTREAM_KEY_DEV: vars.SLUICE_UPSTREAM_KEY_DEV, SLUICE_UPSTREAM_KEY_ASSISTANT: vars.SLUICE_UPSTREAM_KEY_ASSISTANT, SLUICE_UPSTREAM_KEY_TINY: vars.SLUICE_UPSTREAM_KEY_TINY };
    const snap = await s.cli(['usage', 'snapshot'], { ...keys, SLUICE_PROVISIONING_KEY: undefined });
    t.equal(snap.code, 0, snap.stderr);
    t.strictSame(snap.stdout.trim().split('\n'), [
      'dev: today $0.00 at the router, $0.25 in the ledger, drift +$0.25 (DRIFT); limit $7.50, remaining $7.50',
      'assistant: today $0.00 at the router, $0.01 in the ledger, drift +$0.01 (ok); limit $3.00, remaining $3.00',
      'tiny: today $0.00 at the router, $0.00 in the ledger, drift +$0.00 (ok); limit $0.0010, remaining $0.0010',
      'nokey: skipped, SLUICE_UPSTREAM_KEY_NOKEY is not set',
    ]);
    const readouts = s.sim.received.filter((r) => r.path === '/api/v1/key');
    t.strictSame(readouts.map((r) => r.headers.authorization), [keys.SLUICE_UPSTREAM_KEY_DEV, keys.SLUICE_UPSTREAM_KEY_ASSISTANT, keys.SLUICE_UPSTREAM_KEY_TINY].map((k) => `Bearer ${k}`), 'each profile read with its own key');
    const snaps = await store.latestUsageSnapshots();
    t.strictSame(snaps.map((x) => [x.profile, x.ledger_day_usd, x.usage_daily, x.drift_usd, x.drifted, x.limit_usd]), [
      ['assistant', 0.01, 0, 0.01, false, 3], ['dev', 0.25, 0, 0.25, true, 7.5], ['tiny', 0, 0, 0, false, 0.001],
    ]);
    t.equal(snaps[0].day, ts.slice(0, 10));
  });
}

t.test('provision skips a profile the local table already records, even when the router does not list it', async (t) => {
  const s = await setup(t, 'sqlite');
  const store = await s.store();
  const at = new Date().toISOString();
  await store.putUpstreamKey({ profile: 'dev', hash: 'f'.repeat(64), name: 'sluice:dev', label: null, limit_usd: 5, limit_reset: 'daily', created_at: at, updated_at: at });
  const r = await s.cli(['upstream', 'provision', '--only', 'dev', '--env-out', s.envFile]);
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout, `dev: skipped, upstream_keys already records its key sluice:dev (hash ffffffffffff…), which the router does not list; note: ${s.envFile} does not set SLUICE_UPSTREAM_KEY_DEV: if its secret is lost, delete that key at the router and run provision again\n`);
  t.equal(s.sim.received.filter((x) => x.method === 'POST').length, 0, 'nothing created');

  // sync reports it missing at the router, and does not recreate it; a profile with no key at all too.
  const synced = await s.cli(['upstream', 'sync']);
  t.equal(synced.code, 1);
  t.match(synced.stdout, /^dev: MISSING, the key sluice:dev \(hash ffffffffffff…, from upstream_keys\) is not at the router; sync does not recreate keys$/m);
  t.match(synced.stdout, /^assistant: MISSING, no upstream key \(run: sluice upstream provision --only assistant --env-out FILE\)$/m);
  t.equal(synced.stderr, 'sluice: no key at the router for: dev, assistant, tiny, nokey (sync does not create keys; see above)\n');
  t.equal(s.sim.received.filter((x) => x.method === 'POST' || x.method === 'PATCH').length, 0, 'nothing created or changed');

  const list = await s.cli(['upstream', 'list']);
  t.equal(list.code, 0);
  t.match(list.stdout, /^dev +\(no key\) +- +- /m);
});

t.test('bad usage and a missing provisioning key stop before any call', async (t) => {
  const s = await setup(t, 'sqlite');
  const noEnvOut = await s.cli(['upstream', 'provision']);
  t.equal(noEnvOut.code, 2);
  t.match(noEnvOut.stderr, /provision needs --env-out FILE: the router shows a new key's secret only once/);
  const unknown = await s.cli(['upstream', 'provision', '--only', 'nope', '--env-out', s.envFile]);
  t.equal(unknown.code, 2);
  t.equal(unknown.stderr, 'sluice: --only: unknown profile "nope" (configured: dev, assistant, tiny, nokey)\n');
  t.equal((await s.cli(['upstream', 'sync', '--only', 'nope'])).code, 2);
  for (const args of [['upstream', 'provision', '--env-out', s.envFile], ['upstream', 'sync'], ['upstream', 'list']]) {
    const r = await s.cli(args, { SLUICE_PROVISIONING_KEY: undefined });
    t.equal(r.code, 1, `${args[1]} without SLUICE_PROVISIONING_KEY`);
    t.match(r.stderr, new RegExp(`^sluice: SLUICE_PROVISIONING_KEY is not set: ${args[1]} needs the router's management \\(provisioning\\) key; nothing was called`));
  }
  const badTimeout = await s.cli(['upstream', 'list'], { SLUICE_MANAGEMENT_TIMEOUT_S: 'soon' });
  t.equal(badTimeout.code, 78);
  t.match(badTimeout.stderr, /SLUICE_MANAGEMENT_TIMEOUT_S must be a positive number of seconds, got "soon"/);
  t.equal((await s.cli(['upstream'])).code, 2, 'a group without a command');
  t.equal(s.sim.received.length, 0, 'the router received nothing');
  t.throws(() => statSync(s.envFile), { code: 'ENOENT' }, 'no env file was written');
  const snapFail = await s.cli(['usage', 'snapshot'], { SLUICE_UPSTREAM_KEY_DEV: 'sk-or-v1-deleted-or-wrong', SLUICE_DRIFT_PCT: '-1' });
  t.equal(snapFail.code, 78, 'a bad drift threshold is bad configuration');
});

/** A router URL on a port nobody listens on. */
async function closedPort(): Promise<string> {
  const server = createServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as import('node:net').AddressInfo;
  await new Promise((r) => server.close(r));
  return `http://127.0.0.1:${port}`;
}

/** A TCP server that accepts and never answers: a hanging router. */
async function hangingRouter(t: Test): Promise<string> {
  const sockets = new Set<import('node:net').Socket>();
  const server = createServer((s) => { sockets.add(s); s.on('error', () => {}); });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => { for (const s of sockets) s.destroy(); server.close(); });
  return `http://127.0.0.1:${(server.address() as import('node:net').AddressInfo).port}`;
}

/** Arms `fault` on the 'keys' scope right after the first key was created. */
function armAfterFirstCreate(sim: any, fault: unknown): void {
  const onClosed = (r: { method: string; path: string }) => {
    if (r.method === 'POST' && r.path === '/api/v1/keys') {
      sim.setFault('keys', fault);
      sim.events.off('closed', onClosed);
    }
  };
  sim.events.on('closed', onClosed);
}

const MIDWAY: Array<[string, unknown, string]> = [
  ['500', { status: 500 }, 'the router answered 500 \\(.+\\)'],
  ['hang', { hang: true }, 'the router at http://127\\.0\\.0\\.1:\\d+ did not answer within 2 s'],
];
for (const [kind, [what, fault, cause]] of [['sqlite', MIDWAY[0]], ['postgres', MIDWAY[0]], ['sqlite', MIDWAY[1]]] as const) {
  t.test(`${kind}: the router fails midway (${what}): exit 1, and the env file and upstream_keys hold exactly the keys created`, async (t) => {
    const s = await setup(t, kind);
    const sim = s.sim as any;
    armAfterFirstCreate(sim, fault);
    const midway = await s.cli(['upstream', 'provision', '--env-out', s.envFile]);
    t.equal(midway.code, 1);
    t.equal(midway.stdout, `dev: created sluice:dev, limit $5.00 per day (reset daily); SLUICE_UPSTREAM_KEY_DEV written to ${s.envFile}\n`);
    t.match(midway.stderr, new RegExp(`^sluice: profile assistant: creating key sluice:assistant \\(POST /api/v1/keys\\): ${cause}\\. The env file holds only the keys created before this failure; run provision again to continue\\.\n$`));
    t.strictSame(Object.keys(s.envVars()), ['SLUICE_UPSTREAM_KEY_DEV']);
    const store = await s.store();
    t.strictSame((await store.upstreamKeys()).map((k) => k.profile), ['dev'], 'the store records the one key created');
    sim.setFault('keys', null);
    // Run again: the rest is created, dev is skipped, dev's line is kept as it was.
    const dev = s.envVars().SLUICE_UPSTREAM_KEY_DEV;
    const rest = await s.cli(['upstream', 'provision', '--env-out', s.envFile]);
    t.equal(rest.code, 0, rest.stderr);
    t.equal(rest.stderr, `created 3 key(s), skipped 1; restart sluice so it loads ${s.envFile}\n`);
    t.strictSame(Object.keys(s.envVars()), ['SLUICE_UPSTREAM_KEY_DEV', 'SLUICE_UPSTREAM_KEY_ASSISTANT', 'SLUICE_UPSTREAM_KEY_TINY', 'SLUICE_UPSTREAM_KEY_NOKEY']);
    t.equal(s.envVars().SLUICE_UPSTREAM_KEY_DEV, dev);
    t.equal((await store.upstreamKeys()).length, 4);
  });
}

t.test('faults: a message naming the profile and the cause, exit 1, and the env file holds only created keys', async (t) => {
  const s = await setup(t, 'sqlite');
  const sim = s.sim as any;
  writeFileSync(s.envFile, 'SLUICE_UPSTREAM_KEY_DEV=made-earlier\n');

  const cases: Array<[string, unknown, RegExp]> = [
    ['401', { status: 401 }, /profile assistant: listing the router's keys \(GET \/api\/v1\/keys\): the router answered 401 \(/],
    ['403', { status: 403 }, /profile assistant: listing the router's keys \(GET \/api\/v1\/keys\): the router answered 403 \(/],
    ['502', { status: 502 }, /the router answered 502 \(/],
    ['503', { status: 503 }, /the router answered 503 \(/],
    ['hang', { hang: true }, /profile assistant: listing the router's keys \(GET \/api\/v1\/keys\): the router at http:\/\/127\.0\.0\.1:\d+ did not answer within 2 s/],
  ];
  for (const [what, fault, message] of cases) {
    sim.setFault('keys', fault);
    const r = await s.cli(['upstream', 'provision', '--env-out', s.envFile, '--only', 'assistant']);
    t.equal(r.code, 1, `${what}: exit 1`);
    t.match(r.stderr, message, `${what}: ${r.stderr.trim()}`);
    t.strictSame(Object.keys(s.envVars()), ['SLUICE_UPSTREAM_KEY_DEV'], `${what}: nothing written`);
    const sync = await s.cli(['upstream', 'sync', '--only', 'dev']);
    t.equal(sync.code, 1, `${what}: sync exits 1`);
    t.match(sync.stderr, /^sluice: profile dev: /);
    const list = await s.cli(['upstream', 'list']);
    t.equal(list.code, 1, `${what}: list exits 1`);
    t.equal(list.stdout, '');
  }
  sim.setFault('keys', null);
  sim.setFault('key', { status: 500 });
  const snap = await s.cli(['usage', 'snapshot'], { SLUICE_UPSTREAM_KEY_DEV: s.envVars().SLUICE_UPSTREAM_KEY_DEV });
  t.equal(snap.code, 1);
  t.match(snap.stdout, /^dev: FAILED, reading the usage of its upstream key \(GET \/api\/v1\/key\): the router answered 500/m);
  t.equal(snap.stderr, 'sluice: no snapshot for: dev (see above)\n');
  sim.setFault('key', null);
});

t.test('an unreachable or hanging router: exit 1 naming the profile and the cause, nothing written', async (t) => {
  const s = await setup(t, 'sqlite');
  writeFileSync(s.envFile, 'KEEP=1\n');
  // Unreachable and hanging routers (no simulated router at all).
  for (const [what, url, message] of [
    ['unreachable', await closedPort(), /profile dev: listing the router's keys \(GET \/api\/v1\/keys\): the router at http:\/\/127\.0\.0\.1:\d+ is unreachable \(ECONNREFUSED\)/],
    ['hanging', await hangingRouter(t), /profile dev: listing the router's keys \(GET \/api\/v1\/keys\): the router at http:\/\/127\.0\.0\.1:\d+ did not answer within 2 s/],
  ] as const) {
    writeFileSync(join(s.configDir, 'profiles.yaml'), profilesYaml(url));
    const r = await s.cli(['upstream', 'provision', '--env-out', s.envFile]);
    t.equal(r.code, 1, what);
    t.match(r.stderr, message, `${what}: ${r.stderr.trim()}`);
    t.strictSame(Object.keys(s.envVars()), ['KEEP'], `${what}: nothing written`);
  }
});
