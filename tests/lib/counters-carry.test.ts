// Carrying the embedded counters to the next process: MemoryCounters.snapshot/absorb and
// CounterCarry (lib/counters/carry.ts) over a test directory. Several "processes" live in this one,
// each a MemoryCounters and a CounterCarry with its own pid, all on one settable clock; merges are
// driven by `poll` (one test uses the real directory watcher, awaiting its log line). Covered: the
// round trip, a key's window and the IP block carried (through Admission, as requests count them),
// the overlap of an upgrade (nothing added twice), entries, expiry, bad files, the file written.

import { EventEmitter } from 'node:events';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { Admission, AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_S, type Verdicts } from '../../lib/admission.ts';
import { CARRY_DIR, CARRY_FILE, CounterCarry, parseSnapshot, type WatchDir } from '../../lib/counters/carry.ts';
import { MemoryCounters, type CountersSnapshot } from '../../lib/counters/memory.ts';
import { createLogger } from '../../lib/log.ts';

const LIMITS = { per_key_per_minute: 60, per_user_per_minute: 10 };
const IP = '203.0.113.7';

function captureLog(onLine?: (l: Record<string, any>) => void) {
  const lines: Array<Record<string, any>> = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) {
        if (!l) continue;
        lines.push(JSON.parse(l));
        onLine?.(lines.at(-1)!);
      }
      cb();
    },
  });
  return { log: createLogger('debug', sink), lines };
}

/** One clock for every process of a test (they share the machine's). */
function clock(start = 1_700_000_000_000) {
  return { ms: start, now() { return this.ms; } };
}

type Clock = ReturnType<typeof clock>;

/** One gateway process: its counters, its carrier, its admission step and its log. */
function proc(t: Test, dir: string, pid: number, c: Clock, opts: { watch?: WatchDir; onLine?: (l: Record<string, any>) => void } = {}) {
  const counters = new MemoryCounters({ now: () => c.now() });
  t.teardown(() => counters.close());
  const { log, lines } = captureLog(opts.onLine);
  const carry = new CounterCarry({ counters, dataDir: dir, log, pid, watch: opts.watch });
  t.teardown(() => carry.close());
  const admission = new Admission({ counters, budget: { spendKeys: () => ['spend:day:p', 'spend:month:p'], observe() {} } });
  const admit = (keyId = 1, ip = '198.51.100.1') => admission.admit({ ip, keyId, limits: LIMITS, endUser: null, profile: 'p' }) as Verdicts;
  const keyCount = async (keyId = 1) => (await counters.peek(`rl:key:${keyId}`, LIMITS.per_key_per_minute, 60)).count;
  return { counters, carry, admission, admit, keyCount, lines };
}

const sorted = (s: CountersSnapshot) => ({ windows: [...s.windows].sort(), entries: [...s.entries].sort() });
const infos = (lines: Array<Record<string, any>>, msg: string) => lines.filter((l) => l.level === 30 && l.msg === msg);

t.test('snapshot and absorb: a round trip through JSON gives the same live windows and entries', async (t) => {
  const c = clock();
  const a = new MemoryCounters({ now: () => c.now() });
  const b = new MemoryCounters({ now: () => c.now() });
  t.teardown(() => Promise.all([a.close(), b.close()]));
  await a.consume('w', 5, 60, { points: 3 });
  await a.consume('blocked', 1, 60, { points: 2, blockS: 600 });
  await a.incr('spend', 1234, 3600);
  await a.setText('auto:s', 'fast', 1800);
  const snap = a.snapshot();
  t.equal(snap.v, 1);
  t.equal(snap.pid, process.pid);
  t.equal(snap.at, c.ms);
  t.strictSame(sorted(snap), {
    windows: [['5:60:0:w', 3, c.ms + 60_000], ['1:60:600:blocked', 2, c.ms + 600_000]].sort(),
    entries: [['auto:s', 'fast', c.ms + 1_800_000], ['spend', 1234, c.ms + 3_600_000]].sort(),
  });
  t.strictSame(b.absorb(JSON.parse(JSON.stringify(snap))), { windows: 2, entries: 2 });
  t.strictSame(sorted(b.snapshot()), sorted(snap), 'the absorbing process holds the same');
  t.equal(await b.getText('auto:s'), 'fast');
  t.equal(await b.get('spend'), 1234);

  c.ms += 60_000;
  t.strictSame(sorted(a.snapshot()).windows, [['1:60:600:blocked', 2, c.ms + 540_000]], 'an ended window is left out');
});

