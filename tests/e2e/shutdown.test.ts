// Stopping without loss, with real `sluice serve` processes on Postgres + Redis: SIGTERM with 100
// streams open lets the short ones finish and ends the rest with one error event of their dialect
// when SLUICE_SHUTDOWN_GRACE_S is over, writes every row and exits 0; during a Postgres outage the
// rows are spooled and the next start writes them; a second signal ends the grace period at once
// and still flushes; a SIGKILL loses at most the rows of the requests in flight.

import http from 'node:http';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { streamCall, streamEnding, type Dialect } from '../../bench/stream-client.ts';
import { startBackings, until, type Backings, type GatewayProcess } from '../helpers/processes.ts';

const BULK = `  bulk:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1000, monthly_usd: 10000 }
    rate_limits: { per_key_per_minute: 100000, per_user_per_minute: 100000 }
`;
const BULK_ENV = { SLUICE_UPSTREAM_KEY_BULK: 'sk-or-v1-bulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulk04' };
const SHORT = 'chunks=8;chunk-delay-ms=50'; // ends ~0.4 s after it began: within the grace
const LONG = 'chunks=400;chunk-delay-ms=50'; // ~20 s: outlives the grace

interface OpenStream {
  dialect: Dialect;
  /** Resolves once the response headers and first bytes arrived (the stream is open). */
  begun: Promise<void>;
  /** Resolves with the whole text and whether the connection ended cleanly. */
  ended: Promise<{ status: number; text: string; error?: string }>;
}

/** A streamed request that reports when it began and how it ended (connection: close, no pool). */
function openStream(url: string, key: string, dialect: Dialect, sim: string): OpenStream {
  const call = streamCall(dialect, { key, direct: false, model: 'sluice/fast', sim, run: 'shutdown' });
  const u = new URL(url);
  let began!: () => void;
  const begun = new Promise<void>((resolve) => (began = resolve));
  const ended = new Promise<{ status: number; text: string; error?: string }>((resolve) => {
    const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: call.path, headers: call.headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
        began();
      });
      res.on('end', () => resolve({ status: res.statusCode!, text }));
      res.on('error', (err: NodeJS.ErrnoException) => resolve({ status: res.statusCode!, text, error: err.code ?? err.message }));
      res.on('close', () => resolve({ status: res.statusCode!, text, error: res.complete ? undefined : 'cut' }));
    });
    req.on('error', (err: NodeJS.ErrnoException) => {
      began();
      resolve({ status: 0, text: '', error: err.code ?? err.message });
    });
    req.end(call.body);
  });
  return { dialect, begun, ended };
}

async function rowsOfRun(b: Backings): Promise<Array<{ outcome: string; status: number }>> {
  return (await b.store.listRequests(10_000)).filter((r) => r.run === 'shutdown');
}

const stopped = (p: GatewayProcess) => p.waitForLine((l) => l.msg === 'stopped; every row written or spooled for the next start', { timeoutMs: 30_000 });

t.test('SIGTERM with 100 streams open: each finishes or ends with one error event; every row written; exit 0', async (t) => {
  const b = await startBackings(t, { extraProfiles: BULK });
  const A = await b.start({ env: { ...BULK_ENV, SLUICE_SHUTDOWN_GRACE_S: '2' } });
  const key = await b.key('bulk');
  const streams = Array.from({ length: 100 }, (_, i) => openStream(A.url, key, i % 2 ? 'messages' : 'chat', i < 50 ? SHORT : LONG));
  await Promise.all(streams.map((s) => s.begun));
  const sentAt = Date.now();
  const exit = A.stop('SIGTERM');

  // A new connection is refused at once: the listener is closed.
  const refused = await fetch(`${A.url}/health`).then(() => false, () => true);
  t.ok(refused, 'no new connections after SIGTERM');

  const ends = await Promise.all(streams.map((s) => s.ended));
  const { code } = await exit;
  const took = Date.now() - sentAt;
  t.equal(code, 0, 'exit 0');
  t.ok(took < 2000 + 5000, `stopped within the grace (2 s) and the flush (${took} ms)`);
  let finished = 0;
  let errored = 0;
  t.ok(ends.every((e) => e.status === 200), 'every stream had begun with 200');
  ends.forEach((e, i) => {
    const how = streamEnding(streams[i]!.dialect, e.text);
    if (how.complete) finished++;
    else if (how.errorEvents === 1 && how.lastIsError && !e.error) errored++;
    else t.fail(`stream ${i} (${streams[i]!.dialect}) ended neither complete nor with one error event`, { error: e.error, tail: e.text.slice(-300) });
  });
  t.equal(finished, 50, 'the 50 short streams finished within the grace');
  t.equal(errored, 50, 'the 50 long ones ended with one error event of their dialect');
  const last = await stopped(A);
  t.equal(last.rows_spooled, 0, 'nothing spooled: the store was up');

  const rows = await rowsOfRun(b);
  t.equal(rows.length, 100, 'one row per stream');
  t.equal(rows.filter((r) => r.outcome === 'ok').length, 50, 'finished streams: ok');
  t.equal(rows.filter((r) => r.outcome === 'gateway_error').length, 50, 'ended by the shutdown: gateway_error');
});

