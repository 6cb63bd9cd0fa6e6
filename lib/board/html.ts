// The board page's one escape helper: the `html` template tag escapes every value put into it,
// except markup that `html` itself built. Whatever a client chose (an end user, a model id, a run
// label, a tool name) reaches the page only through here, so it shows as text and never runs.
// Also the number and time formats the page shows. Nothing here reads the summary.

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Markup built by `html`: safe to put into more markup as is. */
export class Html {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
  toString(): string {
    return this.text;
  }
}

/** The escape: text for an HTML text node or a quoted attribute value. */
export function esc(value: unknown): string {
  return String(value).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

function piece(v: unknown): string {
  if (v instanceof Html) return v.text;
  if (v === null || v === undefined || v === false) return '';
  if (Array.isArray(v)) return v.map(piece).join('');
  return esc(v);
}

/** Tagged template: the literal parts are markup, every value is escaped (arrays joined). */
export function html(strings: TemplateStringsArray, ...values: unknown[]): Html {
  let out = strings[0];
  for (let i = 0; i < values.length; i++) out += piece(values[i]) + strings[i + 1];
  return new Html(out);
}

const num = (v: unknown): number => (typeof v === 'number' && Number.isFinite(v) ? v : 0);

/** Dollars: cents from $1 up, more digits below so small requests do not read as $0.00. */
export function usd(v: unknown): string {
  const n = num(v);
  const a = Math.abs(n);
  const digits = a === 0 || a >= 1 ? 2 : a >= 0.01 ? 3 : a >= 0.0001 ? 5 : 7;
  return `${n < 0 ? '−' : ''}$${a.toFixed(digits)}`;
}

export function int(v: unknown): string {
  return Math.round(num(v)).toLocaleString('en-US');
}

/** A ratio (0..1) as a percentage. */
export function pct(ratio: unknown): string {
  return percent(num(ratio) * 100);
}

/** A figure already in percent (a budget's 64.2) as `64 %`; one decimal below 10. */
export function percent(value: unknown): string {
  const n = num(value);
  if (n !== 0 && Math.abs(n) < 0.1) return '< 0.1 %';
  return `${Math.abs(n) >= 10 || n === 0 ? n.toFixed(0) : n.toFixed(1)} %`;
}

/** A plain figure (an anomaly's measure): whole numbers with separators, else up to 3 decimals. */
export function figure(value: unknown): string {
  const n = num(value);
  if (Number.isInteger(n)) return int(n);
  return n.toFixed(Math.abs(n) >= 100 ? 0 : 3).replace(/\.?0+$/, '');
}

/** Milliseconds as ms below a second, else seconds; null as a dash. */
export function ms(v: unknown): string {
  if (v === null || v === undefined || typeof v !== 'number' || !Number.isFinite(v)) return '–';
  return v < 1000 ? `${v < 10 ? v.toFixed(1) : Math.round(v)} ms` : `${(v / 1000).toFixed(v < 10_000 ? 2 : 1)} s`;
}

/** An ISO time as `YYYY-MM-DD HH:MM UTC` (the board shows UTC everywhere, as budgets reset in UTC). */
export function utc(iso: unknown): string {
  if (typeof iso !== 'string' || iso === '') return '–';
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return '–';
  return `${new Date(t).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** How far `iso` lies from `now` (ms), as "in 3 h 20 min" or "5 min ago". */
export function relative(iso: unknown, now: number): string {
  if (typeof iso !== 'string') return '–';
  const t = Date.parse(iso);
  if (!Number.isFinite(t)) return '–';
  const d = Math.round((t - now) / 60_000);
  const a = Math.abs(d);
  if (a < 1) return 'just now';
  const span = a < 60 ? `${a} min` : a < 48 * 60 ? `${Math.floor(a / 60)} h${a % 60 ? ` ${a % 60} min` : ''}` : `${Math.round(a / 1440)} days`;
  return d >= 0 ? `in ${span}` : `${span} ago`;
}

/** Seconds of uptime as "3 d 4 h", "2 h 5 min" or "40 s". */
export function uptime(seconds: unknown): string {
  const s = Math.max(0, Math.round(num(seconds)));
  if (s < 60) return `${s} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h} h ${m % 60} min`;
  return `${Math.floor(h / 24)} d ${h % 24} h`;
}
