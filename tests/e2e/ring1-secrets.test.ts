// Ring 1's secret scan: the provisioning key and every upstream key appear nowhere but in the env
// file and in the upstream requests themselves: not in any CLI output (success or failure), the
// gateway's logs, any table of either store (SQLite file bytes included), /api/health, or the
// board (/, /api/summary, /metrics).

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import postgres from 'postgres';
import t from 'tap';
import { startBackings, until } from '../helpers/processes.ts';

const CLI = new URL('../../cli/sluice.ts', import.meta.url).pathname;
const PROVISIONING = 'sk-or-v1-provisioning';

t.test('no provisioning or upstream key leaks from any ring-1 path', async (t) => {
  const b = await startBackings(t);
  const sim = b.sim as any;
  const sqliteDir = t.testdir();
  const envFile = join(sqliteDir, 'sluice.env');
  const outputs: string[] = [];
  const baseEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_')));
  async function cli(args: string[], extra: Record<string, string | undefined> = {}) {
    const child = spawn(process.execPath, [CLI, ...args, '--config', b.configDir], {
      env: { ...baseEnv, SLUICE_DATABASE_URL: b.databaseUrl, SLUICE_PROVISIONING_KEY: PROVISIONING, SLUICE_MANAGEMENT_TIMEOUT_S: '1', ...extra }, stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    const [code] = (await once(child, 'exit')) as [number];
    outputs.push(out);
    return { code, out };
  }

  t.equal((await cli(['upstream', 'provision', '--env-out', envFile])).code, 0);
  const vars = Object.fromEntries(readFileSync(envFile, 'utf8').trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const upstream = Object.values(vars);
  t.equal(upstream.length, 4);

  // A gateway with the provisioned keys: usage refresh and reconciliation running.
  sim.setGenerationDelay(300);
  const A = await b.start({ env: { ...vars, SLUICE_USAGE_REFRESH_S: '0.2', SLUICE_RECONCILE_POLL_S: '0.2', SLUICE_LOG_LEVEL: 'debug' } });
  const key = await b.key('dev');
  const ac = new AbortController();
  const res = await fetch(`${A.url}/v1/chat/completions`, {
    method: 'POST', signal: ac.signal,
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sim': 'chunks=40;chunk-delay-ms=25' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'count' }] }),
  });
  const reader = res.body!.getReader();
  let text = '';
  while (text.split('data:').length < 4) text += new TextDecoder().decode((await reader.read()).value);
  ac.abort();
  await reader.read().catch(() => {});
  await until('a reconciled row', async () => (await b.store.reconcileCounts()).reconciled === 1, 30_000);
  await until('snapshots of all four profiles', async () => (await b.store.latestUsageSnapshots()).length === 4);
  // Faults in the loops: logged, never with a key.
  sim.setFault('key', { status: 401 });
  await A.waitForLine((l) => l.msg === 'usage refresh: failed for this profile' || l.msg === 'usage refresh: failing; retrying with backoff (logged once until it works again)');
  sim.setFault('key', null);
  const healthBody = await (await fetch(`${A.url}/api/health`)).text();
  // The operator's surfaces show the snapshots and reconciliation counts: never a key.
  const operator: Record<string, string> = {};
  for (const path of ['/', '/api/summary', '/metrics']) {
    const r = await fetch(A.url + path);
    t.equal(r.status, 200, `${path} answers`);
    operator[`board ${path}`] = await r.text();
  }

  // Every command, on Postgres and on SQLite, with successes and failures.
  const sqlite = { SLUICE_DATABASE_URL: undefined, SLUICE_DATA_DIR: sqliteDir };
  for (const extra of [{}, sqlite]) {
    await cli(['upstream', 'provision', '--env-out', join(sqliteDir, 'other.env')], extra);
    await cli(['upstream', 'sync'], extra);
    await cli(['upstream', 'list'], extra);
    await cli(['upstream', 'list', '--json'], extra);
    await cli(['usage', 'snapshot'], { ...extra, ...vars });
    await cli(['usage', 'snapshot'], { ...extra, ...vars, SLUICE_UPSTREAM_KEY_DEV: `${vars.SLUICE_UPSTREAM_KEY_DEV}x` });
    t.equal((await cli(['upstream', 'list'], { ...extra, SLUICE_PROVISIONING_KEY: `${PROVISIONING}-wrong` })).code, 1);
    sim.setFault('keys', { status: 403 });
    t.equal((await cli(['upstream', 'sync'], extra)).code, 1);
    sim.setFault('keys', null);
  }
  t.ok(outputs.some((o) => o.includes('answered 401')), 'the failures were exercised');

  // Every table of the Postgres store, whole.
  const sql = postgres(b.databaseUrl, { max: 1 });
  t.teardown(() => sql.end());
  const tables = (await sql`SELECT tablename FROM pg_tables WHERE schemaname = 'public'`).map((r) => r.tablename as string);
  t.ok(tables.includes('upstream_keys') && tables.includes('usage_snapshots'));
  const dump: string[] = [];
  for (const table of tables) dump.push(JSON.stringify(await sql.unsafe(`SELECT * FROM ${table}`)));
  const files = readdirSync(sqliteDir).filter((f) => f.startsWith('sluice.db')).map((f) => join(sqliteDir, f));
  t.ok(files.length > 0 && statSync(files[0]).size > 0, 'the SQLite store is there to scan');

  const secrets = [PROVISIONING, ...upstream];
  const pieces = upstream.flatMap((k) => Array.from({ length: 64 - 11 }, (_, i) => k.slice(9 + i, 9 + i + 12)));
  const places: Record<string, string | Buffer> = {
    'CLI output': outputs.join('\n'),
    'gateway log': JSON.stringify(A.lines) + A.stderr(),
    'Postgres tables': dump.join('\n'),
    '/api/health': healthBody,
    ...operator,
    ...Object.fromEntries(files.map((f) => [`file ${f}`, readFileSync(f)])),
  };
  for (const [where, content] of Object.entries(places)) {
    const has = (s: string) => (typeof content === 'string' ? content.includes(s) : content.includes(Buffer.from(s)));
    for (const s of secrets) t.notOk(has(s), `${where} does not hold ${s.slice(0, 12)}…`);
    t.equal(pieces.find(has), undefined, `${where} holds no 12 characters of an upstream secret`);
  }
  // Where they must be: the env file, and the upstream requests (each key only where it belongs).
  for (const r of b.sim.received) {
    const auth = r.headers.authorization ?? '';
    if (r.path.startsWith('/api/v1/keys')) t.ok(auth.startsWith(`Bearer ${PROVISIONING}`), 'management calls carry the provisioning key (or the wrong one given)');
    else t.not(auth, `Bearer ${PROVISIONING}`, `${r.method} ${r.path} never carries the provisioning key`);
    t.notOk(r.body.includes(PROVISIONING) || upstream.some((k) => r.body.includes(k)), 'no key in a request body');
  }
});
