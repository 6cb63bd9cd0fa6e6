// `npm run bench -- --soak MINUTES`: mixed traffic (bench/soak-traffic.ts) at a fixed rate through
// one `sluice serve` on the embedded store for MINUTES, each party in its own process. Samples
// sluice's RSS and, through a preloaded probe (bench/soak-probe.ts: `--expose-gc`, SIGUSR2), its
// heap after a full GC; reports their slopes (MB per hour, least squares after the first fifth),
// open fds against the idle baseline, rows written against requests proxied, and every log line
// at level error or above. Exit 1 for unexpected answers, lost rows or leftover fds.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { MixedResult } from './soak-traffic.ts';
import type { MixedJob } from './stream-load.ts';
import { cleanup, Loader, log, openFds, ROOT, rssByKind, rssMiB, startSim, startSluice, tempDir } from './procs.ts';

/** Least-squares slope of y over x. */
export function slope(points: Array<[number, number]>): number {
  const n = points.length;
  if (n < 2) return NaN;
  let sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const [x, y] of points) {
    sx += x; sy += y; sxx += x * x; sxy += x * y;
  }
  const d = n * sxx - sx * sx;
  return d === 0 ? NaN : (n * sxy - sx * sy) / d;
}

function minutesArg(): number {
  const i = process.argv.indexOf('--soak');
  const v = Number(process.argv[i + 1]);
  if (!(v > 0)) {
    process.stderr.write(`--soak takes a number of minutes, got "${process.argv[i + 1] ?? ''}"\n`);
    process.exit(2);
  }
  return v;
}

