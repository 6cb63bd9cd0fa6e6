// The board's small charts as inline SVG: sparklines for series (requests, cost by hour or day) and
// horizontal bars for spend against budget. Pure functions of numbers to markup built with the
// page's one escape helper (lib/board/html.ts); they fetch nothing and never emit script or style
// elements, so the page stays within its Content-Security-Policy.

import { STAGE_FROM, type BudgetStage } from '../budget.ts';
import { html, type Html } from './html.ts';

export interface SparkOptions {
  /** What the chart shows, for screen readers and the hover title. */
  label: string;
  width?: number;
  height?: number;
}

/** A line with its area filled, scaled to the series' max; an all-zero series is a flat line. */
export function sparkline(values: readonly number[], opts: SparkOptions): Html {
  const w = opts.width ?? 240;
  const h = opts.height ?? 40;
  const pad = 2;
  const clean = values.map((v) => (Number.isFinite(v) && v > 0 ? v : 0));
  const max = Math.max(0, ...clean);
  const n = clean.length;
  const x = (i: number) => (n <= 1 ? w / 2 : pad + (i * (w - 2 * pad)) / (n - 1));
  const y = (v: number) => (max === 0 ? h - pad : h - pad - (v / max) * (h - 2 * pad));
  const pts = clean.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ');
  const area = n === 0 ? '' : `${x(0).toFixed(1)},${h - pad} ${pts} ${x(n - 1).toFixed(1)},${h - pad}`;
  const last = n === 0 ? undefined : { cx: x(n - 1).toFixed(1), cy: y(clean[n - 1]).toFixed(1) };
  return html`<svg class="spark" viewBox="0 0 ${w} ${h}" preserveAspectRatio="none" role="img" aria-label="${opts.label}"><title>${opts.label}</title>${n === 0 ? '' : html`<polygon class="spark-area" points="${area}"/><polyline class="spark-line" points="${pts}" fill="none" vector-effect="non-scaling-stroke"/>`}${last ? html`<circle class="spark-dot" cx="${last.cx}" cy="${last.cy}" r="2"/>` : ''}</svg>`;
}

/** The budget bar's marks: where the degradation stages begin (the bar's 100 is the budget). */
const MARKS = [STAGE_FROM['fast-only'], STAGE_FROM['max-tokens']].map((x) => html`<line class="bar-mark" x1="${x}" y1="0" x2="${x}" y2="10"/>`);

/**
 * A bar of `value` against `limit` (the budget). The fill stops at the end of the track; marks
 * show where degradation begins. `state`, a budget stage, colours it.
 */
export function budgetBar(value: number, limit: number, state: BudgetStage, label: string): Html {
  const ratio = limit > 0 ? Math.max(0, value / limit) : 0;
  const pct = Math.min(100, ratio * 100);
  return html`<svg class="bar bar-${state}" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label="${label}"><title>${label}</title><rect class="bar-track" x="0" y="0" width="100" height="10" rx="2"/><rect class="bar-fill" x="0" y="0" width="${pct.toFixed(2)}" height="10" rx="2"/>${MARKS}</svg>`;
}
