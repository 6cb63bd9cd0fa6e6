// `npm run bench -- --streams [--quick]`: slow streams at scale, each party in its own process
// (simulated router, sluice on the embedded store, load generator). Streams are 64 deltas 20 ms
// apart (x-sim chunks=64;chunk-delay-ms=20), a real model's pace. Measures: 1,000 concurrent
// streams byte for byte with one row each and sluice's RSS; the largest N at which the direct path
// stays clean (gap p99 ≤ 1.25× the interval) and what sluice adds there; a burst of 512 opened at
// once (also through the proxy core alone, bench/floor-hp3.ts, to show what the design's core
// adds by itself); and a slow reader's back-pressure (sluice's RSS while 50 readers of 8 MiB hold still).
// Prints a Markdown report for docs/benchmarks.md. Exit 1 only for wrong answers or lost rows.

import { percentile, streamCall, streamRequest } from './stream-client.ts';
import type { SlowJob, SlowResult, StreamsJob, StreamsResult } from './stream-load.ts';
import { cleanup, Loader, log, rssMiB, sampler, startSim, startSluice, UPSTREAM_KEY, type Proc, type Sluice } from './procs.ts';
import { startFloorHp3, stop, type Server } from './servers.ts';

const QUICK = process.argv.includes('--quick');
const INTERVAL = 20;
const SIM = `chunks=64;chunk-delay-ms=${INTERVAL}`;
const MODEL = 'google/gemini-2.5-flash'; // no tier: forwarded as given, so direct and sluice ask the same
const SCALE = Number(process.env.BENCH_STREAMS_N ?? (QUICK ? 200 : 1000));
const LADDER = (QUICK ? [32, 64, 128, 256] : [32, 64, 128, 256, 512, 1024]);
const BURST = QUICK ? 128 : 512;
const ROUNDS = QUICK ? 1 : 3;
const SLOW = { n: QUICK ? 30 : 90, bytes: 8 * 1024 * 1024, holdMs: 3000 };
const TARGETS = { rssMiB: 300, gapP99: 5, gapMax: 50, ttfbP99: 2, burst: 100, slowPerStreamMiB: 1 };

type Loaded = Loader<StreamsJob | SlowJob, StreamsResult | SlowResult>;

type Via = 'direct' | 'floor' | 'sluice';

/** The same stream request, sent to the sim itself, through the proxy core alone, or through sluice. */
function spec(target: Via, parties: { sim: Proc; floor: Server; sluice: Sluice }, run: string) {
  if (target === 'sluice') return { origin: parties.sluice.origin, ...streamCall('chat', { key: parties.sluice.key, direct: false, model: MODEL, sim: SIM, run }) };
  const call = streamCall('chat', { key: UPSTREAM_KEY, direct: true, model: MODEL, sim: SIM, run });
  // The floor forwards to the sim's /api itself: its path is the client's.
  return target === 'direct' ? { origin: parties.sim.origin, ...call } : { origin: parties.floor.origin, ...call, path: call.path.replace(/^\/api/, '') };
}

const mark = (ok: boolean) => (ok ? '✓' : '✗');
const f1 = (n: number) => n.toFixed(1);

/** Runs `rounds` rounds of the same job on each target in turn (direct, [floor,] sluice, direct, …). */
async function alternate(load: Loaded, parties: Parameters<typeof spec>[1], targets: readonly Via[], n: number, rampMs: number, rounds: number, run: string) {
  const out: Record<Via, StreamsResult[]> = { direct: [], floor: [], sluice: [] };
  for (let r = 0; r < rounds; r++) {
    for (const target of targets) {
      const res = (await load.run({ kind: 'streams', spec: spec(target, parties, run), n, rampMs })) as StreamsResult;
      out[target].push(res);
      log(`${run} ${target} N=${n}: ok ${res.ok}/${n}, gap p50 ${f1(res.gap.p50)} p99 ${f1(res.gap.p99)} max ${f1(res.gap.max)} ms, ttfb p99 ${f1(res.ttfb.p99)} ms`);
    }
  }
  // The median round's figures: one noisy round on a shared machine does not decide.
  const med = (xs: number[]) => percentile(Float64Array.from(xs).sort(), 50);
  const pick = (m: StreamsResult[]) => ({
    gapP99: med(m.map((x) => x.gap.p99)), gapMax: med(m.map((x) => x.gap.max)), ttfbP99: med(m.map((x) => x.ttfb.p99)),
    ok: m.reduce((a, x) => a + x.ok, 0), sent: m.reduce((a, x) => a + x.n, 0),
  });
  return { direct: pick(out.direct), floor: pick(out.floor), sluice: pick(out.sluice) };
}

