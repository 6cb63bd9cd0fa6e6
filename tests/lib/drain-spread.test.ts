// The drain's spread schedule (lib/lifecycle/drain.ts): the i-th of n connections open when the
// drain begins is due at i/n of the spread, by the clock it is given; the wait until the last is
// due; a connection outside the schedule is due at once. tests/e2e/drain.test.ts holds it over
// real connections.

import type { Socket } from 'node:net';
import t from 'tap';
import { spreadSchedule } from '../../lib/lifecycle/drain.ts';

const sockets = (n: number) => Array.from({ length: n }, () => ({}) as Socket);

t.test('four connections over a second: due at 0, 250, 500 and 750 ms, oldest first', async (t) => {
  const s = sockets(4);
  let now = 10_000;
  const { closes, lastDueMs } = spreadSchedule(s, now, 1000, () => now);
  t.equal(lastDueMs, 750);
  t.same(s.map(closes), [true, false, false, false], 'at the start: the oldest only');
  now += 249;
  t.same(s.map(closes), [true, false, false, false], 'just before 250 ms');
  now += 1;
  t.same(s.map(closes), [true, true, false, false], 'at 250 ms: the second too');
  now += 500;
  t.same(s.map(closes), [true, true, true, true], 'at 750 ms: every one');
});

t.test('one connection, none, or no spread: nothing to wait for', async (t) => {
  t.equal(spreadSchedule(sockets(1), 0, 1000, () => 0).lastDueMs, 0, 'a single connection is due at once');
  t.equal(spreadSchedule([], 0, 1000, () => 0).lastDueMs, 0, 'no connection');
  const s = sockets(3);
  const none = spreadSchedule(s, 0, 0, () => 0);
  t.equal(none.lastDueMs, 0);
  t.same(s.map(none.closes), [true, true, true], 'a spread of 0 tells every connection at once');
});

t.test('a connection outside the schedule is due at once', async (t) => {
  const { closes } = spreadSchedule(sockets(2), 0, 1000, () => 0);
  t.equal(closes({} as Socket), true);
});
