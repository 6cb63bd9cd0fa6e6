// The socket holder (tests/helpers/socket-holder.ts) on its own, with a stand-in generation (a
// node process listening on fd 3 that answers each connection with its pid and LISTEN_* variables):
// a connection made before any generation exists waits in the queue and is served by the first
// one (so the holder never accepted it); each generation gets fd 3 with LISTEN_FDS=1 and its own
// pid as LISTEN_PID; the socket outlives every generation; close() lets go of it; and when the
// process that started the holder dies (a test killed on a timeout), its generations die with it.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import t from 'tap';
import { startSocketHolder, type Generation } from '../helpers/socket-holder.ts';
import { until } from '../helpers/processes.ts';

const STAND_IN = `
const net = require('node:net');
const env = { LISTEN_FDS: process.env.LISTEN_FDS, LISTEN_PID: process.env.LISTEN_PID };
const server = net.createServer((c) => c.end(JSON.stringify({ pid: process.pid, ...env })));
server.listen({ fd: 3 }, () => console.log(JSON.stringify({ msg: 'ready', port: server.address().port })));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
`;

/** Connects (the kernel completes it from the queue whether or not anyone accepts) and resolves with the whole answer. */
function connectAndRead(port: number): { connected: Promise<void>; answer: Promise<any> } {
  const socket = net.connect(port, '127.0.0.1');
  const connected = new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  const answer = new Promise<any>((resolve, reject) => {
    let text = '';
    socket.setEncoding('utf8').on('data', (c: string) => (text += c));
    socket.once('end', () => resolve(JSON.parse(text)));
    socket.once('error', reject);
  });
  answer.catch(() => {});
  return { connected, answer };
}

t.test('the holder keeps one socket across generations and never accepts on it', async (t) => {
  const holder = await startSocketHolder({ argv: [process.execPath, '-e', STAND_IN], readyMsg: 'ready' });
  let closed = false;
  t.teardown(() => (closed ? undefined : holder.close()));
  const env = { PATH: process.env.PATH };

  const early = connectAndRead(holder.port);
  await early.connected;
  const g1 = holder.spawnGeneration(env, 'g1');
  const ready1 = await g1.ready;
  t.equal(ready1.port, holder.port, 'the generation listens on the holder\'s port');
  t.same(await early.answer, { pid: g1.pid, LISTEN_FDS: '1', LISTEN_PID: String(g1.pid) },
    'a connection made before any generation existed is served by the first: the holder left it in the queue');

  const g2 = holder.spawnGeneration(env, 'g2');
  await g2.ready;
  g1.term();
  t.same(await g1.exited.then((e) => [e.code, e.signal]), [0, null], 'g1 closed its copy and exited 0');
  const afterG1 = await connectAndRead(holder.port).answer;
  t.same(afterG1, { pid: g2.pid, LISTEN_FDS: '1', LISTEN_PID: String(g2.pid) }, 'after g1 left, g2 serves: the socket outlived g1');

  g2.term();
  await g2.exited;
  const between = connectAndRead(holder.port);
  await between.connected;
  const g3: Generation = holder.spawnGeneration(env, 'g3');
  await g3.ready;
  t.equal((await between.answer).pid, g3.pid, 'with no generation running, a connection waits for the next one');

  await holder.close();
  closed = true;
  t.same(g3.signals, ['SIGKILL'], 'close() ended the generation still running');
  const refused = await new Promise<string>((resolve) => {
    const s = net.connect(holder.port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
  t.equal(refused, 'ECONNREFUSED', 'after close() nobody holds the socket');
});

/** Whether `pid` is gone (or a zombie nobody has reaped yet: dead all the same). */
function gone(pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/^.*\) /s, '').startsWith('Z');
  } catch {
    return true;
  }
}

t.test('a generation dies with the process that started it, and so does the holder', async (t) => {
  const HOLDER = new URL('../helpers/socket-holder.ts', import.meta.url).pathname;
  // A parent that starts a holder and one generation, prints their pids, then waits to be killed.
  const parent = spawn(process.execPath, ['--input-type=module', '-e', `
    const { startSocketHolder } = await import(${JSON.stringify(HOLDER)});
    const holder = await startSocketHolder({ argv: [process.execPath, '-e', ${JSON.stringify(STAND_IN)}], readyMsg: 'ready' });
    const g = holder.spawnGeneration({ PATH: process.env.PATH });
    await g.ready;
    console.log(JSON.stringify({ generation: g.pid, holder: holder.pid, port: holder.port }));
  `], { stdio: ['ignore', 'pipe', 'inherit'] });
  t.teardown(() => void parent.kill('SIGKILL'));
  const [first] = (await once(parent.stdout!.setEncoding('utf8'), 'data')) as [string];
  const { generation, holder, port } = JSON.parse(first);
  t.equal((await connectAndRead(port).answer).pid, generation, 'the generation serves');
  parent.kill('SIGKILL');
  await once(parent, 'exit');
  await until('the generation to die with its parent', async () => gone(generation));
  t.ok(gone(generation), 'SIGKILLed with its parent (PR_SET_PDEATHSIG)');
  await until('the holder to leave once its stdin closed', async () => gone(holder));
  const after = await new Promise<string>((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve('connected');
    });
    s.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
  t.equal(after, 'ECONNREFUSED', 'the holder left too (its stdin closed): nobody holds the socket');
});
