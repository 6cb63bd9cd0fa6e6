// `npm run bench:handover-null [-- --seconds 300]`: the handover benchmark's two latency bars with
// no handover at all. One sluice takes the handover's load (chat at 700 req/s over 32 keep-alive
// connections, short streams at 20/s) for `--seconds`; at every split point 5 s apart it asks what
// bench:handover asks at a SIGTERM: is the p99 of the next 60 s within the p99 of the 30 s before
// + 1 ms, and is the p50 of the next 20 requests within 1.2× the p50 of the 30 s before? How often
// each holds with nothing happening is what a handover's figures are to be read against: on a
// machine where it is far from always, a missed bar says as much about the machine as about
// the handover. Run it on the same machine, with the same flags as bench:handover (npm does).

import { runLoad, type Sample } from './handover-load.ts';
import { cleanup, log, startSim, startSluice } from './procs.ts';
import { numberOption } from './settings.ts';
import { percentile } from './stream-client.ts';

const SECONDS = numberOption('seconds', 300, 120);
const BEFORE_MS = 30_000;
const AFTER_MS = 60_000;
const STEP_MS = 5_000;

const q = (xs: number[], p: number) => percentile([...xs].sort((a, b) => a - b), p);

/** The bars at every split point of the run: lines to print, and how many of them each bar met. */
function splits(chat: Sample[]): { lines: string[]; n: number; p99Met: number; first20Met: number } {
  const t0 = chat[0]!.at;
  const end = chat.at(-1)!.at;
  const lines: string[] = [];
  let n = 0;
  let p99Met = 0;
  let first20Met = 0;
  // The first 10 s are the load's own start: a split point needs 30 s of steady load before it.
  for (let t = t0 + 10_000 + BEFORE_MS; t + AFTER_MS <= end; t += STEP_MS) {
    const before = chat.filter((x) => x.at >= t - BEFORE_MS && x.at < t).map((x) => x.ms);
    const after = chat.filter((x) => x.at >= t && x.at < t + AFTER_MS).map((x) => x.ms);
    const next = chat.findIndex((x) => x.at >= t);
    const first20 = chat.slice(next, next + 20).map((x) => x.ms);
    const p99 = q(after, 99) <= q(before, 99) + 1;
    const ratio = q(first20, 50) / q(before, 50);
    n++;
    if (p99) p99Met++;
    if (ratio <= 1.2) first20Met++;
    lines.push(`| ${((t - t0) / 1000).toFixed(0)} s | ${q(before, 99).toFixed(2)} → ${q(after, 99).toFixed(2)} ms | ${p99 ? 'met' : 'missed'} | ${ratio.toFixed(2)}× | ${ratio <= 1.2 ? 'met' : 'missed'} |`);
  }
  return { lines, n, p99Met, first20Met };
}

async function main(): Promise<void> {
  const sim = await startSim();
  const s = await startSluice(sim);
  log(`no handover: ${SECONDS} s of the handover's load on one sluice (pid ${s.pid})`);
  const samples = await runLoad({ origin: s.origin, key: s.key, chatRate: 700, connections: 32, shortRate: 20, longChunks: 0, maxInFlight: 100_000 }, SECONDS);
  await s.stop();
  const r = splits(samples.filter((x) => x.kind === 'chat'));
  process.stdout.write('\n| split at | p99 30 s before → 60 s after | ≤ +1 ms | next 20 p50 / p50 before | ≤ 1.2× |\n|---|---|---|---|---|\n');
  process.stdout.write(`${r.lines.join('\n')}\n\n`);
  process.stdout.write(`With no handover: the p99 bar met at ${r.p99Met} of ${r.n} split points, the first-20 bar at ${r.first20Met} of ${r.n}; `
    + `all six bars of a three-handover run would hold with a chance of about ${(((r.p99Met / r.n) * (r.first20Met / r.n)) ** 3 * 100).toFixed(0)} %.\n`);
}

main().then(() => cleanup().then(() => process.exit(0)), async (err: Error) => {
  log(`failed: ${err.stack ?? err.message}`);
  await cleanup();
  process.exit(1);
});
