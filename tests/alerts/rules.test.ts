// The shipped alerting rules (systemd/prometheus/sluice-alerts.yml): Debian's `promtool check
// rules` accepts them; `promtool test rules` passes their unit tests (tests/alerts/sluice-alerts-*.test.yml),
// which hold a firing and a quiet case for every rule; and the rules and those unit tests name only
// series a live sluice serves: a real gateway, driven through everything the rules watch (a profile
// past 70 %, a router 5xx, a cut stream, an IP block, a usage snapshot), is scraped, and every
// metric, label matcher and grouping label of every rule, and every series of the unit tests, is
// found in that scrape (or, for a label bounded by a fixed list, among that list's values).

import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import t from 'tap';
import { parse } from 'yaml';
import { alternatives, groupingLabels, LABEL_VALUES, loadRules, matches, RULE_TESTS_FILES, RULES_FILE, selectors, seriesOf, type Selector } from '../helpers/alert-rules.ts';
import { ALERTING, ruleTraffic, spend, TO_STAGE_70 } from '../helpers/alert-traffic.ts';
import { startHarness } from '../helpers/gateway.ts';
import { parseMetrics, sumOf, type Sample } from '../helpers/prom-text.ts';

interface UnitTests {
  rule_files: string[];
  tests: Array<{
    name: string;
    input_series: Array<{ series: string; values: string }>;
    alert_rule_test?: Array<{ eval_time: string; alertname: string; exp_alerts: Array<{ exp_labels: Record<string, string> }> }>;
  }>;
}

const rules = loadRules();
const files = RULE_TESTS_FILES.map((file) => ({ file, ...(parse(readFileSync(file, 'utf8')) as UnitTests) }));
const unitTests = files.flatMap((f) => f.tests);
const show = (s: Selector) => `${s.name}{${s.matchers.map((m) => `${m.label}${m.op}"${m.value}"`).join(',')}}`;

t.test('promtool check rules accepts the shipped file', async (t) => {
  const r = spawnSync('promtool', ['check', 'rules', RULES_FILE], { encoding: 'utf8' });
  t.equal(r.status, 0, `promtool check rules: ${r.stdout}${r.stderr}`);
  t.match(r.stdout, `SUCCESS: ${rules.length} rules found`);
  t.equal(rules.length, 14);
  for (const rule of rules) {
    t.equal(rule.labels.service, 'sluice', `${rule.alert}: service label`);
    t.ok(['critical', 'warning'].includes(rule.labels.severity), `${rule.alert}: severity ${rule.labels.severity}`);
    t.ok(rule.annotations.summary && rule.annotations.description, `${rule.alert}: summary and description`);
  }
});

t.test('promtool test rules passes the unit tests, which cover every rule firing and quiet', async (t) => {
  for (const f of files) t.strictSame(f.rule_files.map((r) => resolve(dirname(f.file), r)), [RULES_FILE], `${f.file}: loads the shipped file`);
  const r = spawnSync('promtool', ['test', 'rules', ...RULE_TESTS_FILES], { encoding: 'utf8' });
  t.equal(r.status, 0, `promtool test rules: ${r.stdout}${r.stderr}`);
  t.equal(r.stdout.match(/\bSUCCESS\b/g)?.length, RULE_TESTS_FILES.length, 'each file passes');

  const cases = unitTests.flatMap((u) => (u.alert_rule_test ?? []).map((c) => ({ ...c, test: u.name })));
  for (const rule of rules) {
    // A rule is told apart from its siblings of the same name (the stages, the windows) by its labels.
    const mine = (a: { exp_labels: Record<string, string> }) => Object.entries(rule.labels).every(([k, v]) => a.exp_labels[k] === v);
    const name = `${rule.alert}${rule.labels.stage ? ` stage ${rule.labels.stage}` : ''}${rule.labels.window ? ` ${rule.labels.window}` : ''}`;
    const firing = cases.filter((c) => c.alertname === rule.alert && c.exp_alerts.some(mine));
    const quiet = cases.filter((c) => c.alertname === rule.alert && !c.exp_alerts.some(mine));
    t.ok(firing.length > 0, `${name}: a firing case (${firing.map((c) => `${c.test} @${c.eval_time}`).join(', ')})`);
    t.ok(quiet.length > 0, `${name}: a quiet case (${quiet.map((c) => `${c.test} @${c.eval_time}`).join(', ')})`);
  }
});