t.test('a key at 59 of its 60 a minute stays at 59 in the next process: the 60th allowed, the 61st refused', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const a = proc(t, dir, 1001, c);
  for (let i = 0; i < 59; i++) t.equal(a.admit().keyOver, false);
  await a.carry.write();
  c.ms += 20_000;
  const b = proc(t, dir, 1002, c);
  b.carry.load();
  t.equal(await b.keyCount(), 59);
  t.equal(b.admit().keyOver, false, 'the 60th is allowed');
  t.equal(b.admit().keyOver, true, 'the 61st is refused');
  t.ok(b.admission.keyFullHere(1, LIMITS), 'and this process now knows the key is full');
  t.equal((await b.counters.peek('rl:key:1', 60, 60)).msLeft, 40_000, 'the window ends when it ended in the first process');
  t.strictSame(infos(b.lines, 'counters carried over from the previous process').map((l) => [l.from, l.windows, l.entries]), [[1001, 1, 0]]);
});

t.test('check right after absorb refuses a window already over its limit', async (t) => {
  const c = clock();
  const a = new MemoryCounters({ now: () => c.now() });
  const b = new MemoryCounters({ now: () => c.now() });
  t.teardown(() => Promise.all([a.close(), b.close()]));
  await a.consume('k', 3, 60, { points: 4 });
  b.absorb(a.snapshot());
  t.notOk(b.refused('k', 3, 60), 'nothing noted before a read');
  const r = b.check([{ bucket: 'k', limit: 3, windowS: 60 }]);
  t.strictSame(r.verdicts, [{ allowed: false, count: 5, msLeft: 60_000 }]);
  t.ok(b.refused('k', 3, 60), 'the check noted the merged verdict');
});

t.test('an address blocked in one process (20 auth failures) is still blocked in the next, to the block\'s end', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const a = proc(t, dir, 1001, c);
  const b = proc(t, dir, 1002, c);
  // The next process counted 3 failures of its own first: its window started earlier than the block.
  for (let i = 0; i < 3; i++) t.equal((await b.admission.countAuthFailure(IP)).allowed, true);
  c.ms += 60_000;
  for (let i = 1; i < AUTH_FAILURE_LIMIT; i++) t.equal((await a.admission.countAuthFailure(IP)).allowed, true);
  t.equal((await a.admission.countAuthFailure(IP)).allowed, false, 'the 20th failure blocks');
  await a.carry.write();
  b.carry.load();
  t.equal(b.admit(1, IP).ipBlocked, true, 'blocked at the next request\'s counted step');
  t.ok(b.admission.blockedHere(IP), 'and known blocked from then on, before any I/O');
  const f = await b.admission.failures(IP);
  t.equal(f.count, AUTH_FAILURE_LIMIT + 3, 'both processes\' failures');
  t.equal(f.msLeft, AUTH_FAILURE_WINDOW_S * 1000, 'to the block\'s end, the later of the two windows\' ends');
  c.ms += AUTH_FAILURE_WINDOW_S * 1000 - 1;
  t.equal(b.admit(1, IP).ipBlocked, true, 'a millisecond before the end');
  c.ms += 1;
  t.equal(b.admit(1, IP).ipBlocked, false, 'open once the block ends');
});

