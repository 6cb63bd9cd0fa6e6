// The board as a person sees it: Debian's chromium (playwright-core) loads `/` at 390×844 and at
// 1280×800 after real traffic on both dialects, on SQLite and on Postgres. Every section's heading
// is there; the key figures equal what `/api/summary` says; the phone view never scrolls sideways;
// the page asks no other origin for anything, logs no console error, reloads every 30 s; markup
// an end user, a run label and a tool name carried shows as text without running; a key with caps
// of its own and a session stopped at its cap show in the spend section. Screenshots
// (light at both sizes, dark on the phone, and the spend section alone) go to .tap/ and /tmp/sluice-board-*.png.

import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import t from 'tap';
import { int, usd } from '../../lib/board/html.ts';
import { SECTIONS } from '../../lib/board/page.ts';
import type { Summary } from '../../lib/board/types.ts';
import { boardTraffic, LIMITED, MARKUP_RUN, MARKUP_TOOL, MARKUP_USER } from '../helpers/board-traffic.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const ARGS = ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-sync'];
const SHOTS = join(process.cwd(), '.tap');
const SERVED = 'google/gemini-2.5-flash';
/** A profile whose sessions may spend 0.00001 USD a day: one answer stops a session. */
const LOOPED = `  looped:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    session_daily_usd: 0.00001
`;

/**
 * The caps' share of the board: board-dev (already spent on) given caps of its own, and a looping
 * session of the looped profile stopped at its cap (its second request refused). Returns the rows it left.
 */
async function capsTraffic(h: Harness): Promise<number> {
  await h.store.setKeyCaps('dev', 'board-dev', { daily_usd: 1, monthly_usd: 10 });
  const key = await h.key('looped', { name: 'board-looper' });
  const send = () => fetch(`${h.url}/v1/messages`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01', 'x-claude-code-session-id': 'loop-on-the-board', 'x-sim': 'chunks=50' },
    body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'again' }] }),
  });
  const before = h.rowCount();
  const first = await send();
  await first.arrayBuffer();
  if (first.status !== 200) throw new Error(`the looping session's first request: ${first.status}`);
  await h.rows(before + 1); // its cost counts toward the session as its row is recorded
  const second = await send();
  await second.arrayBuffer();
  if (second.status !== 429) throw new Error(`the looping session's second request: ${second.status}, not the session cap's 429`);
  return 1;
}

/** The page's width and its scrolling width (the DOM's globals, named through globalThis: the tests compile without the DOM library). */
function widths(page: Page): Promise<[number, number]> {
  return page.evaluate(() => {
    const g = globalThis as any;
    return [g.document.scrollingElement.scrollWidth, g.innerWidth] as [number, number];
  });
}

