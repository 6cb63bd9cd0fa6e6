// One key cannot hurt the others: the request shapes that used to stall the event loop for seconds
// or take hundreds of MB (a conversation of thousands of user turns, a long `models` list, a body
// of a million members, a session id of megabytes, bodies that arrive slowly) go through a live
// gateway while the CPU time they take is measured (process.cpuUsage; the loop's longest stall is
// printed beside it) and the process's resident memory is read from /proc. The bound each test holds is documented in
// docs/http.md ("Bounds"); the sizes are those of the issue that found them.

import { readFileSync } from 'node:fs';
import net from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import t from 'tap';
import { MAX_LABEL } from '../../lib/end-user.ts';
import { PER_KEY_BYTES } from '../../lib/intake.ts';
import { BODY_LIMITS } from '../../plugins/read-body.ts';
import type { Harness } from '../helpers/gateway.ts';
import { roomyHarness } from '../helpers/upstream.ts';

/**
 * The CPU time (all of this process's threads: the client, the gateway and the simulated router)
 * one of these requests may take. Quiet, the whole exchange takes a few tens of ms; the shapes it
 * guards took 5–30 s of CPU before. CPU time, not the loop's longest stall: on a busy machine a
 * stall also counts the time the process waited for a core (a stall of 337 ms was seen at load 15
 * for work of 40 ms), CPU time does not. The longest stall is printed beside it.
 */
const CPU_MS = 1500;

/** Resident memory of this process (the gateway runs in it), from /proc. */
function rssBytes(): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) * 1024;
}

/** Runs `fn`; returns what it returned, the process CPU time it took and the loop's longest stall meanwhile (ms). */
async function costOf<T>(fn: () => Promise<T>): Promise<{ value: T; cpuMs: number; stallMs: number }> {
  const h = monitorEventLoopDelay({ resolution: 5 });
  h.enable();
  const cpu = process.cpuUsage();
  try {
    const value = await fn();
    const used = process.cpuUsage(cpu);
    return { value, cpuMs: (used.user + used.system) / 1000, stallMs: h.max / 1e6 };
  } finally {
    h.disable();
  }
}

function post(h: Harness, key: string, path: string, body: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${h.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
    body,
  });
}

