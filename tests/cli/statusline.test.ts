// `sluice setup --statusline` and the line it sets up, run as Claude Code runs a status line: the
// printed command through `sh -c`, Claude Code's JSON on stdin, the first stdout line taken. Against
// a live sluice (the harness): the binding budget's percentage, window and next stage, a key's own
// cap, a block, a session against its cap. Against no sluice, a silent one, a bad key or a stdin
// that never closes: a short line, exit 0, within the time limit.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type Socket } from 'node:net';
import t, { type Test } from 'tap';
import { insertKey, prepareKey } from '../../cli/keys.ts';
import { shellQuote, STATUSLINE_SCRIPT, statuslineSetting } from '../../cli/setup.ts';
import { spentRow } from '../helpers/budget-caps.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { teamProfiles } from '../helpers/budget-caps.ts';
import { runCli } from '../helpers/processes.ts';

const NOW = Date.parse('2026-03-10T12:00:00.000Z');
const TEAM = teamProfiles(2);
const PROFILES = TEAM.yaml;
const ENV = TEAM.env;
/** What Claude Code pipes to a status line command (a subset of its fields; the script reads session_id). */
const CC_INPUT = (session: string) => JSON.stringify({ session_id: session, cwd: '/tmp', model: { id: 'claude-sonnet-4-5', display_name: 'Sonnet' }, workspace: { current_dir: '/tmp' }, cost: { total_cost_usd: 0.1 } });

/** The command of the printed setting. */
const COMMAND = (JSON.parse(statuslineSetting()) as { statusLine: { command: string } }).statusLine.command;

interface Run { code: number | null; stdout: string; ms: number }

