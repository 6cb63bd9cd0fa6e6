// Running the `sluice` command as a real process in a test: a temporary directory removed at the
// end of the test, and `node cli/sluice.ts …` with the project's Node first on PATH and only the
// SLUICE_* variables the test gives.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Test } from 'tap';

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'cli', 'sluice.ts');

export interface Run { code: number | null; stdout: string; stderr: string }

export function tempDir(t: Test, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** Runs `node cli/sluice.ts …` in `cwd` with the project's Node first on PATH and only the SLUICE_* variables given here. */
export function sluice(args: string[], env: Record<string, string>, cwd: string): Promise<Run> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SLUICE_')) base[k] = v;
  base.PATH = `${join(ROOT, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`;
  const child = spawn('node', [CLI, ...args], { cwd, env: { ...base, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (code) => resolve({ code, stdout, stderr }));
  });
}
