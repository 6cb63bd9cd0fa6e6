// Bad input to the CLI keeps getting a clear answer (docs/operation.md), seeded so a failure replays
// (the seed is in the test name). Configuration files: profiles.yaml and tiers.yaml mutated (wrong
// types, unknown fields, bad YAML, huge values) are loaded in process, thousands of cases: each is
// accepted or refused with a ConfigError naming the file — never another exception. Arguments: a
// bounded number of real `sluice` processes (keys create/list/revoke, setup, serve --listen,
// unknown commands and options, and the mutated files): exit 0, 1, 2 or 78, no stack trace, and an
// error is a `sluice: …` message.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import t, { type Test } from 'tap';
import { stringify, parse } from 'yaml';
import { ConfigError, loadConfig } from '../../lib/config.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';

const SEED = Number(process.env.FUZZ_SEED ?? 0x5eed10);
const ROOT = new URL('../../', import.meta.url).pathname;
const CLI = join(ROOT, 'cli/sluice.ts');
const PROFILES = parse(profilesYaml('http://127.0.0.1:9')) as Record<string, any>;
const TIERS = parse(TIERS_YAML) as Record<string, any>;

const weird = fc.oneof(
  fc.string({ maxLength: 40 }), fc.integer(), fc.double(), fc.boolean(), fc.constant(null),
  fc.constant(1e308), fc.constant(-1), fc.constant('x'.repeat(100_000)), fc.array(fc.string(), { maxLength: 3 }),
  fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 }), { maxKeys: 3 }),
);

/** Every path to a value in a plain object. */
function paths(o: unknown, at: string[] = []): string[][] {
  if (o === null || typeof o !== 'object') return [at];
  return [at, ...Object.entries(o).flatMap(([k, v]) => paths(v, [...at, k]))];
}

/** One mutation of a configuration document, as YAML text (or broken text). */
const mutated = (doc: Record<string, any>) => fc.tuple(fc.nat(), weird, fc.string({ maxLength: 12 }), fc.nat(4), fc.nat()).map(([p, value, field, how, cut]) => {
  const copy = structuredClone(doc);
  const all = paths(copy).filter((x) => x.length > 0);
  const path = all[p % all.length]!;
  const parent = path.slice(0, -1).reduce((o, k) => o[k], copy as any);
  const last = path[path.length - 1]!;
  if (how === 0) parent[last] = value; // wrong type or value
  else if (how === 1) parent[`${field}x`] = value; // unknown field
  else if (how === 2) delete parent[last]; // missing field
  else if (how === 3) return stringify(copy).slice(0, cut % (stringify(copy).length + 1)) + ':\n\t- [{'; // bad YAML
  else parent[last] = typeof parent[last] === 'number' ? 1e300 : 'y'.repeat(70_000); // huge values
  return stringify(copy);
});

function configDir(t: Test, profiles: string, tiers: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-fuzz-cfg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profiles);
  writeFileSync(join(dir, 'tiers.yaml'), tiers);
  return dir;
}

t.test(`mutated configuration files: accepted or one ConfigError naming the file (seed ${SEED})`, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-fuzz-cfg-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  let refused = 0;
  let accepted = 0;
  fc.assert(fc.property(fc.boolean(), mutated(PROFILES), mutated(TIERS), (which, p, ti) => {
    writeFileSync(join(dir, 'profiles.yaml'), which ? p : profilesYaml('http://127.0.0.1:9'));
    writeFileSync(join(dir, 'tiers.yaml'), which ? TIERS_YAML : ti);
    try {
      loadConfig(dir);
      accepted++;
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      const file = which ? 'profiles.yaml' : 'tiers.yaml';
      if (!err.problems.length || !err.problems.every((m) => m.includes(file) || m.includes('.yaml'))) throw new Error(`a problem that names no file: ${err.message}`);
      refused++;
    }
  }), { seed: SEED, numRuns: 400 });
  t.ok(refused > 150, `${refused} refused, ${accepted} accepted, nothing else`);
});

interface Outcome { code: number | null; stdout: string; stderr: string }