/** Runs the status line as Claude Code does: `sh -c COMMAND` (plus `args`), JSON on stdin (closed unless `keepOpen`), exactly `env`. */
async function statusline(t: Test, env: Record<string, string>, stdin: string | null, keepOpen = false, args = ''): Promise<Run> {
  const began = performance.now();
  const child = spawn('sh', ['-c', `${COMMAND}${args}`], { env: { PATH: '/usr/bin:/bin', ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
  t.teardown(() => void child.kill('SIGKILL'));
  let stdout = '';
  child.stdout.on('data', (c) => (stdout += c));
  if (stdin !== null) child.stdin.write(stdin);
  if (!keepOpen) child.stdin.end();
  const [code] = (await once(child, 'exit')) as [number | null];
  child.stdin.destroy();
  return { code, stdout, ms: performance.now() - began };
}
const firstLine = (r: Run) => r.stdout.split('\n')[0];

async function mint(h: Harness, profile: string, name: string, dailyUsd?: string) {
  const key = await insertKey(h.store, prepareKey(h.config, { profile, name, dailyUsd }, h.clock.now));
  const row = (await h.store.listKeys(profile)).find((k) => k.name === name && k.revoked_at === null)!;
  return { key, row };
}

t.test('setup --statusline prints the setting: this Node and the shipped script, no key', async (t) => {
  const r = await runCli(['setup', '--statusline'], { PATH: process.env.PATH, ANTHROPIC_AUTH_TOKEN: 'sluice_team_secret' });
  t.equal(r.code, 0);
  const setting = JSON.parse(r.stdout);
  t.strictSame(setting, { statusLine: { type: 'command', command: `${shellQuote(process.execPath)} ${shellQuote(STATUSLINE_SCRIPT)}`, padding: 0, refreshInterval: 60 } });
  t.match(STATUSLINE_SCRIPT, /^\/.*\/cli\/statusline\.mjs$/, 'an absolute path');
  t.notMatch(r.stdout, /secret/, 'no key in the setting');
  t.match(r.stderr, /~\/\.claude\/settings\.json/);
  t.equal(shellQuote("/opt/it's here/node"), `'/opt/it'\\''s here/node'`, 'a quote in a path stays one word');
  const both = await runCli(['setup', '--statusline', '--proxy'], { PATH: process.env.PATH });
  t.equal(both.code, 2, '--proxy and --statusline together: usage');
  const neither = await runCli(['setup'], { PATH: process.env.PATH });
  t.equal(neither.code, 2, 'neither: usage');
  t.match(neither.stderr, /--proxy or --statusline/);
});

t.test('the line from a live sluice, as Claude Code runs it', async (t) => {
  const h = await startHarness(t, { extraProfiles: PROFILES, env: ENV, clockStart: NOW });
  const alice = await mint(h, 'team', 'alice', '1');
  const bob = await mint(h, 'team', 'bob');
  const carol = await mint(h, 'team', 'carol', '0.5');
  const dev = await mint(h, 'looped', 'dev');
  await h.store.insertRequests([
    spentRow(alice.row, 0.75, NOW - 3_600_000), spentRow(bob.row, 3.45, NOW - 3_600_000), spentRow(carol.row, 0.5, NOW - 3_600_000),
  ]);
  const as = (key: string, extra: Record<string, string> = {}) => ({ ANTHROPIC_BASE_URL: h.url, ANTHROPIC_AUTH_TOKEN: key, ...extra });

  const b = await statusline(t, as(bob.key), CC_INPUT('s-bob'));
  t.equal(b.code, 0);
  t.equal(firstLine(b), 'sluice · 47 % of today · fast tier at 70 %', "bob: the profile's budget (4.70 of 10 USD) and the next stage");
  const a = await statusline(t, as(alice.key), CC_INPUT('s-alice'));
  t.equal(firstLine(a), 'sluice · key alice · 75 % of today · fast tier only · 2048 tokens at 85 %', "alice: her key's cap binds");
  const c = await statusline(t, as(carol.key), CC_INPUT('s-carol'));
  t.equal(firstLine(c), 'sluice · key carol · 100 % of today · blocked until 00:00 UTC', 'carol: her cap is spent');
  const apiKey = await statusline(t, { ANTHROPIC_BASE_URL: `${h.url}/`, ANTHROPIC_API_KEY: bob.key }, CC_INPUT('s-bob'));
  t.equal(firstLine(apiKey), firstLine(b), 'the key from ANTHROPIC_API_KEY, a base URL with a trailing slash');
  const terminal = await statusline(t, as(bob.key), null);
  t.equal(firstLine(terminal), firstLine(b), 'nothing on stdin (a shell prompt): the same line');

  // A session: the id Claude Code gives on stdin is the one its requests carry.
  const first = await fetch(`${h.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': dev.key, 'anthropic-version': '2023-06-01', 'x-claude-code-session-id': 's-loop' },
    body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(first.status, 200);
  await first.arrayBuffer();
  await h.rows(1);
  await h.gateway.deps.budget.addRow(spentRow(dev.row, 2, h.clock.now, 's-loop')); // the loop spends its cap
  const looped = await statusline(t, as(dev.key), CC_INPUT('s-loop'));
  t.match(firstLine(looped), /^sluice · \d+(\.\d)? % of today · fast tier at 70 % · session stopped \(cap 2 USD\)$/, 'the looping session: stopped');
  const other = await statusline(t, as(dev.key), CC_INPUT('s-other'));
  t.match(firstLine(other), /^sluice · .* · session 0 %$/, 'another session of the key: nothing spent');
});

t.test('without a sluice to ask: a short line, exit 0, never a hang', async (t) => {
  // A port nobody listens on.
  const closed = createServer();
  await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
  const port = (closed.address() as { port: number }).port;
  await new Promise((resolve) => closed.close(resolve));
  const away = await statusline(t, { ANTHROPIC_BASE_URL: `http://127.0.0.1:${port}`, ANTHROPIC_AUTH_TOKEN: 'k' }, CC_INPUT('s'));
  t.equal(away.code, 0);
  t.equal(firstLine(away), 'sluice · budget unavailable');

  // A server that accepts and never answers: the time limit ends the run.
  const sockets: Socket[] = [];
  const silent = createServer((s) => sockets.push(s));
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const s of sockets) s.destroy();
    silent.close();
  });
  const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
  const hung = await statusline(t, { ANTHROPIC_BASE_URL: url, ANTHROPIC_AUTH_TOKEN: 'k' }, CC_INPUT('s'), false, ' --timeout-ms 400');
  t.equal(hung.code, 0);
  t.equal(firstLine(hung), 'sluice · budget unavailable (no answer in time)');
  t.ok(hung.ms < 5000, `ended by its time limit (${Math.round(hung.ms)} ms)`);
  // stdin left open, as a misbehaving parent might: read for a moment only.
  const open = await statusline(t, { ANTHROPIC_BASE_URL: url, ANTHROPIC_AUTH_TOKEN: 'k' }, '{"session_id":', true, ' --timeout-ms 400');
  t.equal(open.code, 0);
  t.equal(firstLine(open), 'sluice · budget unavailable (no answer in time)');

  const nothing = await statusline(t, {}, CC_INPUT('s'));
  t.equal(firstLine(nothing), 'sluice · no base URL (ANTHROPIC_BASE_URL)');
  t.equal((await statusline(t, { ANTHROPIC_BASE_URL: url }, CC_INPUT('s'))).stdout, 'sluice · no key (ANTHROPIC_AUTH_TOKEN)\n');
});

t.test('a sluice that refuses the key: the status, not the body', async (t) => {
  const h = await startHarness(t, { extraProfiles: PROFILES, env: ENV, clockStart: NOW });
  const bad = await statusline(t, { ANTHROPIC_BASE_URL: h.url, ANTHROPIC_AUTH_TOKEN: 'sluice_team_notakey' }, CC_INPUT('s'));
  t.equal(bad.code, 0);
  t.equal(firstLine(bad), 'sluice · budget unavailable (HTTP 401)');
});
