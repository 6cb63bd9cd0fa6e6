// The alert path end to end: a real sluice in this process, Debian's Prometheus scraping it every
// second with the shipped rules (systemd/prometheus/sluice-alerts.yml), and Debian's Alertmanager
// with the alertmanager.yml of docs/observability.md (its chat webhook pointed at a local receiver,
// a generic webhook beside it, group_wait and group_interval cut to a second; repeat_interval as
// documented). A profile pushed past 70 % of its day budget brings exactly one notification on
// each; the spend rising inside the stage, while Prometheus re-sends the alert after every
// evaluation, brings none; 85 % brings exactly one more, for the new stage. Waits are on the
// receiver's events and on rule evaluations Prometheus reports (/api/v1/rules), each bounded by
// a deadline that fails the test.

import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { parse, stringify } from 'yaml';
import { ROOT, RULES_FILE } from '../helpers/alert-rules.ts';
import { startReceiver } from '../helpers/alert-receiver.ts';
import { ALERTING, budgetGauges, percentage, spend, TO_STAGE_70, TO_STAGE_85, WITHIN_STAGE_70 } from '../helpers/alert-traffic.ts';
import { startHarness } from '../helpers/gateway.ts';
import { evaluations, poll, queryValue, startAlertmanager, startPrometheus } from '../helpers/prometheus.ts';

/** How long a notification may take to arrive before the test fails (it takes a few seconds). */
const NOTIFICATION_DEADLINE_MS = 60_000;
/** Rule evaluations watched for a second notification that must not come. */
const QUIET_EVALUATIONS = 5;

/** The alertmanager.yml of docs/observability.md, section "Wiring Alertmanager". */
function documentedConfig(): any {
  const text = readFileSync(join(ROOT, 'docs/observability.md'), 'utf8');
  const block = /```yaml\n(# \/etc\/prometheus\/alertmanager\.yml\n[\s\S]*?)```/.exec(text.slice(text.indexOf('## Wiring Alertmanager')));
  if (!block) throw new Error('no alertmanager.yml in docs/observability.md under "Wiring Alertmanager"');
  return parse(block[1]);
}

t.test('the documented alertmanager.yml passes amtool check-config', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-amtool-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'alertmanager.yml'), stringify(documentedConfig()));
  const r = spawnSync('amtool', ['check-config', join(dir, 'alertmanager.yml')], { encoding: 'utf8' });
  t.equal(r.status, 0, `amtool check-config: ${r.stdout}${r.stderr}`);
});