t.test('SIGTERM during a Postgres outage spools every row; the restart replays the spool', async (t) => {
  const b = await startBackings(t, { extraProfiles: BULK });
  const dataDir = mkdtempSync(join(tmpdir(), 'sluice-data-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const A = await b.start({ dataDir, env: { ...BULK_ENV, SLUICE_SHUTDOWN_GRACE_S: '1' } });
  const key = await b.key('bulk');
  // One request first, so the key is cached when the store goes away.
  const warm = openStream(A.url, key, 'chat', 'chunks=2');
  await warm.ended;
  await until('the first row', async () => (await A.health()).store.rows_written >= 1);

  await b.pgRelay.cut();
  const streams = Array.from({ length: 30 }, (_, i) => openStream(A.url, key, i % 2 ? 'messages' : 'chat', i < 10 ? SHORT : LONG));
  await Promise.all(streams.map((s) => s.begun));
  const { code } = await A.stop('SIGTERM');
  t.equal(code, 0, 'exit 0 with the store away');
  const ends = await Promise.all(streams.map((s) => s.ended));
  t.ok(ends.every((e, i) => { const h = streamEnding(streams[i]!.dialect, e.text); return h.complete || (h.errorEvents === 1 && h.lastIsError); }), 'each stream finished or ended with one error event');
  const last = A.lines.find((l) => l.msg === 'stopped; every row written or spooled for the next start')!;
  t.equal(last.rows_spooled, 30, 'the 30 rows went to the spool');
  t.ok(readdirSync(dataDir).some((f) => f.startsWith('requests-spool.jsonl')), 'the spool file is there');

  await b.pgRelay.restore();
  const B = await b.start({ dataDir, env: BULK_ENV });
  await B.waitForLine((l) => l.msg === 'spooled request rows written' && l.rows === 30, { timeoutMs: 15_000 });
  const rows = await rowsOfRun(b);
  t.equal(rows.length, 31, 'the restart wrote the 30 spooled rows (and the first one), none twice');
  t.notOk(readdirSync(dataDir).some((f) => f.startsWith('requests-spool.jsonl')), 'the spool is gone');
});

t.test('a second signal during the grace period ends at once and still flushes', async (t) => {
  const b = await startBackings(t, { extraProfiles: BULK });
  const A = await b.start({ env: { ...BULK_ENV, SLUICE_SHUTDOWN_GRACE_S: '60' } });
  const key = await b.key('bulk');
  const streams = Array.from({ length: 20 }, (_, i) => openStream(A.url, key, i % 2 ? 'messages' : 'chat', LONG));
  await Promise.all(streams.map((s) => s.begun));
  const mark = A.lines.length;
  const exit = A.stop('SIGTERM');
  await A.waitForLine((l) => l.msg === 'draining: no new connections; open streams may finish', { from: mark });
  const second = Date.now();
  process.kill(A.pid, 'SIGINT');
  const { code } = await exit;
  t.equal(code, 0, 'exit 0');
  t.ok(Date.now() - second < 10_000, `ended soon after the second signal (${Date.now() - second} ms), not after the 60 s grace`);
  const ends = await Promise.all(streams.map((s) => s.ended));
  t.ok(ends.every((e, i) => { const h = streamEnding(streams[i]!.dialect, e.text); return h.errorEvents === 1 && h.lastIsError; }), 'each stream ended with one error event of its dialect');
  t.ok(A.lines.some((l) => l.msg === 'second signal: ending open streams now; rows are still flushed'));
  t.equal((await rowsOfRun(b)).length, 20, 'every row written');
});

t.test('SIGKILL loses at most the rows of the requests in flight', async (t) => {
  const b = await startBackings(t, { extraProfiles: BULK });
  const A = await b.start({ env: BULK_ENV });
  const key = await b.key('bulk');
  const done = 10;
  for (let i = 0; i < done; i++) await openStream(A.url, key, i % 2 ? 'messages' : 'chat', 'chunks=2').ended;
  await until('the finished requests\' rows', async () => (await A.health()).store.rows_written >= done);
  const inFlight = 20;
  const streams = Array.from({ length: inFlight }, (_, i) => openStream(A.url, key, i % 2 ? 'messages' : 'chat', LONG));
  await Promise.all(streams.map((s) => s.begun));
  const { signal } = await A.stop('SIGKILL');
  t.equal(signal, 'SIGKILL');
  const ends = await Promise.all(streams.map((s) => s.ended));
  t.ok(ends.every((e) => e.error !== undefined), 'the open streams were cut');
  const rows = (await rowsOfRun(b)).length;
  const lost = done + inFlight - rows;
  t.comment(`SIGKILL with ${inFlight} requests in flight: ${rows} of ${done + inFlight} rows written, ${lost} lost`);
  t.ok(lost <= inFlight, `lost ${lost} ≤ ${inFlight} in flight`);
  t.equal(rows, done, 'the finished requests\' rows survive');
});