export async function main(): Promise<number> {
  const minutes = minutesArg();
  const rate = Number(process.env.BENCH_SOAK_RATE ?? 50);
  const durationMs = minutes * 60_000;
  const everyMs = Math.max(2000, Math.min(30_000, durationMs / 60));
  const probeFile = join(tempDir('probe'), 'heap.jsonl');
  const sim = await startSim();
  const sluice = await startSluice(sim, {
    nodeFlags: ['--expose-gc', '--import', pathToFileURL(join(ROOT, 'bench/soak-probe.ts')).href],
    env: { BENCH_PROBE_FILE: probeFile },
  });
  const load = new Loader<MixedJob, MixedResult>();
  await load.ready;
  const fdBase = openFds(sluice.pid);
  log(`soak: ${minutes} min at ${rate} req/s; sluice ${sluice.pid}, ${fdBase} fds idle; samples every ${everyMs / 1000} s`);

  const t0 = Date.now();
  const samples: Array<{ t: number; rss: number; fds: number; kinds: ReturnType<typeof rssByKind> }> = [];
  const sample = () => {
    samples.push({ t: Date.now() - t0, rss: rssMiB(sluice.pid), fds: openFds(sluice.pid), kinds: rssByKind(sluice.pid) });
    process.kill(sluice.pid, 'SIGUSR2');
  };
  const timer = setInterval(sample, everyMs);
  const traffic = await load.run({ kind: 'mixed', origin: sluice.origin, key: sluice.key, badKey: `sluice_benchmark_${'x'.repeat(32)}`, rate, durationMs, run: 'soak' });
  clearInterval(timer);
  sample();
  load.close();

  // Idle again: every fd back to the baseline once the upstream's sockets close. After heavy
  // traffic that takes a while: cost reconciliation works through the rows still pending (the
  // disconnected and failed streams' estimates, looked up 3 s after their end and then backing
  // off) on kept-alive sockets of its own, and the proxy's idle sockets close after 30 s
  // (lib/proxy/index.ts). At 200 req/s for 3 minutes that took ~2 minutes here.
  const idleFrom = Date.now();
  let fdEnd = openFds(sluice.pid);
  const until = Date.now() + 240_000;
  while (fdEnd > fdBase && Date.now() < until) {
    await new Promise((r) => setTimeout(r, 500));
    fdEnd = openFds(sluice.pid);
  }
  const idleAfterS = Math.round((Date.now() - idleFrom) / 1000);
  const heap = readFileSync(probeFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { ts: number; heapUsed: number; heapTotal: number; newSpace: number });
  const stopping = sluice.lines.length;
  const code = await sluice.stop();
  const rows = sluice.rowsByRun().get('soak') ?? 0;
  const errors = sluice.lines.slice(0, stopping).filter((l) => l.level >= 50);
  const atStop = sluice.lines.slice(stopping).filter((l) => l.level >= 50);

  // Slopes in MB per hour, least squares over the samples after the first fifth (the warm-up).
  const trend = <T>(list: T[], hours: (x: T) => number, mb: (x: T) => number) =>
    slope(list.slice(Math.floor(list.length / 5)).map((x) => [hours(x), mb(x)] as [number, number]));
  const sampleHours = (s: (typeof samples)[number]) => s.t / 3.6e6;
  const probeHours = (h: (typeof heap)[number]) => (h.ts - heap[0]!.ts) / 3.6e6;
  const rssSlope = trend(samples, sampleHours, (s) => s.rss * 1.048576);
  const heapSlope = trend(heap, probeHours, (h) => h.heapUsed / 1e6);
  const committedSlope = trend(heap, probeHours, (h) => h.heapTotal / 1e6);
  // Where RSS went: each kind of mapping's first → last and slope.
  const kindRows = (['v8Pages', 'mallocHeap', 'otherAnon', 'file'] as const).map((k) =>
    `${k} ${samples[0]!.kinds[k].toFixed(1)} → ${samples.at(-1)!.kinds[k].toFixed(1)} MiB (${trend(samples, sampleHours, (s) => s.kinds[k] * 1.048576).toFixed(1)} MB/h)`);
  const f1 = (n: number) => n.toFixed(1);
  const ok = { answers: traffic.unexpected === 0, rows: rows === traffic.proxied, fds: fdEnd <= fdBase, errors: errors.length === 0, exit: code === 0 };
  const mark = (b: boolean) => (b ? '✓' : '✗');
  const out = [
    `Node ${process.versions.node}; sim, sluice (embedded store) and the load generator each in its own process. ${minutes} min of mixed traffic at ${rate} req/s: ${Object.entries(traffic.byKind).map(([k, n]) => `${k} ${n}`).join(', ')}.`,
    '',
    '| measure | value | target |',
    '|---|---:|---|',
    `| requests sent / proxied (bad keys are not) | ${traffic.sent} / ${traffic.proxied} | — |`,
    `| unexpected answers | ${traffic.unexpected} | 0 ${mark(ok.answers)} |`,
    `| rows written | ${rows} | = proxied ${mark(ok.rows)} |`,
    `| RSS: first → last sample, slope after the first fifth | ${f1(samples[0]!.rss)} → ${f1(samples.at(-1)!.rss)} MiB, ${f1(rssSlope)} MB/h | no upward trend |`,
    `| RSS by kind of mapping (/proc/<pid>/smaps; v8Pages: V8's heap pages of both isolates) | ${kindRows.join('; ')} | — |`,
    `| main isolate's committed heap after GC (heapTotal): first → last, slope; of it the young generation (capped by the unit's --max-semi-space-size) | ${f1(heap[0]!.heapTotal / 1e6)} → ${f1(heap.at(-1)!.heapTotal / 1e6)} MB, ${f1(committedSlope)} MB/h; young ${f1(heap[0]!.newSpace / 1e6)} → ${f1(heap.at(-1)!.newSpace / 1e6)} MB (largest ${f1(Math.max(...heap.map((h) => h.newSpace)) / 1e6)}) | — |`,
    `| heap after GC: first → last, slope after the first fifth | ${f1(heap[0]!.heapUsed / 1e6)} → ${f1(heap.at(-1)!.heapUsed / 1e6)} MB, ${f1(heapSlope)} MB/h | no upward trend |`,
    `| open fds: idle before → during (max) → idle after | ${fdBase} → ${Math.max(...samples.map((s) => s.fds))} → ${fdEnd} (${idleAfterS} s after the traffic) | back to baseline ${mark(ok.fds)} |`,
    `| log lines at level error or above during the traffic | ${errors.length}${errors.length ? ` (${[...new Set(errors.map((e) => e.msg))].join('; ')})` : ''} | 0 ${mark(ok.errors)} |`,
    `| … at shutdown | ${atStop.length}${atStop.length ? ` (${[...new Set(atStop.map((e) => e.msg))].join('; ')})` : ''} | — |`,
    `| exit code on SIGTERM | ${code} | 0 ${mark(ok.exit)} |`,
  ];
  if (traffic.examples.length) out.push('', `Unexpected answers, first ${traffic.examples.length}: ${traffic.examples.map((e) => `\`${e.replace(/`/g, "'")}\``).join('; ')}`);
  process.stdout.write(`\n${out.join('\n')}\n`);
  cleanup();
  return ok.answers && ok.rows && ok.fds && ok.exit ? 0 : 1;
}

if (import.meta.main) {
  main().then((code) => process.exit(code), (err: Error) => {
    log(`failed: ${err.stack ?? err.message}`);
    cleanup();
    process.exit(1);
  });
}