t.test('a budget stage reaches a person once: Prometheus, Alertmanager, a chat webhook', async (t) => {
  const receiver = await startReceiver(t);
  const h = await startHarness(t, ALERTING);
  const key = await h.key('alerting');

  const config = documentedConfig();
  const route = config.route.routes.find((r: any) => r.matchers?.includes('service="sluice"'));
  t.match(route, { receiver: 'sluice-chat', group_by: ['alertname', 'profile'], repeat_interval: '24h' }, 'the documented sluice route');
  route.group_wait = '1s';
  route.group_interval = '1s';
  const chat = config.receivers.find((r: any) => r.name === 'sluice-chat');
  chat.slack_configs[0].api_url = `${receiver.url}/slack`; // the critical receiver shares this object (a YAML alias)
  chat.webhook_configs = [{ url: `${receiver.url}/webhook`, send_resolved: false }];
  const am = await startAlertmanager(t, config);
  const prom = await startPrometheus(t, { target: new URL(h.url).host, rulesFile: RULES_FILE, alertmanager: am.url });

  // Prometheus has scraped sluice and evaluates the rules: below 70 %, nothing is sent.
  await poll('the first scrape of alerting at stage 0', async () => (await queryValue(prom.url, 'sluice_budget_degradation_stage{job="sluice",profile="alerting"}')) === 0 || undefined);
  await evaluations(prom.url, 'sluice-budget', 2);
  t.equal(receiver.received.length, 0, 'nothing fires below 70 %');

  // About 75 %: stage 70, one notification on each integration.
  t.equal(await spend(h, key, TO_STAGE_70), 200);
  const at70 = await budgetGauges(h);
  t.ok(at70.stage === 1 && at70.dayRatio >= 0.7 && at70.dayRatio < 0.8, `alerting is at stage 1 (fast-only), ${percentage(at70.dayRatio)}`);
  const spent = (ratio: number) => `alerting has spent ${percentage(ratio)} of its budget`;
  const first = await receiver.nth('/webhook', 1, NOTIFICATION_DEADLINE_MS);
  const firstChat = await receiver.nth('/slack', 1, NOTIFICATION_DEADLINE_MS);
  t.match(first.body, { status: 'firing', groupLabels: { alertname: 'SluiceBudgetStage', profile: 'alerting' } });
  t.equal(first.body.alerts.length, 1, 'one alert in it');
  t.match(first.body.alerts[0], {
    status: 'firing',
    labels: { alertname: 'SluiceBudgetStage', profile: 'alerting', stage: '70', degradation: 'fast-only', severity: 'warning', service: 'sluice' },
    annotations: { description: spent(at70.dayRatio) },
  });
  t.equal(firstChat.body.channel, '#sluice');
  t.equal(firstChat.body.attachments[0].title, 'SluiceBudgetStage · alerting · 70 %', 'the documented chat title');
  t.ok(firstChat.body.attachments[0].text.startsWith(`sluice profile alerting reached 70 % of its budget: fast tier only. ${spent(at70.dayRatio)}`), 'the documented chat text: summary and description');
  const activeAt = (await firing(prom.url, '70'))?.activeAt;
  t.ok(activeAt, 'Prometheus holds the stage 70 alert');

  // About 80 %: still stage 70. Prometheus sees the new spend and re-sends the alert at every
  // evaluation; Alertmanager sends nothing more.
  t.equal(await spend(h, key, WITHIN_STAGE_70), 200);
  const at80 = await budgetGauges(h);
  t.ok(at80.stage === 1 && at80.dayRatio > at70.dayRatio && at80.dayRatio < 0.85, `still stage 1, ${percentage(at80.dayRatio)}`);
  await poll('Prometheus to scrape the new spend', async () => (await queryValue(prom.url, 'sluice_budget_spend_ratio{job="sluice",profile="alerting",window="day"}')) === at80.dayRatio || undefined);
  await evaluations(prom.url, 'sluice-budget', QUIET_EVALUATIONS);
  const still = await firing(prom.url, '70');
  t.equal(still?.activeAt, activeAt, 'the same alert, active since the first notification');
  t.ok(still?.annotations.description.startsWith(spent(at80.dayRatio)), 'only its description follows the spend');
  t.equal(receiver.on('/webhook').length, 1, `no second webhook notification over ${QUIET_EVALUATIONS} evaluations`);
  t.equal(receiver.on('/slack').length, 1, `no second chat notification over ${QUIET_EVALUATIONS} evaluations`);

  // About 88 %: stage 85, a new alert, one more notification.
  t.equal(await spend(h, key, TO_STAGE_85), 200);
  const at85 = await budgetGauges(h);
  t.ok(at85.stage === 2 && at85.dayRatio >= 0.85 && at85.dayRatio < 1, `alerting is at stage 2 (max-tokens), ${percentage(at85.dayRatio)}`);
  const second = await receiver.nth('/webhook', 2, NOTIFICATION_DEADLINE_MS);
  const secondChat = await receiver.nth('/slack', 2, NOTIFICATION_DEADLINE_MS);
  t.match(second.body, { status: 'firing', groupLabels: { alertname: 'SluiceBudgetStage', profile: 'alerting' } });
  t.strictSame(second.body.alerts.map((a: any) => [a.labels.stage, a.status]), [['85', 'firing']], 'the stage 85 alert alone (resolved alerts are not sent)');
  t.ok(second.body.alerts[0].annotations.description.startsWith(spent(at85.dayRatio)), 'its description: the new spend');
  t.equal(secondChat.body.attachments[0].title, 'SluiceBudgetStage · alerting · 85 %');
  await evaluations(prom.url, 'sluice-budget', QUIET_EVALUATIONS);
  t.equal(receiver.on('/webhook').length, 2, 'one notification per stage');
  t.equal(receiver.on('/slack').length, 2, 'one chat message per stage');
  t.strictSame(receiver.received.map((n) => n.path).sort(), ['/slack', '/slack', '/webhook', '/webhook'], 'nothing else reached the receiver');
});

/** The firing SluiceBudgetStage alert of `alerting` at `stage`, as Prometheus holds it. */
async function firing(prometheus: string, stage: string): Promise<{ activeAt: string; annotations: Record<string, string> } | undefined> {
  const body = await (await fetch(`${prometheus}/api/v1/alerts`)).json() as { data: { alerts: Array<{ labels: Record<string, string>; state: string; activeAt: string; annotations: Record<string, string> }> } };
  return body.data.alerts.find((a) => a.labels.alertname === 'SluiceBudgetStage' && a.labels.profile === 'alerting' && a.labels.stage === stage && a.state === 'firing');
}
