// `npm run bench [-- --store sqlite|postgres|both] [--warmup S] [--trace] [--caps]`: the same load against the simulated
// router directly, three minimal proxies (bench/floor-proxy.ts: node:http + http.request, the floor
// the targets are judged against; bench/floor-undici.ts: node:http + undici Pool.stream;
// bench/floor-hp3.ts: the proxy core alone, http-proxy-3 as sluice drives it) and the real
// sluice (keys, records and the usage tap on), each in its own process, the load generator in
// another (bench/load.ts). Prints Markdown tables with the targets met, ready for docs/benchmarks.md.
// Every process it starts is killed and every temporary directory and database removed, on error too.
// The parts: settings.ts (options), servers.ts (processes and cleanup), measure.ts (slices and
// figures), report.ts (tables and verdicts), variant-report.ts (`--trace`: traced against untraced;
// `--caps`: a capped key and session against none).

import type { LoadJob, LoadResult } from './load.ts';
import { measureScenario, peakRssMiB, type LoadClient, type Measure } from './measure.ts';
import { Loader } from './procs.ts';
import { mark, report, TARGETS } from './report.ts';
import { scenarios } from './scenarios.ts';
import { cleanup, FLOOR_ELD_FILE, startFloor, startFloorHp3, startFloorUndici, startOtlpSink, startSim, startSluice, stop, wasInterrupted, type Target } from './servers.ts';
import { CAPS, LATENCY_RATES, log, ONLY, parseStores, PIN, SECONDS, TRACE, UPSTREAM_KEY, WARMUP_SECONDS } from './settings.ts';
import { capsReport, traceReport } from './variant-report.ts';

