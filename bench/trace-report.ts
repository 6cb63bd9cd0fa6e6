// The `--trace` table of `npm run bench`: per scenario, the CPU a request costs sluice with traces
// on (ratio 1: a SERVER and a CLIENT span per request, exported over OTLP http/protobuf to
// bench/otlp-sink.ts) against the same sluice without, measured in the same run and slices, with
// throughput beside it, peak memory, and what reached the sink. A traced sluice that exported
// nothing is a failure: its figures would be those of an untraced one.

import type { Measure } from './measure.ts';
import type { Scenario } from './scenarios.ts';
import type { Target } from './servers.ts';

export function traceReport(
  list: Scenario[], results: Map<string, Map<string, Measure>>, plain: Target, traced: Target,
  rows: { rows: number; ok: number }, sink: { exports: number; bytes: number },
): { text: string; ok: boolean } {
  const lines = [`### Traces on: ${traced.label} against ${plain.label}`, ''];
  lines.push('Ratio 1 (every request sampled), OTLP http/protobuf to a local sink that decodes nothing. CPU: the sluice process\'s utime+stime per request during the throughput slices.', '');
  lines.push('| scenario | CPU µs/req, off | on | added µs/req | added % | req/s, off | on |', '|---|---|---|---|---|---|---|');
  for (const s of list) {
    const off = results.get(s.name)!.get(plain.name)!;
    const on = results.get(s.name)!.get(traced.name)!;
    const added = on.cpu - off.cpu;
    lines.push(`| ${s.title} | ${off.cpu.toFixed(0)} | ${on.cpu.toFixed(0)} | ${added.toFixed(0)} | ${((added / off.cpu) * 100).toFixed(1)} % | ${off.rps.toFixed(0)} | ${on.rps.toFixed(0)} |`);
  }
  const exported = sink.exports > 0;
  const rowsOk = rows.rows === traced.sent && rows.ok === traced.sent;
  lines.push('', `Exported to the sink: ${sink.exports} OTLP requests, ${(sink.bytes / 1e6).toFixed(1)} MB (${traced.sent ? (sink.bytes / traced.sent).toFixed(0) : '–'} bytes per request sent) ${exported ? '✓' : '✗ nothing: is readTraceSettings (lib/trace/settings.ts) wired into `sluice serve`?'}. Rows recorded by the traced sluice: ${rows.rows} (${rows.ok} ok) for ${traced.sent} requests sent ${rowsOk ? '✓' : '✗'}. Peak RSS: ${plain.peakRss?.toFixed(0) ?? '–'} MiB off, ${traced.peakRss?.toFixed(0) ?? '–'} MiB on.`);
  return { text: lines.join('\n'), ok: exported && rowsOk };
}
