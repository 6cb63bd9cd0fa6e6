// The drain's spread (lib/lifecycle/drain.ts): n connections get n steps of the spread, by the
// clock it is given; in each step the first connection asked about is told, the others wait for a
// later step, a told one stays told, and a step nobody asks in passes unused; a single connection
// or no spread tells at once. tests/e2e/drain.test.ts holds it over real connections.

import type { Socket } from 'node:net';
import t from 'tap';
import { spreadSteps } from '../../lib/lifecycle/drain.ts';

const sockets = (n: number) => Array.from({ length: n }, () => ({}) as Socket);

t.test('four connections over a second: one told in each 250 ms step, whichever answers first', async (t) => {
  const [a, b, c, d] = sockets(4);
  let now = 10_000;
  const { closes, lastStepMs } = spreadSteps(4, now, 1000, () => now);
  t.equal(lastStepMs, 750);
  t.equal(closes(c!), true, 'the first asked about in the first step is told');
  t.same([a, b, d].map((s) => closes(s!)), [false, false, false], 'and no other in that step');
  t.equal(closes(c!), true, 'a told connection stays told');
  now += 249;
  t.equal(closes(a!), false, 'just before 250 ms: still the first step');
  now += 1;
  t.equal(closes(a!), true, 'at 250 ms: the next one asked about');
  t.equal(closes(b!), false, 'one a step, though b was due too');
  now += 500;
  t.equal(closes(b!), true, 'at 750 ms');
  t.equal(closes(d!), false, 'the steps at 500 ms passed unused: a step is not saved for later');
});

t.test('a client pool that moves its requests along its connections is moved one connection a step', async (t) => {
  // The pool sends each request on its first connection not told yet (a told one is reconnecting
  // to the new process), at 700 a second: every connection is asked about as soon as the one
  // before it is told. Due times would tell each one past its time in turn, a burst.
  const conns = sockets(32);
  let now = 0;
  const { closes } = spreadSteps(32, 0, 1000, () => now);
  const toldAt: number[] = [];
  const told = new Set<Socket>();
  for (let i = 0; i * 1.4 < 1000; i++) {
    now = i * 1.4;
    const next = conns.find((s) => !told.has(s));
    if (next === undefined) break;
    if (closes(next)) {
      told.add(next);
      toldAt.push(now);
    }
  }
  t.equal(toldAt.length, 32, 'every connection within the spread');
  t.ok(toldAt.every((ms, i) => i === 0 || Math.floor(ms / 31.25) > Math.floor(toldAt[i - 1]! / 31.25)), 'never two in one 31.25 ms step');
});

t.test('one connection, none, or no spread: told at once', async (t) => {
  const [a, b, c] = sockets(3);
  t.equal(spreadSteps(1, 0, 1000, () => 0).lastStepMs, 0, 'a single connection is told at once');
  t.equal(spreadSteps(1, 0, 1000, () => 0).closes(a!), true);
  t.equal(spreadSteps(0, 0, 1000, () => 0).lastStepMs, 0, 'no connection');
  const none = spreadSteps(3, 0, 0, () => 0);
  t.equal(none.lastStepMs, 0);
  t.same([a, b, c].map((s) => none.closes(s!)), [true, true, true], 'a spread of 0 tells every connection at once');
});
