// What a client is told of its budget: the four headers of every response to a generative request
// (written into the proxy core's head array, and onto sluice's own refusals once the budget step
// ran), and the body of GET /v1/budget (its key's and its profile's standing, caps, spend and
// resets, and its session's against the profile's session cap). It reads the view lib/budget.ts
// computes and never another key's figures. The header values come from a table and a small cache,
// so a proxied response allocates nothing here.

import type { ServerResponse } from 'node:http';
import { exhaustedWindow, micro, STAGE_FROM, type Budget, type BudgetStage, type BudgetView, type Standing } from './budget.ts';
import type { ProfiledCtx } from './context.ts';
import { headerSession } from './end-user.ts';

/** The budget headers, by what they say (docs/http.md, "Budgets"). */
export const BUDGET_HEADERS = {
  stage: 'x-sluice-budget-stage',
  used: 'x-sluice-budget-used',
  scope: 'x-sluice-budget-scope',
  reset: 'x-sluice-budget-reset',
} as const;

type Window = 'day' | 'month';

/** A percentage in whole tenths, cut (not rounded): 99.96 is 999, never the 1000 of a block it is not. */
function tenthsOf(percent: number): number {
  // The small lift keeps a value like 14.3 (142.99999… once multiplied) at 143.
  return Math.max(0, Math.floor(percent * 10 + 1e-6));
}

/** A percentage cut to one decimal (tenthsOf). */
function tenths(percent: number): number {
  return tenthsOf(percent) / 10;
}

/** "0.0" … "100.0", made once: the used header of a request takes its text from here. */
const USED = Array.from({ length: 1001 }, (_, i) => (i / 10).toFixed(1));

/** The used header's text: the percentage cut to one decimal. */
export function usedText(percent: number): string {
  const i = tenthsOf(percent);
  return i < USED.length ? USED[i]! : (i / 10).toFixed(1);
}

/** ISO texts of reset times: a few distinct values a day (day and month ends), so a small map holds them. */
const ISO = new Map<number, string>();
function iso(ms: number): string {
  let s = ISO.get(ms);
  if (s === undefined) {
    if (ISO.size >= 16) ISO.clear();
    ISO.set(ms, (s = new Date(ms).toISOString()));
  }
  return s;
}

/** A window's percentage of its limit, from whole micro-USD as lib/budget.ts counts (0 without a limit). */
function windowPercent(spent: number, limit: number | null): number {
  return limit === null || limit <= 0 ? 0 : (micro(spent) * 100) / micro(limit);
}

/**
 * The window a standing's figure is about. Blocked: the one whose reset ends the block (the month
 * once its limit is spent, as the refusal says). Otherwise the one whose percentage is the
 * standing's (the higher; the day on a tie, so nothing spent reads as today).
 */
export function windowOf(s: Standing): Window {
  if (s.stage === 'blocked') return exhaustedWindow(s);
  return windowPercent(s.month_usd, s.monthly_usd) > windowPercent(s.day_usd, s.daily_usd) ? 'month' : 'day';
}

function resetOf(s: Standing, w: Window = windowOf(s)): number {
  return w === 'month' ? s.monthResetAt : s.dayResetAt;
}

/**
 * The standing the client is told about: the binding one; when the profile and the key are both
 * blocked, the one that resets later (requests resume only then, and the refusal names it).
 */
function told(view: BudgetView): Standing {
  const { key, profile } = view;
  if (key !== null && key.stage === 'blocked' && profile.stage === 'blocked') return resetOf(key) > resetOf(profile) ? key : profile;
  return view.binding;
}

/** Appends the four budget headers to a head in writeHead's array form (the proxy core's). */
export function pushBudgetHeaders(headers: string[], view: BudgetView): void {
  const s = told(view);
  headers.push(
    BUDGET_HEADERS.stage, view.stage,
    BUDGET_HEADERS.used, usedText(s.percent),
    BUDGET_HEADERS.scope, s.scope,
    BUDGET_HEADERS.reset, iso(resetOf(s)),
  );
}

