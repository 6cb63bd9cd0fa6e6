// The shared loop scheduler: driven by fake timers, never by sleeping. An outage is logged once
// and its end once; retries back off (doubling, capped); runs never overlap; stop() waits.

import { Writable } from 'node:stream';
import t from 'tap';
import { createLogger } from '../../lib/log.ts';
import { Loop, OnceLog, realTimers, type Timers } from '../../lib/upstream/loop.ts';

function capture() {
  const lines: Array<Record<string, any>> = [];
  const log = createLogger('debug', new Writable({ write(c, _e, cb) { for (const l of String(c).split('\n').filter(Boolean)) lines.push(JSON.parse(l)); cb(); } }));
  return { log, lines };
}

/** Timers that fire only when the test says so. */
function fakeTimers() {
  const pending: Array<{ fn: () => void; ms: number; id: number }> = [];
  let seq = 0;
  const timers: Timers = {
    setTimeout: (fn, ms) => { pending.push({ fn, ms, id: ++seq }); return seq; },
    clearTimeout: (h) => { const i = pending.findIndex((p) => p.id === h); if (i >= 0) pending.splice(i, 1); },
  };
  return { timers, pending, fire: () => pending.shift()!.fn() };
}

t.test('an outage is logged once, its end once, with backoff between', async (t) => {
  const { log, lines } = capture();
  const f = fakeTimers();
  let down = true;
  let runs = 0;
  let done: () => void = () => {};
  const loop = new Loop({
    name: 'test loop', log, everyMs: 1000, firstMs: 10, maxBackoffMs: 5000, timers: f.timers,
    run: async () => {
      runs++;
      done();
      if (down) throw new Error('router away');
    },
  });
  loop.start();
  loop.start(); // a second start is a no-op
  t.strictSame(f.pending.map((p) => p.ms), [10], 'first run after firstMs');
  const delays: number[] = [];
  for (let i = 0; i < 5; i++) {
    const ran = new Promise<void>((r) => (done = r));
    f.fire();
    await ran;
    await new Promise((r) => setImmediate(r));
    delays.push(f.pending[0].ms);
  }
  t.strictSame(delays, [2000, 4000, 5000, 5000, 5000], 'doubling backoff, capped');
  const failing = lines.filter((l) => l.msg === 'test loop: failing; retrying with backoff (logged once until it works again)');
  t.equal(failing.length, 1, 'five failures, one line');
  t.equal(failing[0].err.message, 'router away', 'the error itself, its stack with it');
  t.type(failing[0].err.stack, 'string');
  t.equal(failing[0].level, 40);
  down = false;
  t.equal(await loop.runOnce(), true);
  t.equal(loop.nextDelay(), 1000, 'back to the period');
  t.equal(lines.filter((l) => l.msg === 'test loop: working again').length, 1);
  t.equal(lines.find((l) => l.msg === 'test loop: working again')!.failures, 5);
  t.equal(await loop.runOnce(), true);
  t.equal(lines.filter((l) => l.msg === 'test loop: working again').length, 1, 'said once');
  t.equal(runs, 7);
  t.equal(loop.rounds, 7);
  await loop.stop();
  t.equal(f.pending.length, 0, 'stop clears the timer');
});

t.test('runs never overlap, and stop() waits for the one in progress', async (t) => {
  const { log } = capture();
  let release!: () => void;
  let active = 0;
  let maxActive = 0;
  const loop = new Loop({
    name: 'slow', log, everyMs: 60_000, timers: fakeTimers().timers,
    run: async () => {
      active++;
      maxActive = Math.max(maxActive, active);
      await new Promise<void>((r) => (release = r));
      active--;
    },
  });
  loop.start();
  const a = loop.runOnce();
  const b = loop.runOnce();
  t.equal(a, b, 'a second runOnce joins the first');
  let stopped = false;
  const stopping = loop.stop().then(() => (stopped = true));
  await new Promise((r) => setImmediate(r));
  t.equal(stopped, false, 'stop waits for the run');
  release();
  await stopping;
  t.equal(stopped, true);
  t.equal(maxActive, 1);
});

t.test('real timers are unref\'d and a stopped loop schedules nothing', async (t) => {
  const { log } = capture();
  let runs = 0;
  const loop = new Loop({ name: 'real', log, everyMs: 5, run: async () => void runs++ });
  loop.start();
  const deadline = Date.now() + 5000;
  while (runs < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  t.ok(runs >= 3, 'runs on its own');
  await loop.stop();
  const after = runs;
  const h = realTimers.setTimeout(() => {}, 50) as NodeJS.Timeout;
  t.equal(h.hasRef(), false, 'unref\'d');
  realTimers.clearTimeout(h);
  await new Promise((r) => setTimeout(r, 30));
  t.equal(runs, after, 'nothing ran after stop');
});

t.test('OnceLog: one line per key until it is well', async (t) => {
  const { log, lines } = capture();
  const once = new OnceLog(log);
  once.ok('a', 'fine'); // never down: nothing
  once.problem('a', 'bad', { k: 'a' });
  once.problem('a', 'bad', { k: 'a' });
  once.problem('b', 'bad', { k: 'b' });
  t.equal(once.isDown('a'), true);
  once.ok('a', 'fine again');
  t.equal(once.isDown('a'), false);
  t.strictSame(lines.map((l) => [l.msg, l.k ?? l.failures]), [['bad', 'a'], ['bad', 'b'], ['fine again', 2]]);
});