t.test('each shape: answered, within the stall bound, and bounded in what it stores', async (t) => {
  const { h, key } = await roomyHarness(t);
  let rows = 0;

  await t.test('16,000 one-word user turns after a system turn: merged in one pass', async (t) => {
    const messages = [{ role: 'system', content: 'be brief' }, ...Array.from({ length: 16_000 }, (_, i) => ({ role: 'user', content: `w${i}` }))];
    const body = JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 50, messages });
    const { value: res, cpuMs, stallMs } = await costOf(() => post(h, key, '/v1/messages', body).then(async (r) => ({ status: r.status, json: await r.json() })));
    t.equal(res.status, 200, JSON.stringify(res.json).slice(0, 200));
    t.ok(cpuMs < CPU_MS, `${cpuMs.toFixed(0)} ms of CPU (longest stall ${stallMs.toFixed(1)} ms)`);
    await h.rows(++rows);
    const sent = h.sim.received.at(-1)!.json;
    t.equal(sent.messages.length, 1, 'one user turn upstream');
    t.equal(sent.messages[0].content.length, 16_001, 'holding every block in order');
    t.same(sent.messages[0].content.at(-1), { type: 'text', text: 'w15999' });
  });

  await t.test('a models list of 80,000 entries: read until three are collected', async (t) => {
    // Three ids the router knows, then 79,997 distinct ones that would each cost a comparison with every id kept.
    const known = ['openai/gpt-4.1-mini', 'google/gemini-2.5-pro', 'anthropic/claude-sonnet-4.5'];
    const models = [...known, ...Array.from({ length: 79_997 }, (_, i) => `acme/model-${i}`)];
    const body = JSON.stringify({ model: 'sluice/fast', models, messages: [{ role: 'user', content: 'hi' }] });
    const { value: res, cpuMs, stallMs } = await costOf(() => post(h, key, '/v1/chat/completions', body).then(async (r) => ({ status: r.status, text: await r.text() })));
    t.equal(res.status, 200, res.text.slice(0, 300));
    t.ok(cpuMs < CPU_MS, `${cpuMs.toFixed(0)} ms of CPU (longest stall ${stallMs.toFixed(1)} ms)`);
    await h.rows(++rows);
    t.same(h.sim.received.at(-1)!.json.models, known);
    const line = h.logs.findLast((l) => l.msg === 'sanitized request')!;
    t.ok(JSON.stringify(line).length < 4096, 'the log line names the list without copying it');
  });

  await t.test('8 MiB of distinct top-level members: a 400 naming the bound, memory kept', async (t) => {
    const members: string[] = ['"model":"sluice/fast"'];
    for (let i = 0, size = 0; size < 8 * 1024 * 1024; i++) size += members[members.push(`"k${i}":0`) - 1]!.length + 1;
    const body = `{${members.join(',')}}`;
    const before = rssBytes();
    const { value: res, cpuMs, stallMs } = await costOf(() => post(h, key, '/v1/chat/completions', body).then(async (r) => ({ status: r.status, json: (await r.json()) as any })));
    t.equal(res.status, 400);
    t.match(res.json.error.message, `more than ${BODY_LIMITS.objectMembers.toLocaleString('en')} members`);
    t.ok(cpuMs < CPU_MS, `${cpuMs.toFixed(0)} ms of CPU (longest stall ${stallMs.toFixed(1)} ms)`);
    const grown = rssBytes() - before;
    t.ok(grown < 64 * 1024 * 1024, `resident memory grew ${(grown / 1024 / 1024).toFixed(0)} MiB (it grew 311 MiB before)`);
  });

  await t.test('a session id of 8 MB in a Claude Code blob: stored, rolled up and shown bounded', async (t) => {
    const session = 's'.repeat(8 * 1024 * 1024);
    const userId = JSON.stringify({ device_id: 'd'.repeat(64), account_uuid: '', session_id: session });
    const body = JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 20, metadata: { user_id: userId }, messages: [{ role: 'user', content: 'hi' }] });
    const { value: status, cpuMs, stallMs } = await costOf(() => post(h, key, '/v1/messages', body).then(async (r) => (await r.arrayBuffer(), r.status)));
    t.equal(status, 200);
    t.ok(cpuMs < CPU_MS, `${cpuMs.toFixed(0)} ms of CPU (longest stall ${stallMs.toFixed(1)} ms)`);
    const row = (await h.rows(++rows))[0]!;
    t.equal(row.session!.length, MAX_LABEL, 'the row holds a bounded session');
    t.ok(row.end_user!.length <= MAX_LABEL, 'and a bounded end user');
    const summary = await (await fetch(`${h.url}/api/summary`)).text();
    t.ok(summary.length < 512 * 1024, `the summary is ${summary.length} bytes`);
    t.notOk(summary.includes('s'.repeat(MAX_LABEL + 1)), 'no label in it is longer than the bound');
  });
});

t.test("slow bodies of one key are bounded before they are read; other keys go on", async (t) => {
  const { h, key, port } = await roomyHarness(t);
  const other = await h.key('roomy');
  const declared = 30 * 1024 * 1024;
  /** Opens a request declaring a 30 MiB body and sends its first 64 KiB only. */
  function slow(): Promise<{ socket: net.Socket; head: Promise<string> }> {
    return new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => {
        socket.write(`POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${key}\r\ncontent-type: application/json\r\ncontent-length: ${declared}\r\n\r\n`);
        socket.write(`{"model":"sluice/fast","pad":"${'a'.repeat(64 * 1024)}`);
        const head = new Promise<string>((done) => {
          let text = '';
          socket.on('data', (c) => (text += c.toString('latin1')));
          socket.on('close', () => done(text));
          socket.on('error', () => {});
        });
        resolve({ socket, head });
      });
    });
  }
  const held = Math.floor(PER_KEY_BYTES / declared);
  const open = [];
  for (let i = 0; i < held; i++) open.push(await slow());
  const refused = await slow();
  const head = await refused.head;
  t.match(head, /^HTTP\/1\.1 429 /, `the body past ${held} × 30 MiB is refused at once`);
  t.match(head, /"code":"rate_limit_exceeded"/);
  t.match(head, /arriving at once pass 64 MiB/);

  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${other}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(res.status, 200, 'another key of the same profile is served meanwhile');
  await res.arrayBuffer();
  for (const { socket } of open) socket.destroy();
});
