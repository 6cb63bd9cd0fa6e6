// The `--caps` table of `npm run bench`: per scenario, the CPU a request costs a sluice whose key
// has daily and monthly caps and whose profile caps each session (every request then reads and
// adds the key's and the session's spend beside the profile's, lib/budget.ts) against the same
// sluice without caps, measured in the same run and slices. Caps are never reached, so both serve
// every request; the difference is what the team budget's extra counters cost.

import type { Measure } from './measure.ts';
import type { Scenario } from './scenarios.ts';
import type { Target } from './servers.ts';

export function capsReport(list: Scenario[], results: Map<string, Map<string, Measure>>, plain: Target, capped: Target, rows: { rows: number; ok: number }): { text: string; ok: boolean } {
  const lines = [`### Caps on: ${capped.label} against ${plain.label}`, ''];
  lines.push('The key capped per day and month, the profile capping each session, every request in one session; no cap reached. CPU: the sluice process\'s utime+stime per request during the throughput slices.', '');
  lines.push('| scenario | CPU µs/req, no caps | caps | added µs/req | added % | req/s, no caps | caps |', '|---|---|---|---|---|---|---|');
  for (const s of list) {
    const off = results.get(s.name)!.get(plain.name)!;
    const on = results.get(s.name)!.get(capped.name)!;
    const added = on.cpu - off.cpu;
    lines.push(`| ${s.title} | ${off.cpu.toFixed(0)} | ${on.cpu.toFixed(0)} | ${added.toFixed(0)} | ${((added / off.cpu) * 100).toFixed(1)} % | ${off.rps.toFixed(0)} | ${on.rps.toFixed(0)} |`);
  }
  const ok = rows.rows === capped.sent && rows.ok === capped.sent;
  lines.push('', `Rows recorded by the capped sluice: ${rows.rows} (${rows.ok} ok) for ${capped.sent} requests sent ${ok ? '✓' : '✗'}.`);
  return { text: lines.join('\n'), ok };
}
