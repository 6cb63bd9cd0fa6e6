// The board page's building blocks: a section, a table of typed rows (cards on a phone, scrolling
// inside its block on a wide screen), a list of labelled figures, counts, percentiles and badges.
// Each takes typed values and returns markup built by the one escape helper (lib/board/html.ts);
// none of them reads the summary or decides what a section shows.

import { html, int, ms, type Html } from './html.ts';
import type { Percentiles } from './types.ts';

/** What one table cell may hold: markup built by `html`, or text (escaped). */
export type Cell = Html | string;

export interface Column<R> {
  label: string;
  cell: (row: R) => Cell;
  /** The row's name: bold, and a full-width line of its card on a phone. */
  key?: boolean;
  /** A long value (percentiles, a session id, token counts): a full-width line of its card on a phone. */
  wide?: boolean;
}

export interface TableOptions<R> {
  /** A stable name per row (`data-row`), for the tests and for anchors. */
  id?: (row: R) => string;
  /** Rows shown at most; the rest are counted below the table. */
  max?: number;
  /** What an empty list says. */
  empty?: string;
  /** Few short columns: stays a table on a phone instead of stacking into cards. */
  fit?: boolean;
}

/** One labelled block of the page; its heading's id names it for the browser test and screen readers. */
export function section(id: string, title: string, body: Html): Html {
  return html`<section id="${id}" aria-labelledby="h-${id}"><h2 id="h-${id}">${title}</h2>${body}</section>`;
}

/** A sub-heading inside a section. */
export function sub(title: string, body: Html): Html {
  return html`<div class="sub"><h3>${title}</h3>${body}</div>`;
}

export function empty(text: string): Html {
  return html`<p class="empty">${text}</p>`;
}

/** Rows as a table that scrolls inside its block, never the page; stacked into cards on a phone (page-style.ts). */
export function table<R>(rows: readonly R[], columns: Column<R>[], opts: TableOptions<R> = {}): Html {
  if (rows.length === 0) return empty(opts.empty ?? 'None yet.');
  const max = opts.max ?? 50;
  const shown = rows.slice(0, max);
  const more = rows.length - shown.length;
  const head = html`<thead><tr>${columns.map((c) => html`<th scope="col">${c.label}</th>`)}</tr></thead>`;
  const cls = (c: Column<R>) => [c.key && 'key', c.wide && 'wide'].filter(Boolean).join(' ');
  const body = shown.map((r) => html`<tr${opts.id ? html` data-row="${opts.id(r)}"` : ''}>${columns.map((c) => html`<td data-label="${c.label}"${cls(c) ? html` class="${cls(c)}"` : ''}>${c.cell(r)}</td>`)}</tr>`);
  return html`<div class="scroll ${opts.fit ? 'fit' : 'cards'}"><table>${head}<tbody>${body}</tbody></table></div>${more > 0 ? html`<p class="note">and ${int(more)} more</p>` : ''}`;
}

type Figure = readonly [label: string, value: Cell, wide?: 'wide'];

/** Labelled figures in a grid; `false` entries are left out (a figure the summary does not have); a wide one takes a full line. */
export function figures(items: ReadonlyArray<Figure | false>): Html {
  const shown = items.filter((i): i is Figure => i !== false);
  return html`<dl class="kv">${shown.map(([l, v, wide]) => html`<div${wide ? html` class="wide"` : ''}><dt>${l}</dt><dd>${v}</dd></div>`)}</dl>`;
}

/** A map of counts (outcome, endpoint, status class), largest first; zeros left out. */
export function counts(byName: Readonly<Record<string, number>>, none = 'none'): Html {
  const entries = Object.entries(byName).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));
  if (entries.length === 0) return empty(none);
  return figures(entries.map(([k, n]) => [k, int(n)] as const));
}

/** p50 · p95 · p99 on one line ('no data' when no request had the value). */
export function percentiles(p: Percentiles): string {
  if (p.p50 === null && p.p95 === null && p.p99 === null) return 'no data';
  return `${ms(p.p50)} · ${ms(p.p95)} · ${ms(p.p99)}`;
}

/** A small coloured word: a degradation stage, ok / blocked, yes / no. */
export function badge(kind: 'ok' | 'warn' | 'bad' | 'muted', text: string): Html {
  return html`<span class="badge badge-${kind}">${text}</span>`;
}
