// `npm run bench:fresh [-- --rounds 3 --rate 700 --seconds 3]`: how warm a restarted sluice is
// when it reports ready. A first `sluice serve` takes the same load for 3 s (so its key counts as
// used and the next start keeps it in its key cache, and this process's client code is warm), stops; a second one starts in the same data directory
// with --trace-deopt, and the moment it is ready it takes chat at `--rate` over 32 new keep-alive
// connections for `--seconds`, then again in each further round (a new pool each time). Per round:
// the first 20 requests' p50 (from when each was due, and from when it went out), the p50 of the
// round's last second, and how many functions V8 deoptimized (threw their compiled code away)
// since ready: code the warm-up compiled for shapes the real traffic does not have. The load is
// the handover benchmark's (bench/handover-load.ts, Traffic) in this process; the simulated router
// runs in its own process.

import { runLoad, type Sample } from './handover-load.ts';
import { cleanup, log, startSim, startSluice } from './procs.ts';
import { numberOption } from './settings.ts';
import { percentile } from './stream-client.ts';

const ROUNDS = numberOption('rounds', 3, 1);
const RATE = numberOption('rate', 700, 1);
const SECONDS = numberOption('seconds', 3, 1);
const CONNECTIONS = 32;

/** Chat at `rate` for `seconds` over a new pool: every request's sample, in the order they were due; throws on any failure. */
function round(origin: string, key: string, rate: number, seconds: number): Promise<Sample[]> {
  return runLoad({ origin, key, chatRate: rate, connections: CONNECTIONS, shortRate: 0, longChunks: 0, maxInFlight: 100_000 }, seconds);
}

const p50 = (xs: number[]) => percentile([...xs].sort((a, b) => a - b), 50);
const f = (ms: number) => `${ms.toFixed(2)} ms`;

async function main(): Promise<void> {
  const sim = await startSim();
  const first = await startSluice(sim);
  await round(first.origin, first.key, RATE, 3);
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
    const samples = await round(s.origin, s.key, RATE, SECONDS);
    const first20 = samples.slice(0, 20);
    const lastSecond = samples.filter((x) => x.at - samples[0]!.at >= (SECONDS - 1) * 1000);
    if (first20.some((x) => x.sentAt === undefined)) throw new Error('a request went out unseen by the diagnostics channel');
    // A timer may fire a fraction of a millisecond before its due time: such a request waited for nothing.
    rows.push(`| ${r + 1} | ${f(p50(first20.map((x) => x.ms)))} | ${f(p50(first20.map((x) => x.ms - Math.max(0, x.sentAt! - x.at))))} | ${f(p50(lastSecond.map((x) => x.ms)))} | ${deopts - before} |`);
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
