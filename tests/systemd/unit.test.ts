// The systemd unit as shipped: `systemd-analyze security --offline=yes` rates its exposure at
// most 2.0 ("OK") with MemoryDenyWriteExecute left off (V8's JIT needs writable+executable
// pages), `systemd-analyze verify` accepts it (on a copy whose /opt/sluice paths point at this
// checkout, so the files it names exist), its ExecStart command line with its Environment= lines
// starts a working gateway, and V8 really optimises code (the JIT runs) on this runtime.
// systemd-run cannot apply the sandbox here (no systemd as PID 1 in CI containers).

import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { TIERS_YAML } from '../helpers/gateway.ts';
import { until } from '../helpers/processes.ts';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const UNIT = join(ROOT, 'systemd/sluice.service');
const text = readFileSync(UNIT, 'utf8');

/** The unit with /opt/sluice rewritten to this checkout, in a temporary directory. */
function localCopy(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'sluice.service');
  writeFileSync(file, text.replaceAll('/opt/sluice', ROOT));
  return file;
}

/** `Key=value` lines of the [Service] section (repeated keys kept in order). */
function serviceLines(): Array<[string, string]> {
  const body = text.split('[Service]')[1]!.split(/^\[/m)[0]!;
  return body.split('\n').filter((l) => /^[A-Za-z]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
}

t.test('systemd-analyze security rates the unit OK (exposure ≤ 2.0)', async (t) => {
  const { stdout } = await run('systemd-analyze', ['security', '--offline=yes', '--no-pager', UNIT]);
  const m = /Overall exposure level for sluice\.service: (\d+(?:\.\d+)?) (\w+)/.exec(stdout);
  t.ok(m, 'an overall exposure line');
  const exposure = Number(m![1]);
  t.comment(`exposure ${exposure} ${m![2]}`);
  t.ok(exposure <= 2.0, `exposure ${exposure} ≤ 2.0`);
  t.equal(m![2], 'OK');
  t.match(stdout, /✗ MemoryDenyWriteExecute=/, 'W^X stays off for V8\'s JIT');
});

t.test('systemd-analyze verify accepts the unit', async (t) => {
  const file = localCopy(t);
  const { stdout, stderr } = await run('systemd-analyze', ['verify', file]);
  t.equal(`${stdout}${stderr}`.trim(), '', 'no complaint');
  // verify does fail on a broken unit: the check has teeth.
  const broken = file.replace(/sluice\.service$/, 'broken.service');
  writeFileSync(broken, readFileSync(file, 'utf8').replace(/^ExecStart=.*$/m, 'ExecStart=/nonexistent/node serve'));
  await t.rejects(run('systemd-analyze', ['verify', broken]), 'a missing executable is refused');
});

t.test('the unit\'s command line and environment start a working gateway; the JIT runs', async (t) => {
  const lines = serviceLines();
  const exec = lines.find(([k]) => k === 'ExecStart')![1].replaceAll('/opt/sluice', ROOT).split(' ');
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  for (const [k, v] of lines) if (k === 'Environment') env[v.slice(0, v.indexOf('='))] = v.slice(v.indexOf('=') + 1);
  t.equal(env.NODE_ENV, 'production');
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-run-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), 'routers:\n  r:\n    url: http://127.0.0.1:9\nprofiles:\n  dev:\n    default_tier: fast\n    router: r\n    budget: { daily_usd: 1, monthly_usd: 10 }\n');
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
  Object.assign(env, { SLUICE_CONFIG_DIR: dir, SLUICE_DATA_DIR: join(dir, 'data'), SLUICE_LISTEN: '127.0.0.1:0' });
  const child = spawn(exec[0]!, exec.slice(1), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (c) => (out += c));
  t.teardown(() => void child.kill('SIGKILL'));
  const listen = await until('sluice listening', async () => /"listen":"([^"]+)"/.exec(out)?.[1]);
  const res = await fetch(`http://${listen}/health`);
  t.equal(await res.text(), 'ok');
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'SIGTERM (systemctl stop) exits 0');

  // V8 optimises a hot function only with its JIT: status bit 16 (TurboFanned) set.
  const { stdout } = await run(exec[0]!, ['--allow-natives-syntax', '-e',
    'function f(x){return x*2+1} %PrepareFunctionForOptimization(f); f(1); f(2); %OptimizeFunctionOnNextCall(f); f(3); console.log(%GetOptimizationStatus(f))']);
  t.ok((Number(stdout.trim()) & 16) !== 0, `the JIT compiled it (optimisation status ${stdout.trim()})`);
});
