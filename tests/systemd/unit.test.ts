// The systemd units as shipped: the gateway as a template in two colours (sluice@.service), the
// socket both colours share (sluice.socket) and the do-nothing service that socket names
// (sluice-socket.service). `systemd-analyze security --offline=yes` rates a colour at most 1.1 and
// finds exposed only what sluice needs, each for a reason named below; `systemd-analyze verify`
// accepts the three units together (on copies whose /opt/sluice paths point at this checkout, so
// the files they name exist); the units are wired as docs/operation.md describes; a colour's
// ExecStart command line with its Environment= lines, under its RestrictAddressFamilies=, starts a
// working gateway on a socket handed over as sluice.socket hands it (fd 3, LISTEN_FDS, LISTEN_PID),
// keeping the socket's queue length, and writes its ready file into RUNTIME_DIRECTORY; the unit's
// ExecStartPost= command, run beside it as systemd would run it, ends (exit 0) only once sluice is
// ready, and fails by itself when the main process is gone; and V8 really optimises code (the JIT
// runs) on this runtime.
// systemd cannot start the units here (no systemd as PID 1 in CI containers).

import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import { SETTINGS } from '../../lib/settings.ts';
import { READY_FILE } from '../../lib/lifecycle/systemd.ts';
import { TIERS_YAML } from '../helpers/gateway.ts';
import { startSocketHolder } from '../helpers/socket-holder.ts';

const run = promisify(execFile);
const ROOT = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
const UNITS = ['sluice@.service', 'sluice.socket', 'sluice-socket.service'] as const;
const text = (unit: (typeof UNITS)[number]) => readFileSync(join(ROOT, 'systemd', unit), 'utf8');

/**
 * The three units with /opt/sluice rewritten to this checkout, in a temporary directory, plus the
 * colour sluice@blue.service as a file of its own (what systemd makes of the template for `blue`).
 */
function localCopies(t: Test): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const unit of UNITS) writeFileSync(join(dir, unit), text(unit).replaceAll('/opt/sluice', ROOT));
  writeFileSync(join(dir, 'sluice@blue.service'), text('sluice@.service').replaceAll('/opt/sluice', ROOT));
  return dir;
}

/** `Key=value` lines of one section (repeated keys kept in order). */
function lines(unitText: string, section: string): Array<[string, string]> {
  const body = unitText.split(`[${section}]`)[1]!.split(/^\[/m)[0]!;
  return body.split('\n').filter((l) => /^[A-Za-z]+=/.test(l)).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]);
}
/** Every value of `key` in the section, space-separated lists split. */
function values(unitText: string, section: string, key: string): string[] {
  return lines(unitText, section).filter(([k]) => k === key).flatMap(([, v]) => v.split(/\s+/).filter(Boolean));
}

/**
 * A command line of a unit file as systemd makes it into argv (systemd.service(5), "Command
 * lines"): the specifiers `%i` (the instance) and `%%`; words split at whitespace, with '…' and
 * "…" quoting; then in each word, `${NAME}` replaced by the variable's value and `$$` by a literal
 * `$`, a word that is `$NAME` alone replaced by the value split at whitespace, and any other `$`
 * left as it is. What it does not handle (backslash escapes, other specifiers, prefixes such as
 * `-`, several commands) throws, rather than be read otherwise than systemd reads it.
 */
function systemdArgv(line: string, env: Record<string, string>, instance: string): string[] {
  if (/\\/.test(line) || /^[-@+!:]/.test(line)) throw new Error(`not handled here: ${line}`);
  const specified = line.replace(/%(.)/g, (_, c: string) => {
    if (c === '%') return '%';
    if (c === 'i') return instance;
    throw new Error(`specifier %${c} not handled here: ${line}`);
  });
  const words: string[] = [];
  let word: string | null = null;
  for (let i = 0; i < specified.length; i++) {
    const c = specified[i]!;
    if (/\s/.test(c)) {
      if (word !== null) words.push(word);
      word = null;
    } else if (c === "'" || c === '"') {
      const end = specified.indexOf(c, i + 1);
      if (end < 0) throw new Error(`unbalanced ${c} in ${line}`);
      word = (word ?? '') + specified.slice(i + 1, end);
      i = end;
    } else {
      word = (word ?? '') + c;
    }
  }
  if (word !== null) words.push(word);
  if (words.includes(';')) throw new Error(`several commands not handled here: ${line}`);
  return words.flatMap((w) => {
    const whole = /^\$([A-Za-z_]\w*)$/.exec(w);
    if (whole) return (env[whole[1]!] ?? '').split(/\s+/).filter(Boolean);
    return [w.replace(/\$\{(\w+)\}|\$\$/g, (_, name: string | undefined) => (name === undefined ? '$' : (env[name] ?? '')))];
  });
}

