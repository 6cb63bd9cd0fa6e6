// The recorder (lib/recorder.ts) over the SQLite store behind a wrapper whose insertRequests fails
// on demand: batching and the flush interval; a failing store → rows held in memory → spooled past
// memoryLimit → replayed once it works, each row exactly once even when a replay is cut short;
// close() during an outage spools everything; torn spool lines; a spool left by an earlier process.

import { randomUUID } from 'node:crypto';
import { EventEmitter, once } from 'node:events';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import t, { type Test } from 'tap';
import { createLogger } from '../../lib/log.ts';
import { Recorder } from '../../lib/recorder.ts';
import { openStore } from '../../lib/store/open.ts';
import type { RequestRow, Store } from '../../lib/store/store.ts';

const SPOOL = 'requests-spool.jsonl';

function requestRow(over: Partial<RequestRow> = {}): RequestRow {
  return {
    id: randomUUID(), ts: new Date().toISOString(), endpoint: 'chat', profile: 'dev', key_prefix: 'sluice_dev_…abcd',
    end_user: null, session: null, run: null, tier: 'fast', requested_model: 'sluice/fast', model: 'google/gemini-2.5-flash',
    stream: true, status: 200, outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0,
    reasoning_tokens: 0, cost_usd: 0.00002, cost_source: 'upstream', provider: 'Google', degradation: 'none',
    generation_id: `gen-${randomUUID()}`, ttfb_ms: 3, duration_ms: 9, overhead_ms: 0.4, tools: [], ...over,
  };
}

interface Setup {
  dir: string;
  /** The store the recorder writes to; its insertRequests fails while `fail` says so. */
  store: Store;
  /** The SQLite store underneath (what really landed). */
  inner: Store;
  /** true: every insert fails; a function: decides per call (1-based call number). */
  fail: boolean | ((rows: RequestRow[], call: number) => boolean);
  /** Set: inserts wait for this promise before doing anything (a store that does not answer). */
  hold?: Promise<void>;
  /** The ids offered to insertRequests, per call, failed calls included. */
  calls: string[][];
  /** 'inserted'(rows) after a successful insert, 'failed'(rows) after a refused one. */
  events: EventEmitter;
  logs: Array<Record<string, any>>;
  recorder(opts?: { flushMs?: number; batch?: number; memoryLimit?: number; closeWaitMs?: number }): Recorder;
  /** Ids of every row stored, sorted. */
  storedIds(): Promise<string[]>;
  spoolFiles(): string[];
  /** Ids of the rows in every spool file (claimed ones included), sorted. */
  spooledIds(): string[];
}

async function setup(t: Test): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-recorder-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const inner = await openStore({ dataDir: dir });
  t.teardown(() => inner.close());
  const lines: string[] = [];
  const log = createLogger('info', new Writable({
    write(chunk, _enc, cb) {
      lines.push(...String(chunk).split('\n').filter(Boolean));
      cb();
    },
  }));
  const s: Setup = {
    dir, inner, fail: false, calls: [], events: new EventEmitter(),
    store: {
      ...inner,
      async insertRequests(rows) {
        const call = s.calls.push(rows.map((r) => r.id));
        if (s.hold) await s.hold;
        if (typeof s.fail === 'function' ? s.fail(rows, call) : s.fail) {
          s.events.emit('failed', rows);
          throw new Error('connect ECONNREFUSED (test)');
        }
        await inner.insertRequests(rows);
        s.events.emit('inserted', rows);
      },
    },
    get logs() {
      return lines.map((l) => JSON.parse(l));
    },
    recorder(opts = {}) {
      const r = new Recorder({ store: s.store, log, dataDir: dir, ...opts });
      t.teardown(() => r.close());
      return r;
    },
    async storedIds() {
      return (await inner.listRequests(10_000)).map((r) => r.id).sort();
    },
    spoolFiles: () => readdirSync(dir).filter((f) => f.startsWith(SPOOL)),
    spooledIds: () => s.spoolFiles()
      .flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).id as string))
      .sort(),
  };
  return s;
}

/** Waits for a round that begins after this call (an earlier round may still be in flight). */
async function freshRound(r: Recorder): Promise<void> {
  await r.flush();
  await r.flush();
}

const ids = (rows: RequestRow[]) => rows.map((r) => r.id).sort();

t.test('rows go to the store in batches', async (t) => {
  const s = await setup(t);
  const r = s.recorder({ flushMs: 20, batch: 3 });
  await r.flush(); // the start-up spool check, so only the rows below reach insertRequests
  const rows = Array.from({ length: 7 }, () => requestRow());
  for (const row of rows) r.add(row);
  while (s.calls.flat().length < 7) await once(s.events, 'inserted');
  t.same(s.calls.map((c) => c.length), [3, 3, 1], 'a full batch is written at once, the rest follows');
  t.same(await s.storedIds(), ids(rows));

  s.calls.length = 0;
  const few = [requestRow(), requestRow()];
  for (const row of few) r.add(row);
  await once(s.events, 'inserted');
  t.same(s.calls.map((c) => c.length), [2], 'rows queued within one interval share one write');
  t.equal(r.written, 9);
  t.equal(r.pending, 0);
});

