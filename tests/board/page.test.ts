// The board page as a typed view of a Summary: every section a labelled block in reading order,
// the figures shown equal the fixture's, values a client chose (end users, session ids, model ids,
// run labels, tool names, addresses) escaped as text, an empty store a readable page, the route's
// headers and HEAD, and the formats numbers and times take.

import type { IncomingMessage, ServerResponse } from 'node:http';
import t from 'tap';
import { esc, figure, html, int, ms, pct, percent, relative, usd, utc, uptime } from '../../lib/board/html.ts';
import { PAGE_CSP, pageRoute, quiet, renderPage, SECTIONS } from '../../lib/board/page.ts';
import { stageOf } from '../../lib/board/page-spend.ts';
import { counts, figures, percentiles, table, type Column } from '../../lib/board/render.ts';
import { budgetBar, sparkline } from '../../lib/board/sparkline.ts';
import type { Summary } from '../../lib/board/types.ts';
import { MARKUP, NOW, quietSummary, sample } from './page-fixture.ts';

const ENTITIES: Record<string, string> = { '&lt;': '<', '&gt;': '>', '&quot;': '"', '&#39;': "'", '&amp;': '&' };
/** Markup to the text a reader sees: charts and tags dropped, entities decoded, whitespace collapsed. */
const text = (markup: string) => markup.replace(/<svg[^]*?<\/svg>/g, ' ').replace(/<[^>]*>/g, ' ').replace(/&(lt|gt|quot|#39|amp);/g, (e) => ENTITIES[e]).replace(/\s+/g, ' ').trim();

/** One section's markup (sections never nest). */
function sectionOf(page: string, id: string): string {
  const m = new RegExp(`<section id="${id}"[^>]*>([^]*?)</section>`).exec(page);
  if (!m) throw new Error(`no section ${id}`);
  return m[1];
}

/** The text of every row named `row` (data-row), column `label`, in a section. */
function cells(page: string, id: string, row: string, label: string): string[] {
  const rows = [...sectionOf(page, id).matchAll(new RegExp(`<tr data-row="${escRe(esc(row))}">([^]*?)</tr>`, 'g'))];
  const found = rows.flatMap((r) => {
    const m = new RegExp(`<td data-label="${escRe(esc(label))}"[^>]*>([^]*?)</td>`).exec(r[1]);
    return m ? [text(m[1])] : [];
  });
  if (found.length === 0) throw new Error(`no cell ${label} in ${id}/${row}`);
  return found;
}
const escRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const cell = (page: string, id: string, row: string, label: string) => cells(page, id, row, label)[0];

/** The figures of a `dl.kv` list in a piece of markup, label → text. */
function dl(markup: string): Record<string, string> {
  return Object.fromEntries([...markup.matchAll(/<div[^>]*><dt>([^]*?)<\/dt><dd>([^]*?)<\/dd><\/div>/g)].map((m) => [text(m[1]), text(m[2])]));
}

const now = Date.parse(NOW);

t.test('the escape helper', async (t) => {
  t.equal(esc(`<a href="x" onclick='y'>&</a>`), '&lt;a href=&quot;x&quot; onclick=&#39;y&#39;&gt;&amp;&lt;/a&gt;');
  t.equal(html`<p>${'<b>'}</p>`.text, '<p>&lt;b&gt;</p>', 'values are escaped');
  t.equal(html`<p>${html`<b>${'<i>'}</b>`}</p>`.text, '<p><b>&lt;i&gt;</b></p>', 'markup built by html is not escaped twice');
  t.equal(html`${['<', html`<br>`, null, undefined, false, 0]}`.text, '&lt;<br>0', 'arrays join; null, undefined and false vanish');
  t.equal(String(html`<i>`), '<i>');
});

t.test('formats', async (t) => {
  t.equal(usd(3.2), '$3.20');
  t.equal(usd(0.052), '$0.052');
  t.equal(usd(0.0013), '$0.00130');
  t.equal(usd(0.00000123), '$0.0000012');
  t.equal(usd(-2), '−$2.00');
  t.equal(usd('x'), '$0.00');
  t.equal(usd(null), '$0.00');
  t.equal(int(1234567.4), '1,234,567');
  t.equal(pct(0.43), '43 %');
  t.equal(pct(0.012), '1.2 %');
  t.equal(pct(0), '0 %');
  t.equal(percent(130), '130 %');
  t.equal(percent(6.5), '6.5 %');
  t.equal(percent(0.04), '< 0.1 %');
  t.equal(pct(0.0001), '< 0.1 %');
  t.equal(figure(8.1), '8.1');
  t.equal(figure(21), '21');
  t.equal(figure(1234.5), '1235');
  t.equal(figure(0.12345), '0.123');
  t.equal(ms(0.4), '0.4 ms');
  t.equal(ms(420), '420 ms');
  t.equal(ms(2400), '2.40 s');
  t.equal(ms(31_000), '31.0 s');
  t.equal(ms(null), '–');
  t.equal(utc('2026-11-24T09:30:12.000Z'), '2026-11-24 09:30 UTC');
  t.equal(utc('nope'), '–');
  t.equal(utc(5), '–');
  t.equal(relative('2026-11-25T00:00:00Z', now), 'in 14 h 30 min');
  t.equal(relative('2026-11-24T09:25:00Z', now), '5 min ago');
  t.equal(relative('2026-11-24T09:30:20Z', now), 'just now');
  t.equal(relative('2026-11-24T10:30:00Z', now), 'in 1 h');
  t.equal(relative('2026-12-01T00:00:00Z', now), 'in 7 days');
  t.equal(relative('x', now), '–');
  t.equal(relative(null, now), '–');
  t.equal(uptime(40), '40 s');
  t.equal(uptime(600), '10 min');
  t.equal(uptime(3 * 3600 + 300), '3 h 5 min');
  t.equal(uptime(3 * 86400 + 4 * 3600), '3 d 4 h');
  t.equal(percentiles({ p50: 420, p95: 1300, p99: null }), '420 ms · 1.30 s · –');
});

t.test('building blocks', async (t) => {
  const many = Array.from({ length: 60 }, (_, i) => ({ name: `n${i}`, count: i }));
  const cols: Array<Column<{ name: string; count: number }>> = [{ label: 'name', key: true, cell: (r) => r.name }, { label: 'count', cell: (r) => int(r.count) }];
  t.match(table(many, cols).text, /and 10 more/, 'long tables are cut at 50 rows');
  t.equal((table(many, cols, { max: 5 }).text.match(/<tr>/g) ?? []).length, 6, 'a header and 5 rows');
  t.match(table([], cols, { empty: 'Nothing <here>.' }).text, /<p class="empty">Nothing &lt;here&gt;\.<\/p>/);
  t.same(dl(figures([['a', '1'], false, ['b', html`<b>2</b>`]]).text), { a: '1', b: '2' }, 'false figures are left out');
  t.same(dl(counts({ ok: 3, error: 5, zero: 0 }).text), { error: '5', ok: '3' }, 'counts: zeros left out');
  t.match(counts({ a: 0 }, 'quiet').text, /quiet/);
  t.same(Object.keys(dl(counts({ b: 2, a: 2, c: 9 }).text)), ['c', 'a', 'b'], 'largest first, ties by name');
  t.match(table([], cols).text, /None yet\./, 'the default empty line');
});

t.test('charts', async (t) => {
  const s = sparkline([1, 2, 3], { label: '<requests>' }).text;
  t.match(s, /^<svg class="spark"/);
  t.match(s, /aria-label="&lt;requests&gt;"/, 'the label is escaped');
  t.match(s, /<polyline/);
  t.notMatch(sparkline([], { label: 'none' }).text, /polyline/, 'an empty series draws no line');
  t.match(sparkline([0, 0], { label: 'flat' }).text, /points="2.0,38.0 238.0,38.0"/, 'all zero: a flat line at the bottom');
  t.match(sparkline([5], { label: 'one' }).text, /cx="120.0"/, 'one point sits in the middle');
  t.match(sparkline([NaN, -1, 2], { label: 'odd' }).text, /polyline/, 'bad values count as zero');
  t.match(budgetBar(6, 5, 'blocked', 'x').text, /class="bar-fill" x="0" y="0" width="100.00"/, 'the fill stops at the end');
  t.match(budgetBar(1, 4, 'none', 'x').text, /width="25.00"/);
  t.match(budgetBar(1, 0, 'none', 'x').text, /class="bar-fill" x="0" y="0" width="0.00"/, 'no budget: no fill');
});

t.test('every section is a labelled block, in reading order', async (t) => {
  const page = renderPage(sample());
  const ids = [...page.matchAll(/<section id="([a-z_]+)" aria-labelledby="h-\1"><h2 id="h-\1">([^<]+)<\/h2>/g)].map((m) => [m[1], m[2]]);
  t.same(ids, SECTIONS.map(([id, title]) => [id, title]));
  t.same(ids.slice(0, 3).map(([id]) => id), ['spend', 'anomalies', 'requests'], 'spend first, then trouble');
  t.match(page, /<meta http-equiv="refresh" content="30">/, 'reloads every 30 s');
  t.notMatch(page, /No traffic yet/);
  t.notMatch(page, /https?:\/\/(?!www\.w3\.org)/, 'no other origin is named');
});

t.test('spend: bars, badges, reset, burn, run-out, drift — the fixture figures', async (t) => {
  const s = sample();
  const page = renderPage(s);
  const spend = sectionOf(page, 'spend');
  for (const p of s.spend.profiles) {
    const card = new RegExp(`<article class="profile" data-profile="${p.profile}">([^]*?)</article>`).exec(spend)![1];
    t.equal(text(/data-window="today"><div class="meter-head">([^]*?)<\/div>/.exec(card)![1]), `today ${usd(p.day_usd)} of ${usd(p.daily_budget_usd)} · ${percent(p.day_percent)}`, `${p.profile}: today against the daily budget`);
    t.equal(text(/data-window="this month"><div class="meter-head">([^]*?)<\/div>/.exec(card)![1]), `this month ${usd(p.month_usd)} of ${usd(p.monthly_budget_usd)} · ${percent(p.month_percent)}`, `${p.profile}: the month`);
    t.match(card, new RegExp(`<span class="badge badge-\\w+">${stageOf(p)}</span>`), `${p.profile}: its stage`);
    t.match(text(card), `resets ${relative(p.next_reset, now)} (${utc(p.next_reset)})`);
    const f = dl(card);
    t.equal(f['burn rate'], `${usd(p.burn_rate_usd_per_hour)} / h`);
    const runOut = { dev: `${relative(p.projected_exhaustion, now)} (${utc(p.projected_exhaustion)})`, tiny: 'already out', assistant: 'not before the reset' }[p.profile];
    t.equal(f['daily budget runs out'], runOut, `${p.profile}: when the day's budget runs out`);
    if (p.drift_usd === null) t.equal(f['ledger vs router (today)'], 'no usage snapshot yet');
    else t.match(f['ledger vs router (today)'], `ledger ${usd(p.ledger_day_usd)} · router ${usd(p.router_day_usd)} · drift ${usd(p.drift_usd)} ${p.drifted ? 'drifted' : 'in step'}`);
  }
  t.match(spend, /data-profile="tiny">[^]*?bar bar-blocked[^]*?bar bar-none/, "tiny's day bar is red, its month bar (6.5 %) is not");
  t.match(spend, /data-profile="assistant">[^]*?bar bar-fast-only/, "assistant's day at 73 % is amber");
  t.match(text(spend), `All profiles: ${usd(s.spend.total_day_usd)} today · ${usd(s.spend.total_month_usd)} this month`);
  const glance = text(/<div class="glance"[^>]*>([^]*?)<\/div><section/.exec(page)![1]);
  t.equal(glance, `spent today ${usd(s.spend.total_day_usd)} requests today ${int(s.requests.today.total)} degraded 2 of 3 anomalies 4`);
});

t.test('spend: keys against their own caps, sessions stopped at theirs — the fixture figures', async (t) => {
  const s = sample();
  const page = renderPage(s);
  for (const k of s.spend.keys) {
    const row = `${k.profile}:${k.name}`;
    t.equal(cell(page, 'spend', row, 'key'), k.name, `${k.name}: its name, as text`);
    t.equal(cell(page, 'spend', row, 'today'), `${usd(k.day_usd)} of ${usd(k.daily_usd)} · ${percent(k.day_percent)}`, `${k.name}: today against its daily cap`);
    t.equal(cell(page, 'spend', row, 'stage'), k.stage);
    t.equal(cell(page, 'spend', row, 'resets'), relative(k.next_reset, now));
  }
  t.equal(cell(page, 'spend', 'dev:ci-runner', 'this month'), `${usd(3.1)} of ${usd(5)} · 62 %`);
  t.equal(cell(page, 'spend', `dev:${MARKUP.keyName}`, 'this month'), `${usd(4.2)} · no cap`, 'a window without a cap: the spend alone');
  t.match(sectionOf(page, 'spend'), /data-row="dev:ci-runner">[^]*?badge-bad">blocked/, 'a blocked key is red');
  const stopped = s.spend.sessions_stopped[0]!;
  const id = `dev:${stopped.session}`;
  t.equal(cell(page, 'spend', id, 'session'), stopped.session, 'the session id, as text');
  t.equal(cell(page, 'spend', id, 'spent'), `${usd(2.1)} of ${usd(2)}`);
  t.equal(cell(page, 'spend', id, 'requests'), '37');
  t.equal(cell(page, 'spend', id, 'last seen'), '2 min ago');
  const dev = new RegExp('<article class="profile" data-profile="dev">([^]*?)</article>').exec(sectionOf(page, 'spend'))![1];
  t.equal(dl(dev)['session cap'], `${usd(2)} a session a day`, "a profile's session cap on its card");
  t.notOk('session cap' in dl(new RegExp('<article class="profile" data-profile="tiny">([^]*?)</article>').exec(sectionOf(page, 'spend'))![1]), 'none without one');
  const none = renderPage({ ...s, spend: { ...s.spend, keys: [], sessions_stopped: [] } });
  t.match(text(sectionOf(none, 'spend')), 'No key has caps of its own');
  t.match(text(sectionOf(none, 'spend')), 'No session reached its cap today.', 'a profile caps sessions, none reached it');
});

t.test('requests, models, routing, providers, cache — the fixture figures', async (t) => {
  const s = sample();
  const page = renderPage(s);
  for (const [id, name] of [['today', 'today'], ['last_24h', '24 h'], ['last_7d', '7 days'], ['month', 'this month']] as const) {
    const w = s.requests[id];
    t.equal(cell(page, 'requests', 'requests', name), int(w.total), `${id}: total`);
    t.equal(cell(page, 'requests', 'errors', name), int(w.errors));
    t.equal(cell(page, 'requests', 'cost', name), usd(w.cost_usd));
    for (const c of ['2xx', '4xx', '5xx', 'other']) t.equal(cell(page, 'requests', c, name), int(w.by_status_class[c]), `${id}: ${c}`);
  }
  for (const k of ['overhead_ms', 'ttfb_ms', 'duration_ms'] as const) {
    for (const q of ['p50', 'p95', 'p99'] as const) t.equal(cell(page, 'requests', k, q), ms(s.requests.last_24h.latency[k][q]), `${k} ${q}`);
  }
  const req = text(sectionOf(page, 'requests'));
  t.match(req, `Last 24 h by hour requests ${int(s.requests.by_hour.reduce((a, h) => a + h.requests, 0))} cost ${usd(s.requests.by_hour.reduce((a, h) => a + h.cost_usd, 0))}`, 'the sparklines carry their totals');
  t.match(req, `Last 7 days by day requests ${int(s.requests.by_day.reduce((a, d) => a + d.requests, 0))} cost ${usd(s.requests.by_day.reduce((a, d) => a + d.cost_usd, 0))}`);
  t.match(sectionOf(page, 'requests'), /aria-label="requests, 2026-11-23 10:00 UTC to 2026-11-24 09:00 UTC: [\d,]+"/, 'a chart names its span');
  t.equal((sectionOf(page, 'requests').match(/<svg class="spark"/g) ?? []).length, 4, 'four sparklines');
  t.same(dl(/Today by endpoint<\/h3>([^]*?)<\/dl>/.exec(sectionOf(page, 'requests'))![1] + '</dl>'), { chat: '300', messages: '112' });

  for (const m of s.models.today) {
    t.equal(cell(page, 'models', m.model, 'model'), m.model, 'the model id, as text');
    t.equal(cell(page, 'models', m.model, 'requests'), int(m.requests));
    t.equal(cell(page, 'models', m.model, 'cost'), usd(m.cost_usd));
    t.equal(cell(page, 'models', m.model, 'share'), pct(m.share));
    t.equal(cell(page, 'models', m.model, 'cache read'), int(m.cache_read_tokens));
    t.equal(cell(page, 'models', m.model, 'reasoning'), int(m.reasoning_tokens));
  }
  t.equal(cell(page, 'models', 'google/gemini-2.5-flash', 'input'), int(9_000_000), "the month's table");

  const agent = cells(page, 'routing', 'agent', 'today');
  t.same(agent, [`${int(150)} · ${usd(4.25)}`], 'agent tier today');
  t.same(cells(page, 'routing', 'reasoning', 'today'), [`0 · ${usd(0)}`], 'a tier seen this month only: zero today');
  t.same(cells(page, 'routing', 'fast', 'this month'), [`${int(4000)} · ${usd(10)}`, `${int(240)} · ${usd(0.06)}`], 'fast: per tier, then decided by sluice/auto');
  const r = dl(sectionOf(page, 'routing'));
  t.equal(r['auto decision calls'], `12 (${usd(0.0004)}) · 240 (${usd(0.008)})`);
  t.equal(r['rewritten by degradation'], '4 · 80');
  t.equal(r['fast-only · max-tokens today'], '3 · 1');
  t.equal(r['router fallbacks'], `2 (${pct(0.005)}) · 40 (${pct(0.005)})`);

  t.equal(cell(page, 'providers', 'Google', 'errors'), `2 (${pct(0.01)})`);
  t.equal(cell(page, 'providers', 'Google', 'TTFB p50 · p95 · p99'), '300 ms · 900 ms · 1.50 s');
  t.equal(cell(page, 'providers', 'unknown', 'TTFB p50 · p95 · p99'), 'no data', 'no TTFB');
  t.equal(cell(page, 'providers', 'Anthropic', 'requests'), '900', 'the 7-day table');

  const dev = s.cache.profiles[0];
  t.equal(cell(page, 'cache', 'dev', 'today: hit · saved'), `${pct(dev.today.hit_ratio)} · ${usd(dev.today.saved_usd)}`);
  t.equal(cell(page, 'cache', 'dev', 'month: hit · saved'), `${pct(dev.month.hit_ratio)} · ${usd(dev.month.saved_usd)}`);
  t.equal(cell(page, 'cache', 'dev', 'tokens read · written today'), `${int(dev.today.cache_read_tokens)} · ${int(dev.today.cache_write_tokens)}`);
  t.notMatch(sectionOf(page, 'cache'), /data-row="tiny"/, 'a profile without cache traffic has no row');
  t.same(dl(sectionOf(page, 'cache')), { dev: 'on', tiny: 'off' }, "every profile's l2_cache setting");
  t.match(text(sectionOf(page, 'cache')), 'l2_cache (read from profiles.yaml; nothing uses it)');
  const unused = renderPage({ ...s, cache: { profiles: [s.cache.profiles[1]] } });
  t.match(text(sectionOf(unused, 'cache')), 'No cache reads or writes this month.');
});

t.test('sessions, auth failures, tool logs, runs, health — the fixture figures', async (t) => {
  const s = sample();
  const page = renderPage(s);
  const sessions = text(sectionOf(page, 'sessions'));
  t.match(sessions, `${MARKUP.endUser} · ${MARKUP.session} dev · agent 14 ${usd(0.52)} 1 min ago`, 'an active session, its end user and id as text');
  t.notMatch(sessions, 'cc:4f1c2a8e-1b2c-4d5e-9f00-aaaaaaaaaaaa · cc:', 'a Claude Code session is its end user: named once');
  t.match(sessions, 'cc:4f1c2a8e-1b2c-4d5e-9f00-aaaaaaaaaaaa', "a Claude Code end user");
  t.match(sessions, `no end user assistant · none 40 ${usd(1.75)} 3 h ago`, 'no end user or session');
  t.match(sessions, 'Active in the last hour (2)');

  t.equal(dl(sectionOf(page, 'auth_failures')).today, '24');
  t.equal(dl(sectionOf(page, 'auth_failures')).unknown_key, '21');
  t.equal(cell(page, 'auth_failures', MARKUP.ip, 'address'), MARKUP.ip, 'the address as text');
  t.equal(cell(page, 'auth_failures', MARKUP.ip, 'now'), 'blocked');
  t.equal(cell(page, 'auth_failures', '192.0.2.7', 'now'), 'not blocked');
  t.match(text(sectionOf(page, 'auth_failures')), `10 min ago ${MARKUP.ip} sluice_dev_…zzzz unknown_key`);

  t.equal(cell(page, 'tool_logs', `dev:${MARKUP.tool}`, 'tool'), MARKUP.tool, 'the tool name as text');
  t.equal(cell(page, 'tool_logs', 'dev:get_weather', 'calls'), '11');

  const runs = text(sectionOf(page, 'benchmark_runs'));
  t.match(runs, `${MARKUP.run} 10 (1 errors) ${usd(0.05)} 1,000 in · 500 out · 40 cached · 5 reasoning 1.20 s · 2.00 s · 2.50 s 300 ms · 500 ms · 700 ms`);
  t.match(runs, 'baseline 4 $0.010 400 in · 100 out no data no data');

  const h = dl(sectionOf(page, 'health'));
  t.equal(h.status, 'degraded');
  t.equal(h['up for'], `${uptime(93784)} since ${utc(s.health.started_at)}`);
  t.equal(h.store, 'sqlite reachable');
  t.equal(h.counters, 'redis degraded');
  t.equal(h['rows written · pending'], '9,120 · 3');
  t.equal(h['cost reconciliation'], '40 given · 1 waiting · 0 abandoned');
  t.equal(h.rollups, 'backfilling (5,000 rows so far)');
  t.equal(h['raw rows kept'], '90 days (12 dropped)');
  t.equal(cell(page, 'health', 'backup', 'refreshed'), 'never');
  t.equal(cell(page, 'health', 'sim', 'refreshed'), '30 min ago');
  t.equal(cell(page, 'health', 'dev', 'key limit left'), `${usd(58.7)} of ${usd(100)}`);
  t.equal(cell(page, 'health', 'tiny', 'drift'), `${usd(0.8987)} drifted`);

  const anomalies = text(sectionOf(page, 'anomalies'));
  t.match(anomalies, `session spending: ${MARKUP.session} dev 8.1× over 5× spending 8× its usual`);
  t.match(anomalies, `auth failures: ${MARKUP.ip} – 21 over 10`);
  t.match(anomalies, `ledger drift: tiny tiny ${usd(0.8987)} over ${usd(0.05)}`, 'drift in dollars');
  t.match(anomalies, 'budget on course: dev dev 131 % over 100 %', 'a course in percent');
});

t.test('what a client chose shows as text, never as markup', async (t) => {
  const page = renderPage(sample());
  t.notMatch(page, /<script/i, 'no script element at all');
  for (const [what, raw] of Object.entries(MARKUP)) {
    if (raw.includes('<')) t.notOk(page.includes(raw), `${what}: the raw markup is not in the page`);
    t.ok(page.includes(esc(raw)), `${what}: shown escaped`);
  }
  t.notMatch(page, /<img|<svg onload|<b>run|<i>203/, 'no element made from a value');
});

t.test('an empty store is a readable page', async (t) => {
  const s = quietSummary();
  t.ok(quiet(s));
  t.notOk(quiet(sample()));
  t.notOk(quiet({ ...s, benchmark_runs: sample().benchmark_runs }), 'an old run is traffic');
  const page = renderPage(s);
  t.match(page, /No traffic yet/);
  t.same([...page.matchAll(/<section id="([a-z_]+)"/g)].map((m) => m[1]), SECTIONS.map(([id]) => id), 'every section is there');
  t.match(text(sectionOf(page, 'spend')), `today ${usd(0)} of ${usd(5)} · 0 %`, 'the budget still shows');
  t.equal(dl(sectionOf(page, 'spend'))['daily budget runs out'], 'nothing spent in the last hour');
  t.match(text(sectionOf(page, 'spend')), 'No key has caps of its own');
  t.match(text(sectionOf(page, 'spend')), 'No profile caps its sessions (session_daily_usd).');
  t.match(text(sectionOf(page, 'anomalies')), 'Nothing to look at.');
  t.match(text(sectionOf(page, 'models')), 'No model served.');
  t.match(text(sectionOf(page, 'sessions')), 'Nobody in the last hour.');
  t.match(text(sectionOf(page, 'tool_logs')), 'No tool called in the last 30 days.');
  t.match(text(sectionOf(page, 'benchmark_runs')), 'No request carried x-sluice-run yet.');
  t.match(text(sectionOf(page, 'auth_failures')), 'No failure today.');
  t.match(text(sectionOf(page, 'cache')), 'No profiles configured.');
  t.match(text(sectionOf(page, 'health')), 'No usage snapshot yet.');
  t.equal(dl(sectionOf(page, 'health')).rollups, 'backfilled (0 rows)');
  t.equal(dl(sectionOf(page, 'health'))['raw rows kept'], 'all');
  t.notOk('cost reconciliation' in dl(sectionOf(page, 'health')), 'no reconciliation before ring 1');
  const noSeries = renderPage({ ...s, requests: { ...s.requests, by_hour: [], by_day: [] } });
  t.match(sectionOf(noSeries, 'requests'), /aria-label="requests, – to –: 0"/, 'no points: empty charts, no crash');
  const none: Summary = { ...s, spend: { profiles: [], total_day_usd: 0, total_month_usd: 0, keys: [], sessions_stopped: [] } };
  t.match(text(sectionOf(renderPage(none), 'spend')), 'No profiles configured.');
});

/** Runs the page route once with a fake response; returns what it wrote. */
async function serve(compute: () => Promise<Summary>, method: string) {
  const logged: Array<[object, string]> = [];
  let head: { status: number; headers: Record<string, unknown> } | undefined;
  let body: Buffer | string | undefined;
  const res = {
    writeHead(status: number, headers: Record<string, unknown>) {
      head = { status, headers };
      return res;
    },
    end(b?: Buffer | string) {
      body = b;
    },
  };
  let computed = 0;
  const route = pageRoute(() => (computed++, compute()), { error: (obj, msg) => logged.push([obj, msg]) });
  await route({ method } as IncomingMessage, res as unknown as ServerResponse);
  return { ...head!, body, logged, computed };
}

t.test('the route: headers, HEAD, a failing summary', async (t) => {
  const get = await serve(async () => sample(), 'GET');
  t.equal(get.status, 200);
  t.equal(get.headers['content-type'], 'text/html; charset=utf-8');
  t.equal(get.headers['cache-control'], 'no-store');
  t.equal(get.headers['content-security-policy'], PAGE_CSP);
  t.match(PAGE_CSP, /default-src 'none'/);
  t.notMatch(PAGE_CSP, /script-src/, 'no script source at all');
  t.equal((get.body as Buffer).length, get.headers['content-length']);
  t.equal((get.body as Buffer).toString(), renderPage(sample()), 'the body is the view of the summary');

  const head = await serve(async () => sample(), 'HEAD');
  t.equal(head.status, 200);
  t.equal(head.headers['content-security-policy'], PAGE_CSP);
  t.equal(head.body, undefined, 'HEAD: no body');
  t.equal(head.computed, 0, 'HEAD computes nothing');

  const failed = await serve(async () => {
    throw new Error('store down');
  }, 'GET');
  t.equal(failed.status, 503);
  t.equal(failed.headers['retry-after'], '30');
  t.equal(failed.headers['content-security-policy'], PAGE_CSP, 'still under the CSP');
  t.match(String(failed.body), /could not be computed/);
  t.match(String(failed.body), /<meta http-equiv="refresh" content="30">/, 'and it still reloads');
  t.equal(failed.logged.length, 1, 'logged once');
  const [fields, msg] = failed.logged[0] as [{ err: Error }, string];
  t.equal(msg, 'board page could not be rendered');
  t.equal(fields.err.message, 'store down', 'with the error itself (its stack for pino)');
});
