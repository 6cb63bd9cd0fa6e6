// `sluice check`: the configuration and settings `serve` would start with, judged before a
// restart through a real process. A good one exits 0 with a summary on stdout; every problem of
// the settings (SLUICE_* and OTEL_*) and of the files is listed at once, exit 78; nothing is opened (no store file);
// a profile without an upstream key is named on stderr but is not a failure.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { cpSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import t from 'tap';

t.setTimeout(60_000);

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'cli', 'sluice.ts');

async function check(args: string[], env: Record<string, string>) {
  const cwd = mkdtempSync(join(tmpdir(), 'sluice-check-'));
  t.teardown(() => rmSync(cwd, { recursive: true, force: true }));
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SLUICE_'))) as Record<string, string>;
  const child = spawn(process.execPath, [CLI, 'check', ...args], { cwd, env: { ...base, SLUICE_DATA_DIR: cwd, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr, opened: existsSync(join(cwd, 'sluice.db')) };
}

const KEYS = { SLUICE_UPSTREAM_KEY_DEV: 'k', SLUICE_UPSTREAM_KEY_ASSISTANT: 'k', SLUICE_UPSTREAM_KEY_TINY: 'k' };

t.test('a good configuration: exit 0, a summary, a note per profile without an upstream key', async (t) => {
  const ok = await check(['--config', join(ROOT, 'config')], {});
  t.equal(ok.code, 0, ok.stderr);
  t.match(ok.stdout, /^ok: .*config: \d+ profiles, \d+ tiers; every SLUICE_\* setting valid\n$/);
  t.match(ok.stderr, /^note: profile \S+ has no upstream key \(SLUICE_UPSTREAM_KEY_\S+\): its requests will answer 503$/m);
  t.notOk(ok.opened, 'no store opened');
  const viaEnv = await check([], { SLUICE_CONFIG_DIR: join(ROOT, 'config'), SLUICE_UPSTREAM_KEY_DEV: 'sk-or-v1-x' });
  t.equal(viaEnv.code, 0, 'SLUICE_CONFIG_DIR names the directory when --config does not');
  t.notMatch(viaEnv.stderr, /profile dev has no upstream key/, 'a profile with a key is not named');
  t.notMatch(viaEnv.stdout + viaEnv.stderr, /sk-or-v1-x/, 'a key is never printed');
});

t.test('every problem of the settings and the files at once: exit 78', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-check-cfg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  cpSync(join(ROOT, 'config'), dir, { recursive: true });
  writeFileSync(join(dir, 'tiers.yaml'), 'tiers:\n  fast:\n    model: 7\n');
  const bad = await check(['--config', dir], {
    ...KEYS, SLUICE_SHUTDOWN_GRACE_S: '10s', SLUICE_WARMUP_REQUESTS: '-1',
    OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc',
  });
  t.equal(bad.code, 78);
  t.equal(bad.stdout, '', 'nothing on stdout');
  t.match(bad.stderr, /SLUICE_SHUTDOWN_GRACE_S must be a number of seconds, 0 or more, got "10s"/);
  t.match(bad.stderr, /SLUICE_WARMUP_REQUESTS must be a whole number/);
  t.match(bad.stderr, /OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported/, 'the trace settings too');
  t.match(bad.stderr, /tiers\.yaml/, 'and the file problems too');
  t.notOk(bad.opened);
  const missing = await check(['--config', join(dir, 'nope')], {});
  t.equal(missing.code, 78, 'a directory without the files');
});