async function main(): Promise<number> {
  const major = Number(process.versions.node.split('.')[0]);
  if (major < 24) throw new Error(`the benchmark needs Node 24 (the project's pinned runtime), this is ${process.version}: run it through npm run bench`);
  const stores = parseStores();
  const list = scenarios().filter((s) => !ONLY || ONLY.includes(s.name));
  if (list.length === 0) throw new Error(`--only names no scenario; there are ${scenarios().map((s) => s.name).join(', ')}`);
  const total = list.length * (4 + stores.length + (TRACE ? 1 : 0) + (CAPS ? 1 : 0)) * (WARMUP_SECONDS + (1 + LATENCY_RATES.length) * SECONDS);
  log(`stores: ${stores.join(', ')}${PIN ? '; pinned: the measured server alone on the last CPU' : ''}; about ${Math.round(total + 10)} s`);

  const sim = await startSim();
  const floor = await startFloor(sim);
  const floorUndici = await startFloorUndici(sim);
  const floorHp3 = await startFloorHp3(sim);
  const simT: Target = { name: 'sim', label: 'sim (direct)', server: sim, prefix: '/api', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const floorT: Target = { name: 'floor', label: 'http floor', server: floor, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0, eldFile: FLOOR_ELD_FILE };
  const floorUT: Target = { name: 'floor-undici', label: 'undici floor', server: floorUndici, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const floorHT: Target = { name: 'floor-hp3', label: 'http-proxy-3 floor', server: floorHp3, prefix: '', auth: UPSTREAM_KEY, sluice: false, sent: 0 };
  const sluices: Target[] = [];
  for (const store of stores) sluices.push(await startSluice(sim, store));
  // --trace: the first store's sluice once more, traces on, exporting to a local sink.
  const sink = TRACE ? await startOtlpSink() : undefined;
  const traced = sink ? await startSluice(sim, stores[0]!, { traceTo: sink }) : undefined;
  // --caps: the first store's sluice once more, its key and sessions capped.
  const capped = CAPS ? await startSluice(sim, stores[0]!, { caps: true }) : undefined;
  const load: LoadClient = new Loader<Omit<LoadJob, 'id'>, LoadResult>('bench/load.ts');
  await load.ready;

  const targets = [simT, floorT, floorUT, floorHT, ...sluices, ...(traced ? [traced] : []), ...(capped ? [capped] : [])];
  const results = new Map<string, Map<string, Measure>>();
  for (const s of list) results.set(s.name, await measureScenario(load, sim, targets, s));
  const loadRss = peakRssMiB(load.pid);
  load.close();

  for (const t of targets) t.peakRss = peakRssMiB(t.server.pid);
  const rows = new Map<string, { rows: number; ok: number }>();
  for (const t of sluices) rows.set(t.name, await t.stopAndCount!());
  // The traced sluice flushes its last spans as it stops; the sink is read after.
  const tracedRows = traced ? await traced.stopAndCount!() : undefined;
  const sunk = sink ? await sink.count() : undefined;
  const cappedRows = capped ? await capped.stopAndCount!() : undefined;
  if (sink) await stop(sink);
  await stop(floor);
  await stop(floorUndici);
  await stop(floorHp3);
  await stop(sim);

  const out: string[] = [];
  let allOk = true;
  let correct = true;
  const summary: string[] = [];
  for (const t of sluices) {
    const others = [...sluices.filter((x) => x !== t).map((x) => ({ label: x.label, rss: x.peakRss ?? NaN })), { label: 'load generator', rss: loadRss }];
    const { text, verdicts } = report(t.store!, list, results, simT, floorT, floorUT, floorHT, t, rows.get(t.name)!, process.versions.node, others);
    out.push(text);
    const met = verdicts.filter((v) => v.ok).length;
    if (verdicts.some((v) => v.correctness && !v.ok)) correct = false;
    const missed = verdicts.filter((v) => !v.ok).map((v) => v.what);
    summary.push(`${t.store} ${met}/${verdicts.length}${missed.length ? ` (missed: ${missed.join('; ')})` : ''}`);
    if (met !== verdicts.length) allOk = false;
  }
  const chat = results.get('chat-2k');
  if (chat && sluices.length === 2) {
    const [lite, pg] = sluices.map((t) => chat.get(t.name)!.cpu) as [number, number];
    const ok = pg / lite <= TARGETS.pgVsSqlite;
    if (!ok) allOk = false;
    summary.push(`Postgres + Redis CPU per 2 KB request ${(pg / lite).toFixed(2)}× the embedded store's (≤ ${TARGETS.pgVsSqlite}× ${mark(ok)})`);
  }
  if (traced) {
    const { text, ok } = traceReport(list, results, sluices[0]!, traced, tracedRows!, sunk!, process.env.BENCH_SINK);
    out.push(text);
    if (!ok) correct = false;
  }
  if (capped) {
    const { text, ok } = capsReport(list, results, sluices[0]!, capped, cappedRows!);
    out.push(text);
    if (!ok) correct = false;
  }
  process.stdout.write(`\n${out.join('\n\n')}\n\n${allOk ? '✓' : '✗'} targets met: ${summary.join('; ')}\n`);
  // Missed performance targets are a finding; wrong answers or lost rows are a failure.
  return correct ? 0 : 1;
}

const USAGE = `npm run bench -- [options]     (docs/benchmarks.md says what each figure means)

  --store sqlite|postgres|both   which stores sluice runs on (default sqlite)
  --only NAME[,NAME]             scenarios: ${scenarios().map((s) => s.name).join(', ')}
  --warmup S                     warm-up seconds per target and scenario (default 5)
  --profile DIR                  CPU profiles of sluice and the floors into DIR
  --pin                          the measured server alone on the last CPU
  --trace                        one more sluice with traces on (ratio 1, to a local OTLP sink):
                                 CPU per request traced against untraced, same run
  --caps                         one more sluice with a capped key and session caps (never reached):
                                 CPU per request against the uncapped one, same run
  --streams [--quick]            1,000 slow streams, the stall-free search, a burst, slow readers
  --soak MINUTES                 mixed traffic for MINUTES (BENCH_SOAK_RATE req/s, default 50)
Environment: BENCH_SECONDS (5), BENCH_ROUNDS (5), BENCH_PG_URL, BENCH_REDIS_URL; BENCH_OTEL_X=v sets OTEL_X=v for the traced sluice;
BENCH_SINK=reset|slow: the traced sluice's collector resets or never answers every export.
`;

if (process.argv.includes('--help') || process.argv.includes('-h')) {
  process.stdout.write(USAGE);
  process.exit(0);
}

// --streams and --soak MINUTES: the stream-scale and soak benchmarks (bench/streams.ts, bench/soak.ts),
// each with its own processes and report.
const other = process.argv.includes('--streams') ? './streams.ts' : process.argv.includes('--soak') ? './soak.ts' : undefined;
(other ? import(other).then((m: { main: () => Promise<number> }) => m.main()) : main())
  .then(async (code) => {
    await cleanup();
    process.exit(code);
  })
  .catch(async (err: Error) => {
    if (!wasInterrupted()) log(`failed: ${err.stack ?? err.message}`);
    await cleanup();
    process.exit(wasInterrupted() ? 130 : 1);
  });