t.test('an overlapping upgrade: P0\'s file, P1 and P2 both loaded it, P2 merges P1\'s drain and exit, nothing twice', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const p0 = proc(t, dir, 1000, c);
  for (let i = 0; i < 10; i++) p0.admit();
  await p0.counters.incr('spend:day:p', 100, 86_400);
  await p0.carry.write();

  c.ms += 1000;
  const p1 = proc(t, dir, 1001, c);
  p1.carry.load();
  for (let i = 0; i < 7; i++) p1.admit();
  await p1.counters.incr('spend:day:p', 50, 86_400);
  await p1.counters.consume('own', 100, 60, { points: 4 }); // a window P1 alone started

  c.ms += 1000;
  const p2 = proc(t, dir, 1002, c);
  p2.carry.load();
  for (let i = 0; i < 5; i++) p2.admit();
  await p2.counters.incr('spend:day:p', 30, 86_400);
  await p2.counters.consume('own', 100, 60, { points: 2 }); // the same id, started separately (another end)

  await p1.carry.write(); // P1's drain begins
  p2.carry.poll(); // what the watcher does on the file's event
  t.equal(await p2.keyCount(), 10 + 7 + 5, 'P0 + P1\'s own + P2\'s own');
  t.equal(await p2.counters.get('spend:day:p'), 100 + 50 + 30, 'spend likewise');
  const own = await p2.counters.peek('own', 100, 60);
  t.strictSame([own.count, own.msLeft], [6, 60_000], 'separate windows: summed, the later end kept');

  p2.carry.poll();
  t.equal(await p2.keyCount(), 22, 'the same snapshot read again adds nothing');

  for (let i = 0; i < 2; i++) p1.admit(); // in flight while P1 drains
  await p1.counters.incr('spend:day:p', 5, 86_400);
  await p1.counters.consume('own', 100, 60);
  await p1.carry.write(); // P1 exits
  p2.carry.poll();
  t.equal(await p2.keyCount(), 24, 'only what P1 counted since its drain began');
  t.equal(await p2.counters.get('spend:day:p'), 185);
  t.equal((await p2.counters.peek('own', 100, 60)).count, 7);
  t.strictSame(infos(p2.lines, 'counters merged from the previous process').map((l) => [l.from, l.seq]), [[1001, 2], [1001, 3]], 'P1 wrote above the seq it read (P0\'s 1)');

  await p2.carry.write(); // P2's own file: never merged into itself
  p2.carry.poll();
  t.equal(await p2.keyCount(), 24);
  t.equal(JSON.parse(readFileSync(join(dir, CARRY_DIR, CARRY_FILE), 'utf8')).seq, 4, 'and so did P2 (above P1\'s 3)');
});

t.test('entries: spend adds only its growth and never falls; a text entry never overwrites one held', async (t) => {
  const c = clock();
  const b = new MemoryCounters({ now: () => c.now() });
  t.teardown(() => b.close());
  await b.setText('auto:s1', 'fast', 1800);
  const end = c.ms + 3_600_000;
  const snap = (entries: CountersSnapshot['entries'], seq = 1): CountersSnapshot => ({ v: 1, pid: 1, seq, at: c.ms, windows: [], entries });
  const base = snap([['spend:a', 100, end], ['spend:b', 40, end]]);
  b.absorb(base);
  await b.incr('spend:a', 7, 3600);
  t.strictSame(
    b.absorb(snap([['spend:a', 130, end], ['spend:b', 25, end], ['spend:c', 9, end], ['auto:s1', 'reasoning', end], ['auto:s2', 'agent', end]], 2), base),
    { windows: 0, entries: 3 },
  );
  t.equal(await b.get('spend:a'), 137, 'base 100 + 30 grown there + 7 here');
  t.equal(await b.get('spend:b'), 40, 'lowered there (a correction): kept here');
  t.equal(await b.get('spend:c'), 9, 'new there: taken whole');
  t.equal(await b.getText('auto:s1'), 'fast', 'the session decided here stays');
  t.equal(await b.getText('auto:s2'), 'agent', 'a session known only there is taken');

  const other = end + 60_000;
  b.absorb(snap([['spend:a', 5, other]]), base);
  t.equal(await b.get('spend:a'), 142, 'another instance of the counter (another expiry): added whole');
  t.equal(b.snapshot().entries.find(([k]) => k === 'spend:a')![2], other, 'the later expiry kept');
});

