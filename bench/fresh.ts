// `npm run bench:fresh [-- --rounds 3 --rate 700 --seconds 3]`: how warm a restarted sluice is
// when it reports ready. A first `sluice serve` answers one request (so its key counts as used and
// the next start keeps it in its key cache), stops; a second one starts in the same data directory
// with --trace-deopt, and the moment it is ready it takes chat at `--rate` over 32 new keep-alive
// connections for `--seconds`, then again in each further round (a new pool each time). Per round:
// the first 20 requests' p50 (from when each was due, and from when it went out), the p50 of the
// round's last second, and how many functions V8 deoptimized (threw their compiled code away)
// since ready: code the warm-up compiled for shapes the real traffic does not have. The load is
// this process; its client code is warmed against the simulated router first, so the cold side
// measured is sluice's. The simulated router runs in its own process.

import diagnostics from 'node:diagnostics_channel';
import { Pool } from 'undici';
import { MODEL } from './handover-load.ts';
import { cleanup, log, startSim, startSluice, UPSTREAM_KEY } from './procs.ts';
import { numberOption } from './settings.ts';
import { percentile } from './stream-client.ts';

interface Sample { due: number; sentAt?: number; ms?: number }

const ROUNDS = numberOption('rounds', 3, 1);
const RATE = numberOption('rate', 700, 1);
const SECONDS = numberOption('seconds', 3, 1);
const CONNECTIONS = 32;
const BODY = JSON.stringify({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Say hello.' }] });

/** The send time of each request, by its x-seq header (undici's diagnostics channel). */
const waiting = new Map<number, Sample>();
let nextId = 0;
diagnostics.subscribe('undici:client:sendHeaders', (m: any) => {
  const at = typeof m.headers === 'string' ? m.headers.indexOf('x-seq: ') : -1;
  const s = at < 0 ? undefined : waiting.get(Number.parseInt(m.headers.slice(at + 7), 10));
  if (s) s.sentAt = performance.now();
});

/** Open loop at `rate` for `seconds` over a new pool: every request's sample. */
async function round(origin: string, path: string, auth: string, rate: number, seconds: number): Promise<Sample[]> {
  const pool = new Pool(origin, { connections: CONNECTIONS, pipelining: 1 });
  const samples: Sample[] = [];
  const pending: Array<Promise<void>> = [];
  const start = performance.now();
  for (let seq = 0; seq < rate * seconds; seq++) {
    const due = start + (seq * 1000) / rate;
    const wait = due - performance.now();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    const s: Sample = { due };
    const id = nextId++;
    waiting.set(id, s);
    pending.push(pool.request({ path, method: 'POST', headers: { authorization: auth, 'content-type': 'application/json', 'x-seq': String(id) }, body: BODY })
      .then(async (r) => {
        await r.body.text();
        if (r.statusCode !== 200) throw new Error(`answered ${r.statusCode}`);
        s.ms = performance.now() - s.due;
        samples.push(s);
      })
      .finally(() => waiting.delete(id)));
  }
  await Promise.all(pending);
  await pool.close();
  return samples;
}

const p50 = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);
const f = (ms: number) => `${ms.toFixed(2)} ms`;

async function main(): Promise<void> {
  const sim = await startSim();
  // This process's client code, warmed against the router directly.
  await round(sim.origin, '/api/v1/chat/completions', `Bearer ${UPSTREAM_KEY}`, 1000, 3);
  const first = await startSluice(sim);
  await round(first.origin, '/v1/chat/completions', `Bearer ${first.key}`, 10, 1);
  await first.stop();
  const s = await startSluice(sim, { restartOf: first, nodeFlags: ['--trace-deopt'] });
  // Counted line by line from here (the process is ready): a line cut between two chunks counts once.
  let deopts = 0;
  let rest = '';
  s.proc.stdout!.on('data', (c: string) => {
    const lines = (rest + c).split('\n');
    rest = lines.pop()!;
    for (const l of lines) if (l.startsWith('[bailout (')) deopts++;
  });
  log(`restarted: pid ${s.pid}`);
  const rows: string[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    const before = deopts;
    const samples = (await round(s.origin, '/v1/chat/completions', `Bearer ${s.key}`, RATE, SECONDS)).sort((a, b) => a.due - b.due);
    const first20 = samples.slice(0, 20);
    const lastSecond = samples.filter((x) => x.due - samples[0]!.due >= (SECONDS - 1) * 1000);
    if (first20.some((x) => x.sentAt === undefined)) throw new Error('a request went out unseen by the diagnostics channel');
    // A timer may fire a fraction of a millisecond before its due time: such a request waited for nothing.
    rows.push(`| ${r + 1} | ${f(p50(first20.map((x) => x.ms!)))} | ${f(p50(first20.map((x) => x.ms! - Math.max(0, x.sentAt! - x.due))))} | ${f(p50(lastSecond.map((x) => x.ms!)))} | ${deopts - before} |`);
  }
  await s.stop();
  process.stdout.write(`\nA restarted sluice taking ${RATE} req/s at once over ${CONNECTIONS} new connections, ${SECONDS} s a round (deoptimizations since ready: ${deopts})\n\n`);
  process.stdout.write('| round | first 20 p50 | first 20 p50 from sending | last second p50 | deoptimizations |\n|---|---:|---:|---:|---:|\n');
  process.stdout.write(`${rows.join('\n')}\n`);
}

main().then(() => cleanup().then(() => process.exit(0)), async (err: Error) => {
  log(`failed: ${err.stack ?? err.message}`);
  await cleanup();
  process.exit(1);
});
