// The tables of `npm run bench`'s variants, each one more sluice beside the plain one on the first
// store, measured in the same run and slices: per scenario, the CPU a request costs the variant
// against the plain sluice, with throughput beside it.
// - `--trace`: traces on (ratio 1: a SERVER and a CLIENT span per request, exported over OTLP
//   http/protobuf to bench/otlp-sink.ts), with peak memory and what reached the sink. A traced
//   sluice that exported nothing is a failure: its figures would be those of an untraced one.
// - `--caps`: its key capped per day and month and its profile capping each session, every request
//   in one session, no cap reached: what the team budget's extra counters cost (lib/budget.ts).

import type { Measure } from './measure.ts';
import type { Scenario } from './scenarios.ts';
import type { Target } from './servers.ts';

type Results = Map<string, Map<string, Measure>>;
type Rows = { rows: number; ok: number };

/** The CPU table: `off` and `on` name the plain and the variant columns. */
function cpuTable(list: Scenario[], results: Results, plain: Target, variant: Target, off: string, on: string): string[] {
  const lines = [`| scenario | CPU µs/req, ${off} | ${on} | added µs/req | added % | req/s, ${off} | ${on} |`, '|---|---|---|---|---|---|---|'];
  for (const s of list) {
    const a = results.get(s.name)!.get(plain.name)!;
    const b = results.get(s.name)!.get(variant.name)!;
    const added = b.cpu - a.cpu;
    lines.push(`| ${s.title} | ${a.cpu.toFixed(0)} | ${b.cpu.toFixed(0)} | ${added.toFixed(0)} | ${((added / a.cpu) * 100).toFixed(1)} % | ${a.rps.toFixed(0)} | ${b.rps.toFixed(0)} |`);
  }
  return lines;
}

const CPU_NOTE = 'CPU: the sluice process\'s utime+stime per request during the throughput slices.';

function rowsOk(rows: Rows, t: Target): boolean {
  return rows.rows === t.sent && rows.ok === t.sent;
}

/** What the clients saw of each: failures (non-2xx and transport errors) and p99 at each open-loop rate. */
function clientTable(list: Scenario[], results: Results, plain: Target, variant: Target, off: string, on: string): string[] {
  const rates = [...results.get(list[0]!.name)!.get(plain.name)!.lats.keys()];
  const lines = [`| scenario | failures, ${off} / ${on} | ${rates.map((r) => `p99 at ${r} req/s, ${off} / ${on} (ms)`).join(' | ')} |`, `|---|---|${rates.map(() => '---').join('|')}|`];
  for (const s of list) {
    const a = results.get(s.name)!.get(plain.name)!;
    const b = results.get(s.name)!.get(variant.name)!;
    lines.push(`| ${s.title} | ${a.failures} / ${b.failures} | ${rates.map((r) => `${a.lats.get(r)!.p99.toFixed(2)} / ${b.lats.get(r)!.p99.toFixed(2)}`).join(' | ')} |`);
  }
  return lines;
}

/** `sinkMode`: how the sink answered (bench/otlp-sink.ts): ok, or a collector in trouble (reset, slow), to which nothing is exported. */
export function traceReport(list: Scenario[], results: Results, plain: Target, traced: Target, rows: Rows, sink: { exports: number; bytes: number }, sinkMode = 'ok'): { text: string; ok: boolean } {
  const lines = [`### Traces on: ${traced.label} against ${plain.label}${sinkMode === 'ok' ? '' : `, collector ${sinkMode === 'reset' ? 'resetting every export' : 'never answering'}`}`, ''];
  lines.push(`Ratio 1 (every request sampled), OTLP http/protobuf to a local sink that decodes nothing. ${CPU_NOTE}`, '');
  lines.push(...cpuTable(list, results, plain, traced, 'off', 'on'));
  lines.push('', ...clientTable(list, results, plain, traced, 'off', 'on'));
  // A collector in trouble takes nothing, by design; a healthy one must have taken something.
  const exported = sinkMode === 'ok' ? sink.exports > 0 : sink.exports === 0;
  const ok = rowsOk(rows, traced);
  lines.push('', `Exported to the sink: ${sink.exports} OTLP requests, ${(sink.bytes / 1e6).toFixed(1)} MB (${traced.sent ? (sink.bytes / traced.sent).toFixed(0) : '–'} bytes per request sent) ${exported ? '✓' : '✗ nothing: is readTraceSettings (lib/trace/settings.ts) wired into `sluice serve`?'}. Rows recorded by the traced sluice: ${rows.rows} (${rows.ok} ok) for ${traced.sent} requests sent ${ok ? '✓' : '✗'}. Peak RSS: ${plain.peakRss?.toFixed(0) ?? '–'} MiB off, ${traced.peakRss?.toFixed(0) ?? '–'} MiB on.`);
  return { text: lines.join('\n'), ok: exported && ok };
}

export function capsReport(list: Scenario[], results: Results, plain: Target, capped: Target, rows: Rows): { text: string; ok: boolean } {
  const lines = [`### Caps on: ${capped.label} against ${plain.label}`, ''];
  lines.push(`The key capped per day and month, the profile capping each session, every request in one session; no cap reached. ${CPU_NOTE}`, '');
  lines.push(...cpuTable(list, results, plain, capped, 'no caps', 'caps'));
  const ok = rowsOk(rows, capped);
  lines.push('', `Rows recorded by the capped sluice: ${rows.rows} (${rows.ok} ok) for ${capped.sent} requests sent ${ok ? '✓' : '✗'}.`);
  return { text: lines.join('\n'), ok };
}
