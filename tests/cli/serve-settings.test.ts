// `sluice serve`'s connection and client-address settings: the defaults (nothing trusted, the
// connection bounds), each SLUICE_* connection variable read into the bounds, and a bad value of
// each one exiting 78 with a message naming the variable, checked through the function and, for
// two of them, through a real process that never starts listening. Also: `setup --proxy` says how
// to set SLUICE_TRUSTED_PROXIES behind nginx or Caddy and its output still evaluates in a shell.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';
import { connectionLimits } from '../../cli/serve.ts';
import { UsageError } from '../../cli/errors.ts';
import { CONNECTION_DEFAULTS } from '../../lib/server.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'cli', 'sluice.ts');

async function run(args: string[], env: Record<string, string>) {
  const cwd = mkdtempSync(join(tmpdir(), 'sluice-settings-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_'))) as Record<string, string>;
  const child = spawn(process.execPath, [CLI, ...args], { cwd, env: { ...base, SLUICE_CONFIG_DIR: join(ROOT, 'config'), SLUICE_DATA_DIR: cwd, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

t.test('the defaults', async (t) => {
  t.same(connectionLimits({}), { maxConnections: 16_384, maxPerAddress: 256, headersTimeoutMs: 10_000, keepAliveTimeoutMs: 65_000 });
  t.same(connectionLimits({}), CONNECTION_DEFAULTS);
  t.ok(CONNECTION_DEFAULTS.keepAliveTimeoutMs > 60_000, "idle connections outlast nginx's upstream keepalive_timeout (60 s)");
  t.same(connectionLimits({ SLUICE_MAX_CONNECTIONS: '', SLUICE_HEADERS_TIMEOUT_S: ' ' }), CONNECTION_DEFAULTS, 'empty means the default');
});

t.test('each variable is read', async (t) => {
  t.same(connectionLimits({ SLUICE_MAX_CONNECTIONS: '5000', SLUICE_MAX_CONNECTIONS_PER_IP: '0', SLUICE_HEADERS_TIMEOUT_S: '2.5', SLUICE_KEEPALIVE_TIMEOUT_S: '125' }),
    { maxConnections: 5000, maxPerAddress: 0, headersTimeoutMs: 2500, keepAliveTimeoutMs: 125_000 });
});

t.test('a bad value exits 78 naming the variable', async (t) => {
  const bad: Array<[string, string]> = [
    ['SLUICE_MAX_CONNECTIONS', '-1'], ['SLUICE_MAX_CONNECTIONS', '1.5'], ['SLUICE_MAX_CONNECTIONS', 'lots'],
    ['SLUICE_MAX_CONNECTIONS_PER_IP', '-3'], ['SLUICE_MAX_CONNECTIONS_PER_IP', 'Infinity'],
    ['SLUICE_HEADERS_TIMEOUT_S', '0'], ['SLUICE_HEADERS_TIMEOUT_S', '121'], ['SLUICE_HEADERS_TIMEOUT_S', '10s'],
    ['SLUICE_KEEPALIVE_TIMEOUT_S', '0'], ['SLUICE_KEEPALIVE_TIMEOUT_S', 'NaN'],
  ];
  for (const [name, value] of bad) {
    const err = t.throws(() => connectionLimits({ [name]: value }), UsageError, `${name}=${value} is refused`) as UsageError;
    t.equal(err.exitCode, 78);
    t.match(err.message, new RegExp(`^${name} must be .*, got "${value}"$`));
  }

  const [perIp, trusted, upstream] = await Promise.all([
    run(['serve', '--listen', '127.0.0.1:0'], { SLUICE_MAX_CONNECTIONS_PER_IP: 'many' }),
    run(['serve', '--listen', '127.0.0.1:0'], { SLUICE_TRUSTED_PROXIES: '127.0.0.1,nginx.local' }),
    run(['serve', '--listen', '127.0.0.1:0'], { SLUICE_UPSTREAM_TIMEOUT_S: '-5' }),
  ]);
  t.equal(perIp.code, 78, 'SLUICE_MAX_CONNECTIONS_PER_IP: exit 78');
  t.equal(perIp.stderr.trim(), 'sluice: SLUICE_MAX_CONNECTIONS_PER_IP must be a whole number of connections (0: no cap), got "many"');
  t.equal(trusted.code, 78, 'SLUICE_TRUSTED_PROXIES: exit 78');
  t.match(trusted.stderr, /SLUICE_TRUSTED_PROXIES: not an IP address or CIDR: nginx\.local/);
  t.equal(upstream.code, 78, 'SLUICE_UPSTREAM_TIMEOUT_S: exit 78');
  t.match(upstream.stderr, /SLUICE_UPSTREAM_TIMEOUT_S must be a positive number of seconds, got "-5"/);
  for (const r of [perIp, trusted, upstream]) t.notMatch(r.stdout, /sluice listening/, 'it never listened');
});

t.test('setup --proxy says how to trust the front proxy, and stays eval-able', async (t) => {
  const r = await run(['setup', '--proxy', '--url', 'http://127.0.0.1:8080', '--key', 'K'], {});
  t.equal(r.code, 0);
  const comments = r.stdout.split('\n').filter((l) => l.startsWith('#')).join('\n');
  t.match(comments, /SLUICE_TRUSTED_PROXIES=127\.0\.0\.1/);
  t.match(comments, /proxy_set_header X-Forwarded-For \$remote_addr;/, 'the nginx line');
  t.match(comments, /Caddy/);
  const shell = spawn('sh', ['-c', `eval "$1"; printf '%s|%s' "$ANTHROPIC_BASE_URL" "$OPENAI_API_KEY"`, 'sh', r.stdout], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  shell.stdout.setEncoding('utf8').on('data', (d: string) => (out += d));
  const [code] = (await once(shell, 'close')) as [number | null];
  t.equal(code, 0, 'sh evaluates the output');
  t.equal(out, 'http://127.0.0.1:8080|K');
});
