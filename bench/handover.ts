// `npm run bench:handover [-- --rate 700 --long-seconds 90 --before 30 --after 60 …]`: the full
// form of tests/e2e/handover.test.ts, the same scenario (bench/handover-scenario.ts) at production
// scale: chat at ~700 req/s over keep-alive connections, short streams, 90 s streams opened before
// each handover and during each overlap, 30 s of load before and 60 s after each of three
// handovers. The simulated router runs in its own process, the load in this one. Prints the checks
// (transport errors, non-2xx, streams cut, rows lost or doubled, usage, the carried rate limit,
// clean exits) and per handover the p99 before, during the start-up and after, and the new
// generation's first 20 requests' p50 against the steady p50; exits 1 when a check fails.
// HANDOVER_CONTROL=serial|hurry|kill runs a negative control (bench/handover-scenario.ts).
// Every process and temporary directory goes through bench/children.ts, removed on exit and on a signal.
// npm runs it with --initial-old-space-size=1024 --no-memory-reducer: the load keeps every
// request's sample (200,000 and more), and its own major collections, which grew to pauses and
// steps of 6 to 14 ms as they did, each made 30 to 80 requests late in whichever window it fell
// (matched by --trace-gc): latency of this process, not of sluice's. Its heap now grows to the end
// of the run without one (docs/benchmarks.md).

import { formatReport, judge } from './handover-report.ts';
import { controlFromEnv, runHandoverScenario } from './handover-scenario.ts';
import { cleanup, log, startSim, tempDir } from './procs.ts';
import { numberOption } from './settings.ts';
import { track } from './children.ts';

async function main(): Promise<number> {
  const o = {
    chatRate: numberOption('rate', 700),
    connections: numberOption('connections', 32),
    shortRate: numberOption('short-rate', 20),
    longBefore: numberOption('long-before', 20),
    longOverlap: numberOption('long-overlap', 10),
    longChunks: numberOption('long-seconds', 90),
    beforeMs: numberOption('before', 30) * 1000,
    afterMs: numberOption('after', 60) * 1000,
    handovers: numberOption('handovers', 3),
    // 0: the load alone meets the drain (the CI form adds a burst to meet it on a small rate).
    burstAtTerm: numberOption('burst', 0),
    graceS: numberOption('grace', 300),
    control: controlFromEnv(),
  };
  const minutes = (o.beforeMs + o.afterMs) * o.handovers / 60_000 + o.longChunks / 60;
  log(`handover: ${o.chatRate} req/s chat over ${o.connections} connections, ${o.shortRate}/s short streams, ${o.longBefore}+${o.longOverlap} streams of ${o.longChunks} s per handover, ${o.handovers} handovers, control ${o.control}; about ${minutes.toFixed(1)} min`);
  const sim = await startSim();
  const run = await runHandoverScenario({
    routerOrigin: sim.origin, ...o, log,
    onGeneration: (g) => void track(g.child),
    makeDir: (tag) => tempDir(`handover-${tag}`),
  });
  const j = judge(run, { beforeMs: o.beforeMs, afterMs: o.afterMs, minLongPerHandover: 20 });
  process.stdout.write(`\n${formatReport(run, j)}\n`);
  await cleanup();
  return j.checks.every((c) => c.ok) ? 0 : 1;
}

if (import.meta.main) {
  main().then((code) => process.exit(code), async (err: Error) => {
    log(`failed: ${err.stack ?? err.message}`);
    await cleanup();
    process.exit(1);
  });
}