/** The same headers on a response sluice writes itself (a refusal after the budget step: not the hot path). */
export function setBudgetHeaders(res: ServerResponse, view: BudgetView): void {
  const s = told(view);
  res.setHeader(BUDGET_HEADERS.stage, view.stage);
  res.setHeader(BUDGET_HEADERS.used, usedText(s.percent));
  res.setHeader(BUDGET_HEADERS.scope, s.scope);
  res.setHeader(BUDGET_HEADERS.reset, iso(resetOf(s)));
}

/** Whether a profile's responses carry the budget headers (`budget_headers`, on unless set false). */
export function budgetHeadersOn(profile: { budget_headers?: boolean }): boolean {
  return profile.budget_headers !== false;
}

// GET /v1/budget

export interface WindowReport {
  spent_usd: number;
  /** The budget or cap of the window; null: the key has no cap for it. */
  limit_usd: number | null;
  /** Of the limit, cut to one decimal; null without a limit. */
  percent: number | null;
  resets_at: string;
}

export interface StandingReport {
  name: string;
  stage: BudgetStage;
  /** The higher of the two windows' percentages, cut to one decimal. */
  percent: number;
  /** The window `percent` is about (blocked: the one whose reset ends the block). */
  window: Window;
  resets_at: string;
  day: WindowReport;
  month: WindowReport;
}

export interface SessionReport {
  spent_usd: number;
  limit_usd: number;
  percent: number;
  /** Spent the cap: the session's requests answer 429 until the day ends. */
  blocked: boolean;
  resets_at: string;
}

/** The body of GET /v1/budget. */
export interface BudgetReport {
  object: 'budget';
  /** The stage the key's requests are handled at: the higher of its profile's and its own. */
  stage: BudgetStage;
  /** The binding budget: its scope, percentage, window and reset. */
  scope: Standing['scope'];
  percent: number;
  window: Window;
  resets_at: string;
  /** The percentage from which each stage holds. */
  thresholds: typeof STAGE_FROM;
  profile: StandingReport;
  /** Null: the key has no caps of its own, so only its profile's budget applies to it. */
  key: StandingReport | null;
  /** The session the request named, against its profile's cap per session; null without either. */
  session: SessionReport | null;
}

function windowReport(spent: number, limit: number | null, resetsAt: number): WindowReport {
  return { spent_usd: spent, limit_usd: limit, percent: limit === null ? null : tenths(windowPercent(spent, limit)), resets_at: iso(resetsAt) };
}

function standingReport(s: Standing): StandingReport {
  const w = windowOf(s);
  return {
    name: s.name, stage: s.stage, percent: tenths(s.percent), window: w, resets_at: iso(resetOf(s, w)),
    day: windowReport(s.day_usd, s.daily_usd, s.dayResetAt),
    month: windowReport(s.month_usd, s.monthly_usd, s.monthResetAt),
  };
}

/** What GET /v1/budget reads: the view the budget step would take, and a session's spend of today. */
export type BudgetReader = Pick<Budget, 'view' | 'sessionSpend'>;

/** The body of GET /v1/budget for the request's key; reads spend as the budget step does (memory, else the counters). */
export async function budgetReport(budget: BudgetReader, ctx: ProfiledCtx): Promise<BudgetReport> {
  const view = await budget.view(ctx.profile, ctx.key.row);
  const s = told(view);
  const w = windowOf(s);
  const cap = ctx.profile.session_daily_usd;
  const session = cap == null ? null : headerSession(ctx.req.headers);
  let sessionReport: SessionReport | null = null;
  if (cap != null && session !== null) {
    const spent = await budget.sessionSpend(ctx.profile, session);
    const percent = (spent * 100) / micro(cap);
    sessionReport = { spent_usd: spent / 1e6, limit_usd: cap, percent: tenths(percent), blocked: spent >= micro(cap), resets_at: iso(view.profile.dayResetAt) };
  }
  return {
    object: 'budget', stage: view.stage, scope: s.scope, percent: tenths(s.percent), window: w, resets_at: iso(resetOf(s, w)),
    thresholds: STAGE_FROM,
    profile: standingReport(view.profile),
    key: view.key === null ? null : standingReport(view.key),
    session: sessionReport,
  };
}
