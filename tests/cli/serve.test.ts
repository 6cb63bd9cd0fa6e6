// `sluice serve` as a real process: it listens on port 0 and says where in its
// 'sluice ready' log line, proxies a request to a simulated router started here, and on
// SIGTERM stops accepting, lets an open stream finish, writes its row and exits 0. A bad
// --listen exits 2 and a bad configuration exits 78 with its problems.

import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import net from 'node:net';
import { createInterface } from 'node:readline';
import { createParser, type EventSourceMessage } from 'eventsource-parser';
import t, { type Test } from 'tap';
import { startSimulatedRouter } from '../../lib/sim/index.ts';
import { openStore } from '../../lib/store/open.ts';
import { profilesYaml, TIERS_YAML, UPSTREAM_KEYS } from '../helpers/gateway.ts';

// Real processes on a possibly loaded machine: more than tap's 30 s default.
t.setTimeout(120_000);

const ROOT = resolve(import.meta.dirname, '../..');
const CLI = join(ROOT, 'cli', 'sluice.ts');

function tempDir(t: Test, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

function childEnv(env: Record<string, string>): Record<string, string> {
  const base: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SLUICE_')) base[k] = v;
  return { ...base, PATH: `${join(ROOT, 'node_modules', '.bin')}:${process.env.PATH ?? ''}`, ...env };
}

interface Proc {
  child: ChildProcess;
  /** Every stdout line, parsed when it is JSON. */
  lines: Array<Record<string, any>>;
  stdout: () => string;
  stderr: () => string;
  /** Resolves with the first stdout log line matching `pred`; rejects if the process exits first. */
  line(pred: (l: Record<string, any>) => boolean): Promise<Record<string, any>>;
  exit: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function start(t: Test, args: string[], env: Record<string, string>, cwd: string): Proc {
  const child = spawn('node', [CLI, ...args], { cwd, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  const exit = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exit;
  });
  const raw: string[] = [];
  const lines: Array<Record<string, any>> = [];
  let err = '';
  child.stderr!.setEncoding('utf8').on('data', (d: string) => (err += d));
  const rl = createInterface({ input: child.stdout! });
  rl.on('line', (l) => {
    raw.push(l);
    try {
      lines.push(JSON.parse(l));
    } catch {
      lines.push({ text: l });
    }
    rl.emit('parsed');
  });
  return {
    child, lines, exit,
    stdout: () => raw.join('\n'),
    stderr: () => err,
    line(pred) {
      return new Promise((resolve, reject) => {
        const check = (): boolean => {
          const hit = lines.find(pred);
          if (hit) {
            rl.off('parsed', check);
            resolve(hit);
          }
          return hit !== undefined;
        };
        if (check()) return;
        rl.on('parsed', check);
        void exit.then(({ code }) => reject(new Error(`sluice exited (${code}) before the line appeared:\n${raw.join('\n')}\n${err}`)));
      });
    },
  };
}

async function run(args: string[], env: Record<string, string>, cwd: string) {
  const child = spawn('node', [CLI, ...args], { cwd, env: childEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
  child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
  const [code] = (await once(child, 'close')) as [number | null];
  return { code, stdout, stderr };
}

function sse(text: string): EventSourceMessage[] {
  const events: EventSourceMessage[] = [];
  createParser({ onEvent: (e) => events.push(e) }).feed(text);
  return events;
}

t.test('serve: listens on port 0, proxies, drains a stream on SIGTERM and exits 0', async (t) => {
  const sim = await startSimulatedRouter();
  t.teardown(() => sim.close());
  const cfg = tempDir(t, 'sluice-serve-cfg-');
  writeFileSync(join(cfg, 'profiles.yaml'), profilesYaml(sim.url));
  writeFileSync(join(cfg, 'tiers.yaml'), TIERS_YAML);
  const dataDir = tempDir(t, 'sluice-serve-data-');
  const cwd = tempDir(t, 'sluice-serve-cwd-');
  const env = { SLUICE_CONFIG_DIR: cfg, SLUICE_DATA_DIR: dataDir, SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev!, SLUICE_LOG_LEVEL: 'info', SLUICE_WARMUP_REQUESTS: '200' };

  const created = await run(['keys', 'create', '--profile', 'dev', '--name', 'serve-test'], env, cwd);
  t.equal(created.code, 0, created.stderr);
  const key = created.stdout.trim();

  const p = start(t, ['serve', '--listen', '127.0.0.1:0'], env, cwd);
  const listening = await p.line((l) => l.msg === 'sluice ready');
  const warmed = p.lines.findIndex((l) => l.msg === 'warmed up');
  t.ok(warmed >= 0 && warmed < p.lines.indexOf(listening), 'it warmed up before it reported ready');
  t.equal(p.lines[warmed]?.ok, 200, 'every warm-up request was answered');
  t.equal(sim.received.filter((r) => r.method === 'POST').length, 0, 'the warm-up never reached the configured router');
  const opened = p.lines.findIndex((l) => l.msg === 'upstream connections opened');
  t.ok(opened >= 0 && opened < p.lines.indexOf(listening), 'it opened its upstream connections before it reported ready');
  t.match(p.lines[opened], { routers: 1, sockets: 16, failed: 0 });
  t.equal(sim.received.filter((r) => r.method === 'GET' && r.path === '/api/v1/key').length, 16, 'each with a readout of the key');
  const m = /^127\.0\.0\.1:(\d+)$/.exec(listening.listen);
  t.ok(m, `the log line names the address: ${listening.listen}`);
  const port = Number(m![1]);
  t.ok(port > 0, 'a real port, not 0');
  t.equal(listening.store, 'sqlite');
  t.strictSame(listening.profiles, ['dev', 'assistant', 'tiny', 'nokey']);
  const url = `http://127.0.0.1:${port}`;
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

  const one = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }) });
  t.equal(one.status, 200);
  const oneBody = await one.json() as any;
  t.equal(oneBody.object, 'chat.completion');
  t.equal(oneBody.model, 'google/gemini-2.5-flash', 'sluice/fast went upstream as the tier model');
  t.equal(sim.received.at(-1)!.headers.authorization, `Bearer ${UPSTREAM_KEYS.dev}`, 'the upstream got the profile key');

  const stream = await fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { ...headers, 'x-sim': 'chunks=30;chunk-delay-ms=20' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'count' }] }),
  });
  t.equal(stream.status, 200);
  const reader = stream.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  // Read until the first content delta has arrived: the stream is open and mid-flight.
  while (!text.includes('"content":"Hello')) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  t.notOk(text.includes('[DONE]'), 'the stream is still open when SIGTERM is sent');
  p.child.kill('SIGTERM');
  await p.line((l) => typeof l.msg === 'string' && l.msg.startsWith('draining'));
  const fresh = await new Promise<string>((resolve) => {
    const s = net.connect(port, '127.0.0.1').once('connect', () => resolve('connected')).once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
    s.once('connect', () => s.destroy());
  });
  t.equal(fresh, 'ECONNREFUSED', 'no new connections while draining');
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
  }
  const events = sse(text);
  t.equal(events.at(-1)?.data, '[DONE]', 'the stream finished');
  const content = events.filter((e) => e.data !== '[DONE]').map((e) => JSON.parse(e.data)).filter((j) => typeof j.choices?.[0]?.delta?.content === 'string' && j.choices[0].delta.content !== '');
  t.equal(content.length, 30, 'all 30 chunks arrived');

  const exited = await p.exit;
  t.strictSame(exited, { code: 0, signal: null }, 'exit code 0');
  t.ok(p.lines.some((l) => typeof l.msg === 'string' && l.msg.startsWith('stopped')), 'it logged its stop');
  for (const secret of [key, UPSTREAM_KEYS.dev!]) t.notOk(p.stdout().includes(secret) || p.stderr().includes(secret), 'no key in the logs');

  const store = await openStore({ dataDir });
  t.teardown(() => store.close());
  const rows = await store.listRequests(10);
  t.equal(rows.length, 2, 'both requests were recorded before exit, and none of the warm-up\'s');
  t.equal((await store.listKeys()).length, 1, 'no key but the test\'s');
  const streamed = rows.find((r) => r.stream);
  t.match(streamed, { endpoint: 'chat', profile: 'dev', status: 200, outcome: 'ok', tier: 'fast', model: 'google/gemini-2.5-flash', output_tokens: 30, cost_source: 'upstream' });
  t.ok(streamed!.cost_usd > 0);
  t.match(rows.find((r) => !r.stream), { endpoint: 'chat', status: 200, outcome: 'ok' });
});

