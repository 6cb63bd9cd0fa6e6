// The real command-line clients as the end-to-end tests run them: Claude Code (`claude -p`) and
// Codex CLI (`codex exec`), each with a fresh HOME and only the environment it needs (no user
// settings, no telemetry, no update checks), pointed at a sluice URL. No assertions here.

import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { runProgram, type CliRun } from './processes.ts';

const BIN = join(import.meta.dirname, '../../node_modules/.bin');

function home(t: Test, tag: string): string {
  const dir = mkdtempSync(join(tmpdir(), `sluice-${tag}-home-`));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `claude -p PROMPT --output-format json` against sluice at `url`; `out` is its parsed JSON result. */
export async function claude(t: Test, url: string, key: string, prompt: string, env: Record<string, string> = {}): Promise<{ code: number | null; out: any; stderr: string }> {
  const dir = home(t, 'cc');
  const run = await runProgram(join(BIN, 'claude'), ['-p', prompt, '--output-format', 'json'], {
    cwd: dir, t,
    env: {
      PATH: '/usr/bin:/bin', HOME: dir, ANTHROPIC_BASE_URL: url, ANTHROPIC_AUTH_TOKEN: key,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1', CLAUDE_CODE_MAX_RETRIES: '2', ...env,
    },
  });
  let out: any;
  try {
    out = JSON.parse(run.stdout);
  } catch {
    out = { raw: run.stdout };
  }
  return { code: run.code, out, stderr: run.stderr };
}

/**
 * `codex exec PROMPT` against sluice at `url` through a custom provider (the configuration
 * docs/responses.md gives, with `stream_max_retries = 0`); `headers` become the provider's static
 * `http_headers` (the simulator's `x-sim` directives).
 */
export async function codex(t: Test, url: string, key: string, prompt: string, headers: Record<string, string> = {}): Promise<CliRun> {
  const dir = home(t, 'codex');
  mkdirSync(join(dir, '.codex'));
  const extra = Object.entries(headers).map(([k, v]) => `"${k}" = "${v}"`).join(', ');
  writeFileSync(join(dir, '.codex', 'config.toml'), `model = "sluice/agent"
model_provider = "sluice"
[model_providers.sluice]
name = "sluice"
base_url = "${url}/v1"
env_key = "SLUICE_KEY"
wire_api = "responses"
stream_max_retries = 0
${extra ? `http_headers = { ${extra} }\n` : ''}`);
  return runProgram(join(BIN, 'codex'), ['exec', '--skip-git-repo-check', '--sandbox', 'read-only', prompt], {
    cwd: dir, t, env: { PATH: '/usr/bin:/bin', HOME: dir, SLUICE_KEY: key },
  });
}