/**
 * Runs a command under a seccomp filter like the one RestrictAddressFamilies= installs: socket()
 * with an address family outside the list fails with EAFNOSUPPORT. argv: this program's, then the
 * families (names, space-separated), then the command (an absolute path) and its arguments, which
 * it execs in the same process. Native system calls only, on x86_64 and aarch64.
 */
const RESTRICT_FAMILIES = `
import ctypes, errno, os, socket, struct, sys
nr_socket = {'x86_64': 41, 'aarch64': 198}[os.uname().machine]
allowed = [int(socket.AddressFamily[name]) for name in sys.argv[1].split()]
LD_W_ABS, JEQ_K, RET_K = 0x20, 0x15, 0x06
ALLOW, FAIL = 0x7fff0000, 0x00050000 | errno.EAFNOSUPPORT
arg0 = 16 if sys.byteorder == 'little' else 20  # the low 32 bits of seccomp_data.args[0]
prog = [(LD_W_ABS, 0, 0, 0), (JEQ_K, 1, 0, nr_socket), (RET_K, 0, 0, ALLOW), (LD_W_ABS, 0, 0, arg0)]
for family in allowed:
    prog += [(JEQ_K, 0, 1, family), (RET_K, 0, 0, ALLOW)]
prog.append((RET_K, 0, 0, FAIL))
code = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *f) for f in prog))
class Fprog(ctypes.Structure):
    _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_void_p)]
libc = ctypes.CDLL(None, use_errno=True)
PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(Fprog(len(prog), ctypes.addressof(code))), 0, 0):
    sys.exit('seccomp: ' + os.strerror(ctypes.get_errno()))
os.execv(sys.argv[2], sys.argv[2:])
`;

