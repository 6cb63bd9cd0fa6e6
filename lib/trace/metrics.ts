// The count of spans the tracers of this process dropped, and its Prometheus counter
// (`sluice_trace_spans_dropped_total`, by reason): `queue_full` when a span ended with the export
// queue full (lib/trace/tracing.ts bounds it), `export` when the export of its batch failed (the
// collector down, too slow for the export timeout, or answering an error). The board's /metrics
// registers it with registerTraceMetrics(registry); it reads 0 while tracing is off. Nothing here
// loads the OpenTelemetry SDK.

import { Counter, type Registry } from 'prom-client';

export const DROP_REASONS = ['queue_full', 'export'] as const;
export type DropReason = (typeof DROP_REASONS)[number];

/** Spans dropped by every tracer of this process since it started. */
const totals: Record<DropReason, number> = { queue_full: 0, export: 0 };

/** Adds spans a tracer dropped (lib/trace/tracing.ts calls it). */
export function countDropped(reason: DropReason, spans: number): void {
  totals[reason] += spans;
}

/** The process's totals so far, by reason (a copy). */
export function droppedTotals(): Record<DropReason, number> {
  return { ...totals };
}

/** Registers `sluice_trace_spans_dropped_total{reason}` on `registry`; each scrape reads the totals. */
export function registerTraceMetrics(registry: Registry): void {
  const shown: Record<DropReason, number> = { queue_full: 0, export: 0 };
  const counter = new Counter({
    name: 'sluice_trace_spans_dropped_total',
    help: 'Trace spans dropped, by reason: queue_full (the export queue was full) or export (the export of their batch failed).',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      for (const r of DROP_REASONS) {
        this.labels(r).inc(totals[r] - shown[r]);
        shown[r] = totals[r];
      }
    },
  });
  for (const r of DROP_REASONS) counter.labels(r).inc(0);
}