function cli(args: string[], env: Record<string, string>): Promise<Outcome> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, env: { PATH: process.env.PATH!, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c) => (stdout += c));
    child.stderr.on('data', (c) => (stderr += c));
    // A `serve` that got good arguments starts serving: that is a success, stop it.
    const timer = setTimeout(() => child.kill('SIGTERM'), 8000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const token = fc.oneof(
  fc.constantFrom('keys', 'create', 'list', 'revoke', 'setup', 'serve', 'simulate-nope', 'upstream-nope', '--profile', '--name', '--expires', '--ip', '--json', '--proxy', '--url', '--key', '--listen', '--config', '--nope', '-x', '--', '--help=3'),
  fc.constantFrom('dev', 'nokey', 'Dev', 'a_b', '2026-13-40', '1999-01-01', '10.0.0.0/33', '::1', '300.1.1.1', 'localhost:99999', '127.0.0.1:', ':8080', '[::1]:80'),
  fc.string({ maxLength: 12 }),
);
const argv = fc.oneof(
  fc.array(token, { minLength: 1, maxLength: 7 }),
  fc.tuple(fc.constantFrom(['keys', 'create'], ['keys', 'list'], ['keys', 'revoke'], ['setup'], ['serve']), fc.array(token, { maxLength: 5 })).map(([a, b]) => [...a, ...b]),
  fc.string({ maxLength: 20 }).map((l) => ['serve', '--listen', l.includes(':') ? l : `${l}:x`]),
);

t.test(`sluice arguments and configuration: exit 0/1/2/78, a message, never a stack (seed ${SEED})`, async (t) => {
  const good = configDir(t, profilesYaml('http://127.0.0.1:9'), TIERS_YAML);
  const data = mkdtempSync(join(tmpdir(), 'sluice-fuzz-data-'));
  t.teardown(() => rmSync(data, { recursive: true, force: true }));
  const env = { SLUICE_DATA_DIR: data, SLUICE_CONFIG_DIR: good, SLUICE_WARMUP_REQUESTS: '0' };
  const cases: string[][] = fc.sample(argv, { seed: SEED, numRuns: 14 });
  // Configuration files mutated, behind a command that loads them.
  const files = fc.sample(fc.tuple(mutated(PROFILES), mutated(TIERS)), { seed: SEED + 1, numRuns: 4 });
  const jobs: Array<{ args: string[]; env: Record<string, string> }> = cases.map((args) => ({ args, env }));
  files.forEach(([p, ti], i) => jobs.push({ args: i % 2 ? ['keys', 'list'] : ['serve', '--listen', 'nope'], env: { ...env, SLUICE_CONFIG_DIR: configDir(t, i % 4 < 2 ? p : profilesYaml('http://127.0.0.1:9'), i % 4 < 2 ? TIERS_YAML : ti) } }));
  jobs.push({ args: ['nope'], env }, { args: ['keys', 'create', '--profile', 'dev'], env }, { args: ['serve', '--listen', '127.0.0.1:99999'], env });

  const outcomes: Array<{ args: string[]; o: Outcome }> = [];
  for (let i = 0; i < jobs.length; i += 4) {
    outcomes.push(...await Promise.all(jobs.slice(i, i + 4).map(async (j) => ({ args: j.args, o: await cli(j.args, j.env) }))));
  }
  const bad: string[] = [];
  const codes: Record<string, number> = {};
  for (const { args, o } of outcomes) {
    codes[String(o.code)] = (codes[String(o.code)] ?? 0) + 1;
    const why = ![0, 1, 2, 78].includes(o.code as number) && o.code !== null ? `exit ${o.code}`
      : /\n\s+at .+:\d+:\d+/.test(o.stderr) ? 'a stack trace'
      : o.code !== 0 && o.code !== null && !/^sluice: \S/.test(o.stderr) && !/^Usage|^sluice /m.test(o.stderr) ? 'no message' : undefined;
    if (why) bad.push(`${JSON.stringify(args)} → ${why}: ${o.stderr.slice(0, 300)}`);
  }
  t.strictSame(bad, [], `every answer clear (${outcomes.length} runs; exit codes ${JSON.stringify(codes)})`);
  t.ok((codes['2'] ?? 0) > 0 && (codes['78'] ?? 0) > 0, 'bad usage (2) and bad configuration (78) both met');
});
