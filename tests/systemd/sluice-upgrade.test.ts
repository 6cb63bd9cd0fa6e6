// systemd/sluice-upgrade, run for real (as /bin/sh runs it) against stand-ins: a `systemctl` first
// on PATH and the installation's `node` (SLUICE_HOME/node_modules/.bin/node), both of which append
// their argv (and the node stand-in its working directory and environment) to one log. Checked:
// the order check → start the new colour → stop the old without waiting → enable the new, disable
// the old; the colour chosen from the one running, both ways; that a failed check or a failed
// start stops nothing and starts nothing further, exiting non-zero; that a colour still draining
// is not started again.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';

const ROOT = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const SCRIPT = join(ROOT, 'systemd/sluice-upgrade');

// Each stand-in writes one line per call: its name and arguments, tab-separated.
const LOG_ARGV = (name: string) => `{ printf ${name}; printf '\\t%s' "$@"; printf '\\n'; } >> "$STUB_LOG"`;
const SYSTEMCTL = [
  '#!/bin/sh',
  LOG_ARGV('systemctl'),
  'case $1 in',
  'is-active)',
  '\tif [ "$2" = --quiet ]; then unit=$3; quiet=yes; else unit=$2; quiet=no; fi',
  '\tstate=inactive',
  '\tfor c in $STUB_ACTIVE; do [ "$unit" = "sluice@$c" ] && state=active; done',
  '\tfor c in $STUB_DRAINING; do [ "$unit" = "sluice@$c" ] && state=deactivating; done',
  '\t[ $quiet = no ] && echo $state',
  '\t[ $state = active ]',
  '\texit',
  '\t;;',
  'start) exit "$STUB_START_EXIT" ;;',
  'esac',
].join('\n');
// The node stand-in also writes a `node-env` line: its working directory, then what it sees of these.
const SEEN = ['NODE_ENV', 'SLUICE_CONFIG_DIR', 'SLUICE_DATA_DIR', 'SLUICE_LOG_LEVEL', 'SLUICE_HOME', 'SLUICE_ETC'];
const NODE = [
  '#!/bin/sh',
  LOG_ARGV('node'),
  `{ printf 'node-env\\t%s' "$PWD"; ${SEEN.map((v) => `printf '\\t${v}=%s' "\${${v}-(unset)}";`).join(' ')} printf '\\n'; } >> "$STUB_LOG"`,
  'exit "$STUB_CHECK_EXIT"',
].join('\n');

interface Run { code: number | null; stdout: string; stderr: string; calls: string[][] }

/**
 * Runs the script in a fresh installation of stand-ins. `active`/`draining`: the colours systemctl
 * reports as active or deactivating; `checkExit`/`startExit`: what `sluice check` and `systemctl
 * start` exit with.
 */
async function upgrade(t: Test, o: { active?: string[]; draining?: string[]; checkExit?: number; startExit?: number; args?: string[] } = {}): Promise<Run & { home: string; etc: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-upgrade-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const home = join(dir, 'opt');
  const etc = join(dir, 'etc');
  const bin = join(dir, 'bin');
  for (const d of [join(home, 'node_modules/.bin'), etc, bin]) mkdirSync(d, { recursive: true });
  writeFileSync(join(bin, 'systemctl'), SYSTEMCTL);
  writeFileSync(join(home, 'node_modules/.bin/node'), NODE);
  for (const f of [join(bin, 'systemctl'), join(home, 'node_modules/.bin/node')]) chmodSync(f, 0o755);
  // The env file's lines reach the check, after (and over) the unit's Environment= values.
  writeFileSync(join(etc, 'sluice.env'), 'SLUICE_LOG_LEVEL=warn\nSLUICE_DATA_DIR=/srv/sluice\n');
  const log = join(dir, 'calls.log');
  writeFileSync(log, '');
  const env = {
    PATH: `${bin}:${process.env.PATH ?? '/usr/bin:/bin'}`, SLUICE_HOME: home, SLUICE_ETC: etc, STUB_LOG: log,
    STUB_ACTIVE: (o.active ?? []).join(' '), STUB_DRAINING: (o.draining ?? []).join(' '),
    STUB_CHECK_EXIT: String(o.checkExit ?? 0), STUB_START_EXIT: String(o.startExit ?? 0),
  };
  const child = spawn(SCRIPT, o.args ?? [], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c) => (stdout += c));
  child.stderr.on('data', (c) => (stderr += c));
  const [code] = (await once(child, 'close')) as [number | null];
  const calls = readFileSync(log, 'utf8').split('\n').filter(Boolean).map((l) => l.split('\t'));
  return { code, stdout, stderr, calls, home, etc };
}