export async function main(): Promise<number> {
  const sent = new Map<string, number>();
  const count = (run: string, n: number) => sent.set(run, (sent.get(run) ?? 0) + n);
  const lines: string[] = [];
  let correct = true;
  const sim = await startSim();
  const sluice = await startSluice(sim);
  const floor = await startFloorHp3(sim);
  const parties = { sim, floor, sluice };
  const load: Loaded = new Loader();
  await load.ready;
  log(`sim ${sim.pid}, sluice ${sluice.pid}; ${QUICK ? 'quick run' : 'full run'}`);

  // Reference: the direct answer, once.
  const ref = await streamRequest(spec('direct', parties, ''));
  if (ref.status !== 200 || ref.deltas !== 64) throw new Error(`the direct reference stream failed: ${ref.status} ${ref.error ?? ''} (${ref.deltas} deltas)`);

  // 1. Scale: SCALE concurrent streams, opened over one second.
  const rss = sampler(() => rssMiB(sluice.pid));
  const scale = (await load.run({ kind: 'streams', spec: spec('sluice', parties, 'scale'), n: SCALE, rampMs: 1000 })) as StreamsResult;
  const rssPeak = Math.max(...rss.stop());
  count('scale', SCALE);
  const byteForByte = (scale.digests[ref.digest] ?? 0) === SCALE && (scale.bytes[String(ref.bytes)] ?? 0) === SCALE;
  if (scale.ok !== SCALE || !byteForByte) correct = false;
  log(`scale: ${scale.ok}/${SCALE} complete, byte for byte ${byteForByte}, RSS peak ${f1(rssPeak)} MiB`);

  // 2. Stall-free: the largest N whose direct gap p99 stays ≤ 1.25 × the interval.
  let clean = 0;
  const ladder: string[] = [];
  for (const n of LADDER) {
    const d = (await load.run({ kind: 'streams', spec: spec('direct', parties, ''), n, rampMs: 1000 })) as StreamsResult;
    const ok = d.gap.p99 <= 1.25 * INTERVAL;
    ladder.push(`${n}: ${f1(d.gap.p99)} ms ${mark(ok)}`);
    log(`direct N=${n}: gap p99 ${f1(d.gap.p99)} ms ${ok ? 'clean' : 'not clean'}`);
    if (!ok) break;
    clean = n;
  }
  const at = clean || LADDER[0]!;
  const stall = await alternate(load, parties, ['direct', 'sluice'], at, 1000, ROUNDS, 'stall');
  count('stall', stall.sluice.sent);

  // 3. Burst: BURST streams opened in the same tick; also through the proxy core alone, which
  // accepts, connects upstream and relays like sluice but runs no chain: what the design's core adds.
  // The floor first gets the traffic sluice has had by now (the scale step), so both are warm.
  await load.run({ kind: 'streams', spec: spec('floor', parties, ''), n: SCALE, rampMs: 1000 });
  const burst = await alternate(load, parties, ['direct', 'floor', 'sluice'], BURST, 0, ROUNDS, 'burst');
  count('burst', burst.sluice.sent);
  if (stall.sluice.ok !== stall.sluice.sent || burst.sluice.ok !== burst.sluice.sent) correct = false;

  // 4. Back-pressure: readers that stop for holdMs after their first bytes, in two rounds (a third
  // of SLOW.n, then all of it). What sluice keeps per held stream is the slope between the rounds:
  // the RSS one more held stream adds. The first round's own rise also holds what any burst of
  // traffic costs once (V8 growing its heap, malloc arenas), which is no stream's buffer.
  const streamMiB = SLOW.bytes / 2 ** 20;
  const slowSpec = { origin: sluice.origin, ...streamCall('chat', { key: sluice.key, direct: false, model: MODEL, sim: `bytes=${SLOW.bytes};chunks=2048`, run: 'slow' }) };
  const before = rssMiB(sluice.pid);
  const rss2 = sampler(() => rssMiB(sluice.pid));
  const holdRound = async (n: number) => {
    const start = Date.now();
    // While every reader holds still (after a second to fill the pipes): what sluice keeps.
    let holding = 0;
    const timer = setInterval(() => {
      const t = Date.now() - start;
      if (t > 1000 && t < SLOW.holdMs - 100) holding = Math.max(holding, rssMiB(sluice.pid));
    }, 100);
    const r = (await load.run({ kind: 'slow', spec: slowSpec, n, holdMs: SLOW.holdMs })) as SlowResult;
    clearInterval(timer);
    count('slow', n);
    return { ...r, holding };
  };
  const small = Math.round(SLOW.n / 3);
  const first = await holdRound(small);
  const slow = await holdRound(SLOW.n);
  const slowPeak = Math.max(...rss2.stop());
  const perStream = (slow.holding - first.holding) / (SLOW.n - small);
  if (first.completed !== small || slow.completed !== SLOW.n) correct = false;
  log(`slow readers: ${first.completed}/${small} then ${slow.completed}/${SLOW.n} complete; RSS ${f1(before)} → ${f1(first.holding)} MiB while ${small} held, ${f1(slow.holding)} MiB while ${SLOW.n} held, ${f1(slowPeak)} MiB peak once read`);

  load.close();
  await stop(floor);
  const code = await sluice.stop();
  const rows = sluice.rowsByRun();
  const rowsOk = [...sent].every(([run, n]) => rows.get(run) === n);
  if (code !== 0 || !rowsOk) correct = false;

  const added = { gapP99: stall.sluice.gapP99 - stall.direct.gapP99, gapMax: stall.sluice.gapMax - stall.direct.gapMax, ttfbP99: stall.sluice.ttfbP99 - stall.direct.ttfbP99 };
  const burstAdded = burst.sluice.ttfbP99 - burst.direct.ttfbP99;
  const v = {
    scale: scale.ok === SCALE && byteForByte, rss: rssPeak <= TARGETS.rssMiB,
    // Without a clean N the machine is too busy for the stall-free comparison to mean anything.
    gapP99: clean > 0 && added.gapP99 <= TARGETS.gapP99, gapMax: clean > 0 && added.gapMax <= TARGETS.gapMax, ttfb: clean > 0 && added.ttfbP99 <= TARGETS.ttfbP99,
    burst: burstAdded <= TARGETS.burst, slow: slow.completed === SLOW.n && perStream <= TARGETS.slowPerStreamMiB,
  };
  lines.push(`Node ${process.versions.node}; sim, sluice (embedded store), the proxy core alone (bench/floor-hp3.ts, for the burst) and the load generator each in its own process. Streams: 64 deltas ${INTERVAL} ms apart (\`x-sim: ${SIM}\`), chat dialect, one connection each.${QUICK ? ' **Quick run** (smaller N, one round).' : ` Stall-free and burst figures: the median of ${ROUNDS} rounds taken in turn (direct, sluice; the burst also through the proxy core).`}`, '');
  lines.push('| measure | direct | sluice | added | target |', '|---|---:|---:|---:|---|');
  lines.push(`| ${SCALE} concurrent streams (opened over 1 s): complete, byte for byte, one row each | — | ${scale.ok}/${SCALE}, ${byteForByte ? 'identical' : 'DIFFERENT'}, rows ${rows.get('scale') ?? 0} | — | all ${mark(v.scale && rows.get('scale') === SCALE)} |`);
  lines.push(`| sluice RSS peak during those | — | ${f1(rssPeak)} MiB | — | ≤ ${TARGETS.rssMiB} MiB ${mark(v.rss)} |`);
  lines.push(`| largest clean N (direct gap p99 ≤ ${1.25 * INTERVAL} ms) | ${clean || `none (below ${LADDER[0]})`} | — | — | ladder: ${ladder.join(', ')} |`);
  lines.push(`| gap p99 at N = ${at} | ${f1(stall.direct.gapP99)} ms | ${f1(stall.sluice.gapP99)} ms | ${f1(added.gapP99)} ms | ≤ ${TARGETS.gapP99} ms ${mark(v.gapP99)} |`);
  lines.push(`| gap max at N = ${at} | ${f1(stall.direct.gapMax)} ms | ${f1(stall.sluice.gapMax)} ms | ${f1(added.gapMax)} ms | ≤ ${TARGETS.gapMax} ms ${mark(v.gapMax)} |`);
  lines.push(`| TTFB p99 at N = ${at} | ${f1(stall.direct.ttfbP99)} ms | ${f1(stall.sluice.ttfbP99)} ms | ${f1(added.ttfbP99)} ms | ≤ ${TARGETS.ttfbP99} ms ${mark(v.ttfb)} |`);
  lines.push(`| burst of ${BURST} opened at once: TTFB p99 | ${f1(burst.direct.ttfbP99)} ms | ${f1(burst.sluice.ttfbP99)} ms | ${f1(burstAdded)} ms | ≤ ${TARGETS.burst} ms ${mark(v.burst)} |`);
  lines.push(`| the same burst through the proxy core alone (http-proxy-3 floor) | ${f1(burst.direct.ttfbP99)} ms | ${f1(burst.floor.ttfbP99)} ms | ${f1(burst.floor.ttfbP99 - burst.direct.ttfbP99)} ms | — (what the design's core adds by itself) |`);
  lines.push(`| slow readers of ${streamMiB} MiB streams, holding ${SLOW.holdMs / 1000} s: sluice RSS before → while ${small} hold → while ${SLOW.n} hold (peak once they read); per held stream = the slope between the two | — | ${f1(before)} → ${f1(first.holding)} → ${f1(slow.holding)} MiB (${f1(slowPeak)} MiB): ${(Math.max(0, perStream) * 1024).toFixed(0)} KiB per stream | — | ≤ ${TARGETS.slowPerStreamMiB} MiB per stream (the stream is ${streamMiB} MiB) ${mark(v.slow)} |`);
  lines.push('');
  const total = [...sent.values()].reduce((a, b) => a + b, 0);
  const written = [...rows].filter(([run]) => sent.has(run)).reduce((a, [, n]) => a + n, 0);
  lines.push(`Rows: ${written} written for ${total} streams sent through sluice ${mark(rowsOk)}; sluice exited ${code} on SIGTERM.`);
  const met = Object.values(v).filter(Boolean).length;
  lines.push('', `**Targets met: ${met}/${Object.keys(v).length}**`);
  process.stdout.write(`\n${lines.join('\n')}\n`);
  cleanup();
  return correct ? 0 : 1;
}

if (import.meta.main) {
  main().then((code) => process.exit(code), (err: Error) => {
    log(`failed: ${err.stack ?? err.message}`);
    cleanup();
    process.exit(1);
  });
}