t.test('expired windows and entries are not carried', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const a = proc(t, dir, 1001, c);
  for (let i = 0; i < 30; i++) a.admit();
  await a.counters.incr('spend:day:p', 10, 30);
  await a.carry.write();
  c.ms += 60_000;
  const b = proc(t, dir, 1002, c);
  b.carry.load();
  t.equal(await b.keyCount(), 0);
  t.equal(await b.counters.get('spend:day:p'), undefined);
  t.strictSame(b.counters.snapshot().windows, []);
  t.strictSame(infos(b.lines, 'counters carried over from the previous process').map((l) => [l.windows, l.entries]), [[0, 0]]);
});

t.test('a missing file is normal; a malformed or unreadable one is warned about once and ignored', async (t) => {
  const c = clock();
  const none = proc(t, t.testdir(), 1002, c);
  none.carry.load();
  none.carry.poll();
  t.strictSame(none.lines.map((l) => [l.level, l.msg]), [[30, 'no counters carried over from a previous process']]);

  const dir = t.testdir({ [CARRY_DIR]: { [CARRY_FILE]: '{"v":1,"pid":1001,' } });
  const bad = proc(t, dir, 1002, c);
  bad.carry.load();
  bad.carry.poll();
  bad.carry.poll();
  const warns = bad.lines.filter((l) => l.level === 40);
  t.equal(warns.length, 1, 'one warning');
  t.equal(warns[0]!.msg, 'the carried counters are malformed: ignored');
  t.strictSame(bad.counters.snapshot().windows, []);

  const unreadable = proc(t, t.testdir({ [CARRY_DIR]: { [CARRY_FILE]: {} } }), 1002, c); // a directory by that name
  unreadable.carry.load();
  t.strictSame(unreadable.lines.filter((l) => l.level === 40).map((l) => [l.msg, l.err.code]), [['the carried counters could not be read: ignored', 'EISDIR']]);

  t.match(parseSnapshot('[]'), /not an object|version/);
  t.equal(parseSnapshot('null'), 'not an object');
  t.equal(parseSnapshot('{"v":2}'), 'unknown version 2');
  t.equal(parseSnapshot('{"v":1,"pid":1,"seq":1,"at":1,"windows":[["w",1]],"entries":[]}'), 'a malformed window');
  t.equal(parseSnapshot('{"v":1,"pid":1,"seq":1,"at":1,"windows":[],"entries":[["e",null,1]]}'), 'a malformed entry');
  t.equal(parseSnapshot('{"v":1,"pid":"x","seq":1,"at":1,"windows":[],"entries":[]}'), 'pid, seq or at missing');
  t.equal(parseSnapshot('{"v":1,"pid":1,"seq":1,"at":1,"windows":{}}'), 'windows or entries missing');
});

t.test('the file is written whole: a rename of a 0600 temporary file, none left behind; a failure is logged', async (t) => {
  const dir = t.testdir({ [CARRY_DIR]: { [`${CARRY_FILE}.1001.tmp`]: 'left by a crash' }, 'a-file': 'not a directory' });
  const c = clock();
  const a = proc(t, dir, 1001, c);
  a.admit();
  await a.carry.write();
  await a.carry.write();
  t.strictSame(readdirSync(join(dir, CARRY_DIR)), [CARRY_FILE], 'no temporary file left');
  t.equal(statSync(join(dir, CARRY_DIR, CARRY_FILE)).mode & 0o777, 0o600);
  const snap = JSON.parse(readFileSync(join(dir, CARRY_DIR, CARRY_FILE), 'utf8'));
  t.strictSame([snap.pid, snap.seq, snap.windows.length], [1001, 2, 1]);

  const gone = proc(t, join(dir, 'a-file'), 1001, c); // a data directory that cannot hold the folder
  await gone.carry.write(); // resolves: the failure is logged, not thrown
  t.strictSame(gone.lines.map((l) => [l.level, l.msg]), [[50, 'the counters could not be written for the next process']]);
});

