// Counters and histograms kept as plain numbers until a scrape reads them: the per-row metrics of
// lib/board/metrics.ts. prom-client hashes a child's labels on every inc() and observe(); here a
// row finds its cells once (a map lookup on a key the caller builds) and then only adds. Each
// family registers itself on a prom-client Registry as a custom metric (`get()` in the shape the
// registry renders), so /metrics stays one text exposition with the default metrics beside it.

import type { Registry } from 'prom-client';

type Labels = Record<string, string>;
interface Value { labels: Labels; value: number; metricName?: string }

/** A counter cell: one label combination. */
export interface CounterCell { value: number }

/** A histogram cell: per-bucket counts (not cumulative; the last slot is +Inf), sum and count. */
export interface HistogramCell { counts: Float64Array; sum: number; count: number }

abstract class Family<Cell> {
  readonly name: string;
  readonly help: string;
  abstract readonly type: 'counter' | 'histogram';
  protected readonly labelNames: readonly string[];
  protected readonly cells = new Map<string, { labels: Labels; cell: Cell }>();

  constructor(opts: { name: string; help: string; labelNames: readonly string[]; registry: Registry }) {
    this.name = opts.name;
    this.help = opts.help;
    this.labelNames = opts.labelNames;
    opts.registry.registerMetric(this as never);
  }

  protected abstract fresh(): Cell;

  /** The cell of these label values (in labelNames order), made on first use and kept. */
  cell(...values: string[]): Cell {
    const key = values.join('\u0000');
    let c = this.cells.get(key);
    if (!c) this.cells.set(key, (c = { labels: Object.fromEntries(this.labelNames.map((n, i) => [n, values[i]])), cell: this.fresh() }));
    return c.cell;
  }

  protected abstract values(): Value[];

  /** What prom-client's Registry renders (its custom-metric interface). */
  get(): { name: string; help: string; type: string; values: Value[]; aggregator: 'sum' } {
    return { name: this.name, help: this.help, type: this.type, values: this.values(), aggregator: 'sum' };
  }

  reset(): void {
    this.cells.clear();
  }
}

export class CounterFamily extends Family<CounterCell> {
  readonly type = 'counter' as const;
  protected fresh(): CounterCell {
    return { value: 0 };
  }
  protected values(): Value[] {
    return [...this.cells.values()].map(({ labels, cell }) => ({ labels, value: cell.value }));
  }
}

export class HistogramFamily extends Family<HistogramCell> {
  readonly type = 'histogram' as const;
  private readonly bounds: readonly number[];

  constructor(opts: { name: string; help: string; labelNames: readonly string[]; registry: Registry; buckets: readonly number[] }) {
    super(opts);
    this.bounds = [...opts.buckets].sort((a, b) => a - b);
  }

  protected fresh(): HistogramCell {
    return { counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0 };
  }

  /** Counts one value into a cell of this family. */
  observe(cell: HistogramCell, v: number): void {
    const b = this.bounds;
    let i = 0;
    while (i < b.length && v > b[i]) i++;
    cell.counts[i] += 1;
    cell.sum += v;
    cell.count += 1;
  }

  protected values(): Value[] {
    const out: Value[] = [];
    for (const { labels, cell } of this.cells.values()) {
      let cumulative = 0;
      for (let i = 0; i <= this.bounds.length; i++) {
        cumulative += cell.counts[i];
        out.push({ metricName: `${this.name}_bucket`, labels: { ...labels, le: i < this.bounds.length ? String(this.bounds[i]) : '+Inf' }, value: cumulative });
      }
      out.push({ metricName: `${this.name}_sum`, labels, value: cell.sum });
      out.push({ metricName: `${this.name}_count`, labels, value: cell.count });
    }
    return out;
  }
}
