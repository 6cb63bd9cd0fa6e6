// The board page (`GET /`): one server-rendered HTML document, a typed view of the `Summary` that
// `GET /api/summary` serves (the same function computes both; the page never queries). Phone
// first, light and dark from the system, reloads every 30 s, inline CSS and SVG only: it makes no
// request to any origin, and its Content-Security-Policy forbids scripts outright. Every value is
// escaped through lib/board/html.ts; whatever a client chose shows as text.

import type { IncomingMessage, ServerResponse } from 'node:http';
import { Html, html, utc } from './html.ts';
import { authFailuresSection, benchmarkRunsSection, healthSection, sessionsSection, toolLogsSection } from './page-activity.ts';
import { anomaliesSection, glance, spendSection } from './page-spend.ts';
import { PAGE_CSS } from './page-style.ts';
import { cacheSection, modelsSection, providersSection, requestsSection, routingSection } from './page-traffic.ts';
import { section } from './render.ts';
import type { Summary } from './types.ts';

/** The sections in the order an operator reads them, spend first, then trouble: [summary key, heading, body]. */
export const SECTIONS: ReadonlyArray<readonly [keyof Summary, string, (s: Summary, now: number) => Html]> = [
  ['spend', 'Spend', spendSection],
  ['anomalies', 'Anomalies', (s) => anomaliesSection(s.anomalies)],
  ['requests', 'Requests', requestsSection],
  ['models', 'Models', modelsSection],
  ['routing', 'Routing', routingSection],
  ['providers', 'Providers', providersSection],
  ['cache', 'Cache', cacheSection],
  ['sessions', 'Sessions', sessionsSection],
  ['auth_failures', 'Auth failures', authFailuresSection],
  ['tool_logs', 'Tool logs', toolLogsSection],
  ['benchmark_runs', 'Benchmark runs', benchmarkRunsSection],
  ['health', 'Health', (s, now) => healthSection(s.health, now)],
];

export const RELOAD_S = 30;
export const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** Nothing has gone through sluice in any window the summary covers. */
export function quiet(s: Summary): boolean {
  const r = s.requests;
  return r.today.total + r.last_24h.total + r.last_7d.total + r.month.total === 0 && s.benchmark_runs.length === 0;
}

/** The whole page for one summary. `now` is the summary's own time, so a render is reproducible. */
export function renderPage(s: Summary): string {
  const now = Date.parse(s.generated_at);
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="refresh" content="${RELOAD_S}"><meta name="color-scheme" content="light dark"><meta name="referrer" content="no-referrer"><title>sluice board</title><link rel="icon" href="data:,"><style>${new Html(PAGE_CSS)}</style></head>
<body><header class="top"><h1>sluice</h1><p class="muted">${s.version} · ${utc(s.generated_at)} · reloads every ${RELOAD_S} s</p></header>
<main>${quiet(s) ? html`<p class="notice" role="status">No traffic yet: nothing has gone through sluice. The budgets below start at zero; this page fills in as requests arrive.</p>` : ''}${glance(s)}${SECTIONS.map(([id, title, view]) => section(id, title, view(s, now)))}</main>
<footer class="muted">Times are UTC, as budgets reset at UTC midnight. The same data as JSON: <a href="/api/summary">/api/summary</a>.</footer>
</body></html>
`.text;
}

/** `GET|HEAD /`: the page from a fresh summary; never cached, never framed, no script allowed.
 * HEAD answers the headers without computing; a summary that cannot be computed answers 503, logged. */
export function pageRoute(compute: () => Promise<Summary>, log: { error(obj: object, msg: string): void }) {
  return async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    const headers = {
      'content-type': 'text/html; charset=utf-8',
      'cache-control': 'no-store',
      'content-security-policy': PAGE_CSP,
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
    };
    if (req.method === 'HEAD') {
      res.writeHead(200, headers).end();
      return;
    }
    let body: Buffer;
    try {
      body = Buffer.from(renderPage(await compute()));
    } catch (err) {
      log.error({ err }, 'board page could not be rendered');
      res.writeHead(503, { ...headers, 'retry-after': String(RELOAD_S) }).end(UNAVAILABLE);
      return;
    }
    res.writeHead(200, { ...headers, 'content-length': body.length }).end(body);
  };
}

/** What the page says when the store cannot answer: still reloads, so it recovers by itself. */
const UNAVAILABLE = html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><meta http-equiv="refresh" content="${RELOAD_S}"><meta name="color-scheme" content="light dark"><title>sluice board</title><link rel="icon" href="data:,"><style>${new Html(PAGE_CSS)}</style></head>
<body><header class="top"><h1>sluice</h1></header><main><p class="notice" role="alert">The board could not be computed just now (see the gateway's log). This page tries again every ${RELOAD_S} s.</p></main></body></html>
`.text;
