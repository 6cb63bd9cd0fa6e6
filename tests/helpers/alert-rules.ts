// The shipped alerting rules (systemd/prometheus/sluice-alerts.yml) as data for the tests: the
// rules themselves, the sluice series selectors and grouping labels of a PromQL expression (a
// small reader, enough for the expressions of that file), and the values each bounded label of
// sluice's /metrics can take, so a rule or a promtool test cannot name an outcome, a code or a
// window that sluice never produces.

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse } from 'yaml';
import { CATALOGUE } from '../../lib/errors.ts';
import { ALL_V1 } from '../../lib/routes.ts';
import { AUTH_FAILURE_OUTCOMES, OUTCOMES } from '../../lib/store/store.ts';

export const ROOT = new URL('../../', import.meta.url).pathname.replace(/\/$/, '');
export const RULES_FILE = join(ROOT, 'systemd/prometheus/sluice-alerts.yml');
/** The rules' promtool unit tests: the budget rules, and the others. */
export const RULE_TESTS_FILES = ['budget', 'service'].map((part) => join(ROOT, `tests/alerts/sluice-alerts-${part}.test.yml`));

export interface AlertRule {
  group: string;
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}

export function loadRules(file = RULES_FILE): AlertRule[] {
  const doc = parse(readFileSync(file, 'utf8')) as { groups: Array<{ name: string; rules: Array<Partial<AlertRule> & Pick<AlertRule, 'alert' | 'expr'>> }> };
  return doc.groups.flatMap((g) => g.rules.map((r) => ({ ...r, group: g.name, labels: r.labels ?? {}, annotations: r.annotations ?? {} })));
}

export interface Matcher { label: string; op: '=' | '!=' | '=~' | '!~'; value: string }
export interface Selector { name: string; matchers: Matcher[] }

/** The `sluice_…` series selectors of an expression, with their label matchers. */
export function selectors(expr: string): Selector[] {
  return [...expr.matchAll(/\b(sluice_[a-z_]+)\s*(?:\{([^}]*)\})?/g)].map((m) => ({ name: m[1], matchers: matchersOf(m[2] ?? '') }));
}

export function matchersOf(text: string): Matcher[] {
  return [...text.matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)].map((m) => ({ label: m[1], op: m[2] as Matcher['op'], value: m[3] }));
}

/** A series written as `name{label="value",…}` (promtool's input_series). */
export function seriesOf(text: string): { name: string; labels: Record<string, string> } {
  const m = /^([a-zA-Z_:][\w:]*)\s*(?:\{(.*)\})?$/.exec(text.trim());
  if (!m) throw new Error(`not a series: ${text}`);
  return { name: m[1], labels: Object.fromEntries(matchersOf(m[2] ?? '').map((x) => [x.label, x.value])) };
}

/** The labels an expression groups or matches on: by, without, on, ignoring, group_left, group_right. */
export function groupingLabels(expr: string): string[] {
  return [...expr.matchAll(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g)]
    .flatMap((m) => m[1].split(',').map((l) => l.trim()))
    .filter(Boolean);
}

/** PromQL's matching: regular expressions are anchored at both ends; a missing label is the empty string. */
export function matches(m: Matcher, value: string | undefined): boolean {
  const v = value ?? '';
  switch (m.op) {
    case '=': return v === m.value;
    case '!=': return v !== m.value;
    case '=~': return new RegExp(`^(?:${m.value})$`).test(v);
    case '!~': return !new RegExp(`^(?:${m.value})$`).test(v);
  }
}

/** The values a bounded label of a sluice metric can take (lib/board/metrics.ts). Profiles and tiers come from configuration. */
export const LABEL_VALUES: Record<string, readonly string[]> = {
  'sluice_requests_total/outcome': [...OUTCOMES, 'other'],
  'sluice_requests_total/status_class': ['2xx', '3xx', '4xx', '5xx', 'other'],
  'sluice_requests_total/route': [...ALL_V1, 'other'],
  'sluice_refusals_total/route': [...ALL_V1, 'other'],
  'sluice_refusals_total/code': Object.keys(CATALOGUE),
  'sluice_auth_failures_total/outcome': AUTH_FAILURE_OUTCOMES,
  'sluice_budget_spend_ratio/window': ['day', 'month'],
  'sluice_budget_usd/window': ['day', 'month'],
  'sluice_budget_window_seconds_left/window': ['day', 'month'],
};

/** The literal alternatives of a regular expression made only of them (`a|b|c`); undefined for any other. */
export function alternatives(re: string): string[] | undefined {
  return /^[\w-]+(\|[\w-]+)*$/.test(re) ? re.split('|') : undefined;
}