interface Ended { code: number | null; signal: NodeJS.Signals | null; at: number; stderr: string }
/** Runs argv with exactly `env`; resolves when it has exited, with Date.now() at that moment. */
function runToEnd(t: Test, argv: string[], env: Record<string, string>): { pid: number; ended: Promise<Ended> } {
  const child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['ignore', 'ignore', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const ended = once(child, 'close').then(([code, signal]) => ({ code: code as number | null, signal: signal as NodeJS.Signals | null, at: Date.now(), stderr }));
  return { pid: child.pid!, ended };
}

/** `systemd-analyze security --offline=yes` of one unit file: its exposure, rating and the settings it marks ✗. */
async function security(file: string): Promise<{ exposure: number; rating: string; exposed: string[] }> {
  const { stdout } = await run('systemd-analyze', ['security', '--offline=yes', '--no-pager', file]);
  const m = /Overall exposure level for \S+: (\d+(?:\.\d+)?) (\w+)/.exec(stdout);
  if (!m) throw new Error(`no overall exposure line in:\n${stdout}`);
  return { exposure: Number(m[1]), rating: m[2]!, exposed: [...stdout.matchAll(/^✗ (\S+)/gm)].map((x) => x[1]!) };
}

// What a colour leaves exposed, and why sluice needs each. Anything else marked ✗ fails the test.
const EXPOSED: Record<string, string> = {
  'RootDirectory=/RootImage=': 'node and its libraries run from the host\'s file system (read-only)',
  'MemoryDenyWriteExecute=': 'V8\'s JIT writes machine code into memory it then executes',
  'RestrictAddressFamilies=~AF_(INET|INET6)': 'clients, Postgres, Redis and the router are reached over IP',
  'PrivateNetwork=': 'the same',
  'IPAddressDeny=': 'the router is on the internet, so no allow list of addresses fits',
  'DeviceAllow=': 'ProtectClock=true implies read access to the RTC (char-rtc r)',
};

t.test('systemd-analyze security: a colour exposes only what it needs (≤ 1.1); the socket\'s service nothing', async (t) => {
  const dir = localCopies(t);
  const colour = await security(join(dir, 'sluice@blue.service'));
  t.comment(`sluice@blue.service: exposure ${colour.exposure} ${colour.rating}`);
  t.strictSame(colour.exposed.toSorted(), Object.keys(EXPOSED).toSorted(), 'exactly the settings named in EXPOSED are ✗');
  t.ok(colour.exposure <= 1.1, `exposure ${colour.exposure} ≤ 1.1`);
  t.equal(colour.rating, 'OK');

  const holder = await security(join(dir, 'sluice-socket.service'));
  t.comment(`sluice-socket.service: exposure ${holder.exposure} ${holder.rating}`);
  t.ok(holder.exposure <= 0.2, `exposure ${holder.exposure} ≤ 0.2`);
  t.equal(holder.rating, 'SAFE');
});

t.test('systemd-analyze verify accepts the three units together', async (t) => {
  const dir = localCopies(t);
  const all = ['sluice.socket', 'sluice-socket.service', 'sluice@blue.service', 'sluice@.service'].map((u) => join(dir, u));
  const { stdout, stderr } = await run('systemd-analyze', ['verify', ...all]);
  t.equal(`${stdout}${stderr}`.trim(), '', 'no complaint');
  // verify does fail on broken units: the check has teeth.
  const broken = join(dir, 'sluice@broken.service');
  writeFileSync(broken, readFileSync(join(dir, 'sluice@blue.service'), 'utf8').replace(/^ExecStart=.*$/m, 'ExecStart=/nonexistent/node serve'));
  await t.rejects(run('systemd-analyze', ['verify', broken]), 'a missing executable is refused');
  const lone = mkdtempSync(join(tmpdir(), 'sluice-unit-lone-'));
  t.teardown(() => rmSync(lone, { recursive: true, force: true }));
  writeFileSync(join(lone, 'sluice.socket'), text('sluice.socket'));
  const refusal = await run('systemd-analyze', ['verify', join(lone, 'sluice.socket')]).then(() => 'accepted', (err: { stderr: string }) => err.stderr);
  t.match(refusal, /sluice-socket\.service not loaded/, 'a socket whose Service= is missing is refused');
});

t.test('the units are wired as documented', async (t) => {
  const socket = text('sluice.socket');
  t.strictSame(lines(socket, 'Socket'), [
    ['ListenStream', '127.0.0.1:8080'], ['Backlog', '4096'], ['NoDelay', 'true'], ['Service', 'sluice-socket.service'],
  ], 'one address, its queue, and a Service= that is not a colour (Accept= left at no)');
  t.strictSame(values(socket, 'Install', 'WantedBy'), ['sockets.target']);

  const holder = text('sluice-socket.service');
  t.strictSame(lines(holder, 'Service').slice(0, 3), [['Type', 'oneshot'], ['RemainAfterExit', 'yes'], ['ExecStart', '/bin/true']],
    'runs nothing and stays active, so the socket never starts anything again');
  t.strictSame(values(holder, 'Unit', 'BindsTo'), ['sluice.socket'], 'stops with the socket, which could not start again while it stayed active');

  const colour = text('sluice@.service');
  const one = (key: string) => values(colour, 'Service', key).join(' ');
  t.equal(one('Type'), 'exec', 'the start is over once the command has been executed; ExecStartPost= waits for ready');
  t.equal(one('NotifyAccess'), 'none', 'no process of the unit may change its state by sd_notify');
  t.equal(one('RuntimeDirectory'), 'sluice-%i', 'each colour its own runtime directory, for its ready file');
  t.equal(one('RuntimeDirectoryMode'), '0700');
  t.match(one('ExecStartPost'), `${READY_FILE}"`, `ExecStartPost= waits for the file sluice writes (${READY_FILE})`);
  t.equal(one('RestrictAddressFamilies'), 'AF_INET AF_INET6', 'IP sockets only');
  t.equal(one('Sockets'), 'sluice.socket', 'the shared socket arrives as fd 3');
  t.ok(values(colour, 'Unit', 'Requires').includes('sluice.socket') && values(colour, 'Unit', 'After').includes('sluice.socket'), 'Requires= and After= the socket');
  t.notOk(lines(colour, 'Service').some(([k, v]) => k === 'Environment' && v.startsWith('SLUICE_LISTEN=')), 'no SLUICE_LISTEN: the socket unit owns the address');
  const graceS = Number(SETTINGS.shutdownGraceMs.shown);
  t.ok(Number(one('TimeoutStopSec')) > graceS, `TimeoutStopSec ${one('TimeoutStopSec')} > the drain's default ${graceS} s: systemd never SIGKILLs a draining process`);
  t.equal(one('TimeoutStartSec'), '120');
  t.equal(one('StateDirectory'), 'sluice', 'one data directory for both colours');
  t.strictSame(values(colour, 'Install', 'WantedBy'), ['multi-user.target'], 'the enabled colour starts at boot');
});

/** The colour's [Service] lines, its ExecStart= argv (at this checkout) and its Environment= lines. */
function colourCommand(): { service: Array<[string, string]>; exec: string[]; env: Record<string, string> } {
  const service = lines(text('sluice@.service'), 'Service');
  const exec = service.find(([k]) => k === 'ExecStart')![1].replaceAll('/opt/sluice', ROOT).split(' ');
  const env: Record<string, string> = { PATH: process.env.PATH ?? '/usr/bin:/bin' };
  for (const [k, v] of service) if (k === 'Environment') env[v.slice(0, v.indexOf('='))] = v.slice(v.indexOf('=') + 1);
  return { service, exec, env };
}

/** An absolute path to python3 (a generation's command is exec'd without a PATH search). */
async function python(): Promise<string> {
  return (await run('python3', ['-c', 'import sys; print(sys.executable)'])).stdout.trim();
}

t.test('a colour\'s command line, under its RestrictAddressFamilies=, serves on the socket it is handed; its ExecStartPost= ends once sluice is ready; the JIT runs', async (t) => {
  const { service, exec, env } = colourCommand();
  t.equal(env.NODE_ENV, 'production');
  const dir = mkdtempSync(join(tmpdir(), 'sluice-unit-run-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), 'routers:\n  r:\n    url: http://127.0.0.1:9\nprofiles:\n  dev:\n    default_tier: fast\n    router: r\n    budget: { daily_usd: 1, monthly_usd: 10 }\n');
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);

  // RestrictAddressFamilies= as systemd applies it; the filter has teeth: a unix socket is refused.
  const py = await python();
  const families = values(text('sluice@.service'), 'Service', 'RestrictAddressFamilies').join(' ');
  t.notOk(families.startsWith('~'), 'an allow list (what RESTRICT_FAMILIES plays)');
  const restricted = (argv: string[]) => [py, '-c', RESTRICT_FAMILIES, families, ...argv];
  const probe = await run(py, ['-c', RESTRICT_FAMILIES, families, py, '-c',
    'import socket\nsocket.socket(socket.AF_INET).close()\ntry:\n    socket.socket(socket.AF_UNIX)\nexcept OSError as e:\n    print(e.errno)']);
  t.equal(Number(probe.stdout.trim()), 97, 'under the filter, an IP socket opens and a unix socket fails with EAFNOSUPPORT (97)');

  // The runtime directory systemd creates (RuntimeDirectory=): empty at each start.
  const runtimeDir = mkdtempSync(join(tmpdir(), 'sluice-unit-runtime-'));
  t.teardown(() => rmSync(runtimeDir, { recursive: true, force: true }));
  // The warm-up has tests of its own; here it would only add seconds.
  Object.assign(env, { SLUICE_CONFIG_DIR: dir, SLUICE_DATA_DIR: join(dir, 'data'), SLUICE_WARMUP_REQUESTS: '0', RUNTIME_DIRECTORY: runtimeDir });
  const backlog = Number(values(text('sluice.socket'), 'Socket', 'Backlog')[0]);
  const socket = await startSocketHolder({ argv: restricted(exec), cwd: ROOT, backlog });
  t.teardown(() => socket.close());
  const g = socket.spawnGeneration(env, 'sluice@test');
  // systemd runs ExecStartPost= once the main process has been executed, with the unit's
  // environment plus MAINPID (the main process: the generation's pid, kept across its execs).
  const postEnv = { ...env, MAINPID: String(g.pid) };
  const post = systemdArgv(service.find(([k]) => k === 'ExecStartPost')![1], postEnv, 'test');
  t.strictSame(post.slice(0, 2), ['/bin/sh', '-c'], 'ExecStartPost= is a shell command');
  t.match(post[2], '"$RUNTIME_DIRECTORY/ready"', 'systemd leaves $RUNTIME_DIRECTORY to the shell ($$ in the unit)');
  t.match(post[2], '"$MAINPID"', 'and $MAINPID');
  t.notOk(existsSync(join(runtimeDir, READY_FILE)), 'no ready file before sluice writes one');
  const waiting = runToEnd(t, restricted(post), postEnv);

  const ended = await waiting.ended;
  t.equal(ended.code, 0, `ExecStartPost= exits 0 (${ended.stderr.trim() || 'no stderr'})`);
  const ready = await g.ready;
  t.ok(ready.time <= ended.at, `sluice logged \`sluice ready\` (at ${ready.time}) before ExecStartPost= ended (at ${ended.at})`);
  t.equal(ready.pid, g.pid, 'the ready line comes from the main process');
  t.equal(readFileSync(join(runtimeDir, READY_FILE), 'utf8'), `${g.pid}\n`, 'the ready file holds the main process\'s pid');
  t.equal(ready.socket, 'systemd', 'it serves on the socket it was handed');
  t.equal(ready.listen, `127.0.0.1:${socket.port}`);
  // Taking the socket, sluice calls listen() on it again, which sets its queue length anew (ss
  // shows a listening socket's queue length as Send-Q): it must keep the socket unit's.
  const { stdout: ss } = await run('ss', ['-ltnH', `sport = :${socket.port}`]);
  t.equal(Number(ss.trim().split(/\s+/)[2]), backlog, `the accept queue is still Backlog=${backlog} once sluice listens (ss: ${ss.trim()})`);
  const res = await fetch(`${socket.origin}/health`);
  t.equal(await res.text(), 'ok');
  g.term();
  t.equal((await g.exited).code, 0, 'SIGTERM (systemctl stop) exits 0');

  // V8 optimises a hot function only with its JIT: status bit 16 (TurboFanned) set.
  const { stdout } = await run(exec[0]!, ['--allow-natives-syntax', '-e',
    'function f(x){return x*2+1} %PrepareFunctionForOptimization(f); f(1); f(2); %OptimizeFunctionOnNextCall(f); f(3); console.log(%GetOptimizationStatus(f))']);
  t.ok((Number(stdout.trim()) & 16) !== 0, `the JIT compiled it (optimisation status ${stdout.trim()})`);
});

t.test('a colour\'s ExecStartPost= fails by itself when the main process is gone without a ready file', async (t) => {
  const { service, env } = colourCommand();
  const runtimeDir = mkdtempSync(join(tmpdir(), 'sluice-unit-runtime-'));
  t.teardown(() => rmSync(runtimeDir, { recursive: true, force: true }));
  // A main process that has exited (and been reaped) without writing the file.
  const gone = runToEnd(t, ['/bin/true'], env);
  t.equal((await gone.ended).code, 0);
  const postEnv = { ...env, RUNTIME_DIRECTORY: runtimeDir, MAINPID: String(gone.pid) };
  const post = systemdArgv(service.find(([k]) => k === 'ExecStartPost')![1], postEnv, 'test');
  const started = Date.now();
  const ended = await runToEnd(t, post, postEnv).ended;
  t.equal(ended.code, 1, 'exit 1: the start fails');
  // It fails on its first look (kill -0), not after TimeoutStartSec.
  const timeoutS = Number(values(text('sluice@.service'), 'Service', 'TimeoutStartSec')[0]);
  t.ok(ended.at - started < 5000, `it ended after ${ended.at - started} ms, not after TimeoutStartSec=${timeoutS}`);
  t.notOk(existsSync(join(runtimeDir, READY_FILE)), 'and no ready file appeared');
});