t.test('write takes the counts at its call and writes off the event loop, in order; an unchanged file is read once', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const a = proc(t, dir, 1001, c);
  a.admit();
  const first = a.carry.write();
  a.admit(); // counted after the first write began: in the second only
  const second = a.carry.write();
  const file = join(dir, CARRY_DIR, CARRY_FILE);
  await first;
  const snap1 = JSON.parse(readFileSync(file, 'utf8'));
  t.strictSame([snap1.seq, snap1.windows[0][1]], [1, 1], 'the first write holds the count at its call');
  await second;
  const snap2 = JSON.parse(readFileSync(file, 'utf8'));
  t.strictSame([snap2.seq, snap2.windows[0][1]], [2, 2], 'then the second, over it');
  t.strictSame(readdirSync(join(dir, CARRY_DIR)), [CARRY_FILE]);

  const b = proc(t, dir, 1002, c);
  b.carry.poll();
  b.carry.poll(); // a second event for the same rename
  t.equal(await b.keyCount(), 2);
  t.equal(infos(b.lines, 'counters merged from the previous process').length, 1, 'merged once');
  a.admit();
  await a.carry.write();
  b.carry.poll();
  t.equal(await b.keyCount(), 3, 'a new write is read');
});

t.test('watch: merges on the carry folder\'s events for the file, ignores other names, logs a failing watcher once', async (t) => {
  const dir = t.testdir({ 'a-file': 'not a directory' });
  const c = clock();
  const watcher = Object.assign(new EventEmitter(), { closed: 0, close() { this.closed++; } });
  let onChange!: (filename: string | null) => void;
  const p1 = proc(t, dir, 1001, c);
  const p2 = proc(t, dir, 1002, c, { watch: (d, fn) => { t.equal(d, join(dir, CARRY_DIR), 'its own folder, not the data directory SQLite writes in'); onChange = fn; return watcher; } });
  p2.carry.watch();
  p2.carry.watch(); // once is enough
  p1.admit();
  await p1.carry.write();
  onChange('counters.json.1001.tmp');
  t.equal(await p2.keyCount(), 0, 'another name: not read');
  onChange(CARRY_FILE);
  t.equal(await p2.keyCount(), 1);
  p1.admit();
  await p1.carry.write();
  onChange(null);
  t.equal(await p2.keyCount(), 2, 'no name given: read');
  watcher.emit('error', new Error('inotify gone'));
  watcher.emit('error', new Error('inotify gone'));
  t.strictSame(p2.lines.filter((l) => l.level === 40).map((l) => l.err.message), ['inotify gone']);
  p2.carry.close();
  p2.carry.close();
  t.equal(watcher.closed, 1);

  const missing = proc(t, join(dir, 'a-file'), 1003, c);
  t.doesNotThrow(() => missing.carry.watch(), 'a folder that cannot be made');
  t.equal(missing.lines.filter((l) => l.level === 40).length, 1);
});

t.test('watch with the real directory watcher: another process\'s write is merged', async (t) => {
  const dir = t.testdir();
  const c = clock();
  const p1 = proc(t, dir, 1001, c);
  let merged!: () => void;
  const done = new Promise<void>((resolve) => (merged = resolve));
  const p2 = proc(t, dir, 1002, c, { onLine: (l) => l.msg === 'counters merged from the previous process' && merged() });
  p2.carry.watch();
  // Keeps the event loop alive while the watcher (not persistent) waits, and fails rather than hangs.
  const guard = setTimeout(() => { t.fail('no merge within 10 s'); merged(); }, 10_000);
  for (let i = 0; i < 3; i++) p1.admit();
  await p1.carry.write();
  await done;
  clearTimeout(guard);
  t.equal(await p2.keyCount(), 3);
});