/** WCAG contrast of the body text and of the muted text against a section's background. */
async function contrasts(page: Page): Promise<{ text: number; muted: number; background: string }> {
  const [fg, muted, bg] = await page.evaluate(() => {
    const g = globalThis as any;
    const color = (sel: string, prop: string) => g.getComputedStyle(g.document.querySelector(sel))[prop] as string;
    return [color('section', 'color'), color('section .muted, section .note', 'color'), color('section', 'backgroundColor')];
  });
  const lum = (rgb: string) => {
    const [r, g, b] = rgb.match(/\d+(\.\d+)?/g)!.slice(0, 3).map((c) => {
      const v = Number(c) / 255;
      return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a: string, b: string) => (Math.max(lum(a), lum(b)) + 0.05) / (Math.min(lum(a), lum(b)) + 0.05);
  return { text: ratio(fg, bg), muted: ratio(muted, bg), background: bg };
}

/** The whole page, or one element of it. */
async function shot(page: Page, name: string, selector?: string): Promise<void> {
  const path = join(SHOTS, `${name}.png`);
  if (selector) await page.locator(selector).screenshot({ path });
  else await page.screenshot({ path, fullPage: true });
  copyFileSync(path, `/tmp/sluice-${name}.png`);
}

t.test('the board in a browser', async (t) => {
  const browser: Browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ARGS });
  t.teardown(() => browser.close());
  mkdirSync(SHOTS, { recursive: true });

  await t.test('an empty store', async (t) => {
    const h = await startHarness(t);
    const context = await browser.newContext({ viewport: { width: 390, height: 844 } });
    t.teardown(() => context.close());
    const page = await context.newPage();
    t.equal((await page.goto(`${h.url}/`))?.status(), 200);
    t.match(await page.locator('[role="status"]').innerText(), /No traffic yet/);
    for (const [key, title] of SECTIONS) t.equal((await page.locator(`#h-${key}`).innerText()).trim(), title, `${title}: heading present`);
    const [scrollWidth, innerWidth] = await widths(page);
    t.ok(scrollWidth <= innerWidth, `no horizontal scroll (${scrollWidth} ≤ ${innerWidth})`);
  });

  for (const store of ['sqlite', 'postgres'] as const) {
    await t.test(store, async (t) => {
      const h = await startHarness(t, { extraProfiles: `${LIMITED.extraProfiles}${LOOPED}`, env: { ...LIMITED.env, SLUICE_UPSTREAM_KEY_LOOPED: 'sk-or-v1-loopedloopedloopedloopedloopedloopedloopedloopedlooped' }, store });
      const traffic = await boardTraffic(h);
      const rows = await h.rows(traffic.rows + (await capsTraffic(h)));
      const summary = (await (await fetch(`${h.url}/api/summary`)).json()) as Summary;
      const dev = summary.spend.profiles.find((p) => p.profile === 'dev')!;
      // The summary against the store it reads (the page is then checked against the summary).
      t.equal(summary.requests.today.total, rows.length, 'the summary counts every request of today');
      // Budgets count whole micro-dollars per request (lib/budget.ts), so the rows are summed that way.
      const devRows = rows.filter((r) => r.profile === 'dev').reduce((a, r) => a + Math.round(r.cost_usd * 1e6), 0) / 1e6;
      t.ok(devRows > 0 && Math.abs(dev.day_usd - devRows) < 1e-9, `dev's day spend is its rows' cost (${dev.day_usd} vs ${devRows})`);
      t.ok(summary.models.today.some((m) => m.model === SERVED), 'a served model');
      t.ok(summary.tool_logs.some((x) => x.name === MARKUP_TOOL), 'the tool with markup in its name');
      t.ok(summary.benchmark_runs.some((r) => r.run === MARKUP_RUN), 'the run label with markup');
      t.ok(summary.sessions.active.some((s) => s.end_user === MARKUP_USER), 'the end user with markup');
      const capped = summary.spend.keys.find((k) => k.name === 'board-dev')!;
      t.match(capped, { profile: 'dev', daily_usd: 1, monthly_usd: 10 }, 'board-dev has caps of its own');
      const devKey = (await h.store.listKeys('dev')).find((k) => k.name === 'board-dev')!;
      // Its caps came after its requests, so its counter is seeded from the ledger: the rows' sum, rounded once to the micro-dollar.
      const devKeyRows = Math.round(rows.filter((r) => r.key_id === devKey.id).reduce((a, r) => a + r.cost_usd, 0) * 1e6) / 1e6;
      t.ok(devKeyRows > 0 && Math.abs(capped.day_usd - devKeyRows) < 1e-9, `its spend today is its rows' cost (${capped.day_usd} vs ${devKeyRows})`);
      t.match(summary.spend.sessions_stopped, [{ profile: 'looped', session: 'loop-on-the-board', cap_usd: 0.00001, requests: 1 }], 'the looping session, stopped');

      for (const [width, height] of [[390, 844], [1280, 800]] as const) {
        await t.test(`${width}×${height}`, async (t) => {
          const context = await browser.newContext({ viewport: { width, height } });
          t.teardown(() => context.close());
          const page = await context.newPage();
          const origin = new URL(h.url).origin;
          const requests: string[] = [];
          const consoleErrors: string[] = [];
          const dialogs: string[] = [];
          page.on('request', (r) => requests.push(r.url()));
          page.on('console', (m) => m.type() === 'error' && consoleErrors.push(m.text()));
          page.on('pageerror', (e) => consoleErrors.push(String(e)));
          page.on('dialog', (d) => {
            dialogs.push(d.message());
            void d.dismiss();
          });
          const res = await page.goto(`${h.url}/`, { waitUntil: 'load' });
          t.equal(res?.status(), 200);
          t.match(res?.headers()['content-security-policy'], /default-src 'none'/);

          for (const [key, title] of SECTIONS) {
            t.equal((await page.locator(`#h-${key}`).innerText()).trim(), title, `${title}: heading present`);
            t.ok(await page.locator(`section#${key}`).isVisible(), `${title}: block visible`);
          }
          // Key figures, each where the page puts it, equal to the summary's.
          const devToday = await page.locator('#spend [data-profile="dev"] [data-window="today"] .meter-head').innerText();
          t.match(devToday, `${usd(dev.day_usd)} of ${usd(dev.daily_budget_usd)}`, "dev's day spend against its budget");
          for (const p of summary.spend.profiles) t.ok(await page.locator(`#spend [data-profile="${p.profile}"]`).isVisible(), `${p.profile} has its spend block`);
          t.equal(await page.locator('#requests tr[data-row="requests"] td[data-label="today"]').innerText(), int(summary.requests.today.total), "today's request total");
          t.match(await page.locator('#spend tr[data-row="dev:board-dev"] td[data-label="today"]').innerText(), `${usd(capped.day_usd)} of ${usd(1)}`, "board-dev's day spend against its own cap");
          t.ok(await page.locator('#spend tr[data-row="looped:loop-on-the-board"]').isVisible(), 'the stopped session has its row');
          t.equal((await page.locator(`#models tr[data-row="${SERVED}"] td.key`).first().innerText()).trim(), SERVED, 'a served model id');
          t.match(await page.locator('#tool_logs').innerText(), MARKUP_TOOL, 'the tool name shows as text');
          t.match(await page.locator('#benchmark_runs').innerText(), MARKUP_RUN, 'the run label shows as text');
          t.match(await page.locator('#sessions').innerText(), MARKUP_USER, 'the end user with markup shows as text');
          t.equal(await page.locator('script').count(), 0, 'no script element made it into the page');
          t.equal(await page.locator('main img, main b:text-is("run")').count(), 0, 'no element made from a value');
          t.same(dialogs, [], 'nothing ran: no dialog opened');

          const [scrollWidth, innerWidth] = await widths(page);
          t.ok(scrollWidth <= innerWidth, `no horizontal scroll (${scrollWidth} ≤ ${innerWidth})`);
          t.equal(await page.locator('meta[http-equiv="refresh"]').getAttribute('content'), '30', 'reloads every 30 s');
          t.same(requests.filter((u) => !u.startsWith(`${origin}/`) && !u.startsWith('data:')), [], 'no request to another origin');
          t.same(consoleErrors, [], 'no console errors');
          if (store === 'sqlite') {
            await shot(page, `board-${width}`);
            await shot(page, `board-spend-${width}`, '#spend'); // the first screen, close up
          }

          const light = await contrasts(page);
          t.ok(light.text >= 7 && light.muted >= 4.5, `light: readable contrast (text ${light.text.toFixed(1)}, muted ${light.muted.toFixed(1)})`);
          if (width === 390) {
            await page.emulateMedia({ colorScheme: 'dark' });
            const dark = await contrasts(page);
            t.not(dark.background, light.background, 'dark: the system setting changes the colours');
            t.ok(dark.text >= 7 && dark.muted >= 4.5, `dark: readable contrast (text ${dark.text.toFixed(1)}, muted ${dark.muted.toFixed(1)})`);
            t.same(consoleErrors, [], 'still no console errors');
            if (store === 'sqlite') await shot(page, 'board-390-dark');
          }
        });
      }
    });
  }
});