t.test('serve: bad --listen exits 2, bad configuration exits 78', async (t) => {
  const cwd = tempDir(t, 'sluice-serve-cwd-');
  const cfg = tempDir(t, 'sluice-serve-badcfg-');
  writeFileSync(join(cfg, 'profiles.yaml'), profilesYaml('http://127.0.0.1:1').replace('default_tier: agent', 'default_tier: agnet'));
  writeFileSync(join(cfg, 'tiers.yaml'), TIERS_YAML.replace('max_output_tokens: 8192', 'max_output_tokens: lots'));
  const env = { SLUICE_CONFIG_DIR: join(ROOT, 'config'), SLUICE_DATA_DIR: cwd };
  const [garbage, noPort, badPort, badCfg] = await Promise.all([
    run(['serve', '--listen', 'garbage'], env, cwd),
    run(['serve', '--listen', '127.0.0.1'], env, cwd),
    run(['serve', '--listen', '127.0.0.1:70000'], env, cwd),
    run(['serve', '--listen', '127.0.0.1:0'], { ...env, SLUICE_CONFIG_DIR: cfg }, cwd),
  ]);
  for (const [name, r] of [['garbage', garbage], ['no port', noPort], ['port 70000', badPort]] as const) {
    t.equal(r.code, 2, `--listen ${name}: exit 2`);
    t.match(r.stderr, /--listen must be HOST:PORT/);
  }
  t.equal(badCfg.code, 78, 'a configuration error exits 78');
  t.strictSame(badCfg.stderr.trimEnd().split('\n').map((l) => l.trim()), [
    'sluice: configuration is invalid:',
    `${join(cfg, 'tiers.yaml')}: tiers.fast.max_output_tokens: must be a number`,
    `${join(cfg, 'profiles.yaml')}: profiles.dev.default_tier: names unknown tier "agnet"`,
  ]);
  t.notOk(badCfg.stdout.includes('sluice ready'), 'it never listened');
});