/** The calls that change something or run the check (status queries left out), in order. */
const actions = (r: Run) => r.calls.filter((c) => c[0] !== 'node-env' && c[1] !== 'is-active');

t.test('blue serving: check, start green, stop blue without waiting, enable green and disable blue', async (t) => {
  const r = await upgrade(t, { active: ['blue'] });
  t.equal(r.code, 0, r.stderr);
  t.strictSame(actions(r), [
    ['node', join(r.home, 'cli/sluice.ts'), 'check', '--config', r.etc],
    ['systemctl', 'start', 'sluice@green'],
    ['systemctl', 'stop', '--no-block', 'sluice@blue'],
    ['systemctl', 'enable', '--quiet', 'sluice@green'],
    ['systemctl', 'disable', '--quiet', 'sluice@blue'],
  ]);
  t.strictSame(r.calls.find((c) => c[0] === 'node-env'), [
    'node-env', r.home, 'NODE_ENV=production', `SLUICE_CONFIG_DIR=${r.etc}`, 'SLUICE_DATA_DIR=/srv/sluice',
    'SLUICE_LOG_LEVEL=warn', 'SLUICE_HOME=(unset)', 'SLUICE_ETC=(unset)',
  ], 'the check runs in the unit\'s working directory and environment, the env file over the unit\'s lines');
  t.match(r.stdout, /sluice@green serves; sluice@blue drains/);
});

t.test('green serving: the same, the other way round', async (t) => {
  const r = await upgrade(t, { active: ['green'] });
  t.equal(r.code, 0, r.stderr);
  t.strictSame(actions(r).slice(1), [
    ['systemctl', 'start', 'sluice@blue'],
    ['systemctl', 'stop', '--no-block', 'sluice@green'],
    ['systemctl', 'enable', '--quiet', 'sluice@blue'],
    ['systemctl', 'disable', '--quiet', 'sluice@green'],
  ]);
});

t.test('nothing serving: blue starts and becomes the enabled colour; nothing to stop', async (t) => {
  const r = await upgrade(t);
  t.equal(r.code, 0, r.stderr);
  t.strictSame(actions(r).slice(1), [
    ['systemctl', 'start', 'sluice@blue'],
    ['systemctl', 'enable', '--quiet', 'sluice@blue'],
    ['systemctl', 'disable', '--quiet', 'sluice@green'],
  ]);
});

t.test('a failing check starts nothing and stops nothing', async (t) => {
  const r = await upgrade(t, { active: ['blue'], checkExit: 78 });
  t.equal(r.code, 78, 'the check\'s exit code');
  t.strictSame(r.calls.filter((c) => c[0] === 'systemctl'), [], 'systemctl never ran');
  t.match(r.stderr, /the check failed \(exit 78/);
});

t.test('a colour that fails to start leaves the serving one alone', async (t) => {
  const r = await upgrade(t, { active: ['blue'], startExit: 1 });
  t.not(r.code, 0);
  t.strictSame(actions(r).slice(1), [['systemctl', 'start', 'sluice@green']], 'no stop, enable or disable');
  t.match(r.stderr, /sluice@blue serves on, nothing was stopped/);
});

t.test('a colour still draining since the last switch is not started again', async (t) => {
  const r = await upgrade(t, { active: ['blue'], draining: ['green'] });
  t.not(r.code, 0);
  t.strictSame(actions(r).slice(1), [], 'nothing started, enabled, disabled or stopped');
  t.match(r.stderr, /sluice@green is still draining/);
});

t.test('arguments other than --help are refused before anything runs', async (t) => {
  const r = await upgrade(t, { active: ['blue'], args: ['--rollback'] });
  t.equal(r.code, 2);
  t.strictSame(r.calls, []);
});