t.test('the rules and their unit tests use the series a live sluice serves', async (t) => {
  const h = await startHarness(t, ALERTING);
  await ruleTraffic(h);
  t.equal(await spend(h, await h.key('alerting'), TO_STAGE_70), 200);
  const samples = parseMetrics(await (await fetch(`${h.url}/metrics`)).text());

  // What the traffic left, rule by rule.
  t.equal(sumOf(samples, 'sluice_budget_degradation_stage', { profile: 'alerting' }), 1, 'alerting is past 70 %: stage 1');
  t.ok(sumOf(samples, 'sluice_budget_spend_ratio', { profile: 'alerting', window: 'day' }) >= 0.7);
  t.equal(sumOf(samples, 'sluice_budget_usd', { profile: 'alerting', window: 'day' }), 0.01);
  t.ok(sumOf(samples, 'sluice_budget_window_seconds_left', { window: 'day' }) > 0);
  t.ok(sumOf(samples, 'sluice_cost_usd_total', { profile: 'alerting' }) > 0.0074);
  t.equal(sumOf(samples, 'sluice_requests_total', { outcome: 'upstream_error', status_class: '5xx' }), 1, 'the router 5xx');
  t.equal(sumOf(samples, 'sluice_requests_total', { outcome: 'upstream_error', status_class: '2xx' }), 1, 'the cut stream');
  t.equal(sumOf(samples, 'sluice_auth_failures_total'), 20);
  t.equal(sumOf(samples, 'sluice_refusals_total', { code: 'ip_blocked' }), 1, 'the blocked address refused');
  t.ok(samples.some((s) => s.name === 'sluice_upstream_drift_usd' && s.labels.profile === 'alerting'), 'a drift gauge from the usage snapshot');
  t.equal(sumOf(samples, 'sluice_store_up'), 1);
  t.equal(sumOf(samples, 'sluice_rows_pending'), 0);

  const labelsOn = (name: string) => new Set(samples.filter((s) => s.name === name).flatMap((s) => Object.keys(s.labels)));
  for (const rule of rules) {
    const sels = selectors(rule.expr);
    if (sels.length === 0) {
      t.match(rule.expr, /\bup\{job="sluice"\}/, `${rule.alert}: no sluice series, so Prometheus's own up{job="sluice"}`);
      continue;
    }
    for (const sel of sels) {
      const named = samples.filter((s) => s.name === sel.name);
      t.ok(named.length > 0, `${rule.alert}: ${sel.name} is on /metrics`);
      t.ok(named.some((s: Sample) => sel.matchers.every((m) => matches(m, s.labels[m.label]))), `${rule.alert}: ${show(sel)} selects a series of the scrape`);
      for (const m of sel.matchers) {
        t.ok(labelsOn(sel.name).has(m.label), `${rule.alert}: ${sel.name} has a label ${m.label}`);
        if (m.op !== '=~') continue;
        const values = LABEL_VALUES[`${sel.name}/${m.label}`];
        const alts = alternatives(m.value);
        t.ok(values && alts, `${rule.alert}: ${m.label}=~"${m.value}" lists values of a bounded label`);
        for (const v of alts ?? []) t.ok(values?.includes(v), `${rule.alert}: ${sel.name} can have ${m.label}="${v}"`);
      }
    }
    // Grouping labels: carried by one of the expression's series, or added by Prometheus.
    const carried = new Set(['instance', 'job', ...sels.flatMap((s) => [...labelsOn(s.name)])]);
    for (const l of groupingLabels(rule.expr)) t.ok(carried.has(l), `${rule.alert}: groups on ${l}, a label its series carry`);
  }

  // The unit tests' series: sluice's names, exactly sluice's label names, values sluice can give.
  for (const u of unitTests) {
    for (const { series } of u.input_series) {
      const s = seriesOf(series);
      if (s.name === 'up') continue;
      const keys = Object.keys(s.labels).filter((k) => k !== 'instance' && k !== 'job').sort().join(',');
      t.ok(samples.some((x) => x.name === s.name && Object.keys(x.labels).sort().join(',') === keys), `${u.name}: ${s.name}{${keys}} as sluice labels it`);
      t.ok(s.labels.job === 'sluice' && s.labels.instance, `${u.name}: ${s.name} carries job="sluice" and an instance, as scraped`);
      for (const [k, v] of Object.entries(s.labels)) {
        const values = LABEL_VALUES[`${s.name}/${k}`];
        if (values) t.ok(values.includes(v), `${u.name}: ${s.name} can have ${k}="${v}"`);
      }
    }
  }
});