t.test('under load the next write waits for the interval: rows arriving during a write are not a write of their own', async (t) => {
  const s = await setup(t);
  // A long interval: nothing in this test is written by the timer.
  const r = s.recorder({ flushMs: 60_000, batch: 50 });
  await r.flush();
  let release!: () => void;
  s.hold = new Promise<void>((resolve) => (release = resolve));
  r.add(requestRow());
  const first = r.flush();
  const during = Array.from({ length: 30 }, () => requestRow());
  for (const row of during) r.add(row); // while the first write is out
  release();
  s.hold = undefined;
  await first;
  t.same(s.calls.map((c) => c.length), [1], 'the first write answered, and no write followed it at once');
  t.equal(r.pending, 30, 'its followers wait for the interval');
  await r.flush();
  t.same(s.calls.map((c) => c.length), [1, 30], 'then go together');

  // A full batch does not wait: the write after the one in flight begins as that one ends.
  s.calls.length = 0;
  s.hold = new Promise<void>((resolve) => (release = resolve));
  r.add(requestRow());
  const second = r.flush();
  const many = Array.from({ length: 60 }, () => requestRow());
  for (const row of many) r.add(row);
  release();
  s.hold = undefined;
  await second;
  while (s.calls.flat().length < 61) await once(s.events, 'inserted');
  t.same(s.calls.map((c) => c.length), [1, 50, 10], 'the batch and the rest of its round went at once');
  await r.flush();
  t.equal(r.pending, 0);
  t.equal(s.calls.length, 3, 'a flush with nothing queued writes nothing');
});

t.test('a row is written when the flush interval ends, not at once', async (t) => {
  const s = await setup(t);
  const r = s.recorder({ flushMs: 100 });
  await r.flush();
  // Timers set in one turn fire in the order they end, however late the process runs them: these
  // two bracket the recorder's 100 ms one, where a stopwatch would measure the machine's load.
  const writes: number[] = [];
  const look = () => writes.push(s.calls.length);
  setTimeout(look, 50);
  r.add(requestRow());
  const after = new Promise<void>((resolve) => setTimeout(() => resolve(void look()), 150));
  const inserted = once(s.events, 'inserted');
  await after;
  t.same(writes, [0, 1], 'no write before the interval ended, one as it did');
  await inserted;
  t.equal(r.pending, 0, 'and the row landed');
});

t.test('a failing store: rows wait in memory, spill to the spool past memoryLimit, then all land once', async (t) => {
  const s = await setup(t);
  const r = s.recorder({ flushMs: 10, memoryLimit: 4 });
  await r.flush();
  s.fail = true;
  const rows = Array.from({ length: 7 }, () => requestRow());
  for (const row of rows.slice(0, 3)) r.add(row);
  await freshRound(r);
  t.equal(r.pending, 3, 'held in memory');
  t.same(s.spoolFiles(), [], 'nothing spooled while within memoryLimit');

  for (const row of rows.slice(3, 6)) r.add(row);
  await freshRound(r);
  t.equal(s.spoolFiles().length, 1, 'past memoryLimit the rows go to the spool file');
  t.same(s.spooledIds(), ids(rows.slice(0, 6)), 'every held row is in it');
  t.equal(r.pending, 6, 'spooled rows still count as pending');

  r.add(rows[6]);
  await freshRound(r);
  t.equal(r.pending, 7);
  t.same(await s.storedIds(), [], 'nothing reached the store');

  // The store returns; no further traffic: the recorder's own retry writes everything.
  s.fail = false;
  while ((await s.storedIds()).length < 7) await once(s.events, 'inserted');
  await freshRound(r);
  t.same(await s.storedIds(), ids(rows), 'every row stored exactly once');
  t.equal(r.pending, 0);
  t.same(s.spoolFiles(), [], 'the spool is gone');
  t.equal(s.logs.filter((l) => l.msg.startsWith('store unreachable')).length, 1, 'the outage is logged once, not per retry');
  t.ok(s.logs.some((l) => l.msg.startsWith('store reachable again')));
});

t.test('a replay cut short is retried and writes each row exactly once', async (t) => {
  const s = await setup(t);
  const first = s.recorder({ memoryLimit: 1000 });
  await first.flush();
  s.fail = true;
  const rows = Array.from({ length: 6 }, () => requestRow());
  for (const row of rows) first.add(row);
  await first.close();
  t.same(s.spooledIds(), ids(rows));

  s.calls.length = 0;
  // The second batch of the replay fails once: the first already landed.
  let failedOnce = false;
  s.fail = (_rows, call) => call === 2 && !failedOnce && (failedOnce = true);
  const r = s.recorder({ batch: 2 });
  await r.flush();
  t.equal(s.calls.length, 2, 'the replay stopped at the failing batch');
  t.equal((await s.storedIds()).length, 2, 'the first batch landed');
  t.equal(s.spoolFiles().length, 1, 'the spool (claimed for replay) stays for the retry');
  t.ok(s.logs.some((l) => l.msg === 'spool replay failed; will retry'));

  await r.flush();
  t.same(await s.storedIds(), ids(rows), 'all six stored, none twice');
  t.same(s.calls.slice(2).flat().sort(), ids(rows), 'the retry offered every row again; row ids kept the first two single');
  t.same(s.spoolFiles(), [], 'the replayed spool is removed');
  t.equal(r.pending, 0);
});

t.test('close() during an outage spools every held row', async (t) => {
  const s = await setup(t);
  const r = s.recorder({ memoryLimit: 1000 });
  await r.flush();
  s.fail = true;
  const rows = Array.from({ length: 4 }, () => requestRow());
  for (const row of rows) r.add(row);
  await r.close();
  t.same(s.spoolFiles(), [SPOOL]);
  t.same(s.spooledIds(), ids(rows), 'the spool holds exactly the unwritten rows');
  t.equal(r.pending, 4);
  t.same(await s.storedIds(), []);
  t.ok(s.logs.some((l) => l.msg === 'request rows spooled to disk' && l.rows === 4));
});

t.test('close() with a store that does not answer spools the rows of the write in flight, and they land once', async (t) => {
  const s = await setup(t);
  const r = s.recorder({ closeWaitMs: 200 });
  await r.flush();
  let answer!: () => void;
  s.hold = new Promise<void>((resolve) => (answer = resolve));
  const rows = Array.from({ length: 3 }, () => requestRow());
  for (const row of rows) r.add(row);
  void r.flush(); // the write is now in flight, and the store does not answer
  await r.close();
  t.same(s.spooledIds(), ids(rows), 'close() gave up waiting and spooled the rows in flight');
  // The store answers after all: the write lands, and the spool's replay skips those ids.
  s.hold = undefined;
  answer();
  await r.flush(); // the round that was in flight, and its replay of the spool
  t.same(await s.storedIds(), ids(rows), 'each row stored once');
  t.same(s.spoolFiles(), [], 'the spool was replayed');
});

t.test('a spool left by an earlier process is replayed by the first flush, with no traffic', async (t) => {
  const s = await setup(t);
  const earlier = s.recorder();
  await earlier.flush();
  s.fail = true;
  const rows = Array.from({ length: 3 }, () => requestRow());
  for (const row of rows) earlier.add(row);
  await earlier.close();
  t.ok(existsSync(join(s.dir, SPOOL)));

  s.fail = false;
  const r = s.recorder();
  r.start(); // what the server does at start-up: no add, no flush call, the spool is found
  await once(s.events, 'inserted');
  await r.flush(); // joins the round in flight, so its clean-up is done
  t.same(await s.storedIds(), ids(rows));
  t.same(s.spoolFiles(), []);
  t.ok(s.logs.some((l) => l.msg === 'spooled request rows written' && l.rows === 3));
});

t.test('a torn last line in the spool is skipped', async (t) => {
  const s = await setup(t);
  const whole = [requestRow(), requestRow()];
  const torn = JSON.stringify(requestRow()).slice(0, 57);
  writeFileSync(join(s.dir, SPOOL), whole.map((r) => JSON.stringify(r)).join('\n') + '\n' + torn);
  const r = s.recorder();
  await r.flush();
  t.same(await s.storedIds(), ids(whole), 'the whole rows are stored; the torn one is not');
  t.same(s.spoolFiles(), []);
  t.equal(r.pending, 0);
});

t.test('rows appended to a spool whose last line is torn survive', async (t) => {
  const s = await setup(t);
  const r = s.recorder();
  await r.flush(); // start-up check done: the spool below is not claimed for replay before the append
  const whole = requestRow();
  writeFileSync(join(s.dir, SPOOL), JSON.stringify(whole) + '\n' + JSON.stringify(requestRow()).slice(0, 40));
  s.fail = true;
  const later = [requestRow(), requestRow()];
  for (const row of later) r.add(row);
  await r.close();

  s.fail = false;
  await s.recorder().flush();
  t.same(await s.storedIds(), ids([whole, ...later]), 'the first row appended is not glued to the torn line');
  t.same(s.spoolFiles(), []);
});
