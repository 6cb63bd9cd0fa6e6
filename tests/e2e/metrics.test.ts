// `GET /metrics` after real traffic on both dialects and both stores: the live scrape passes
// Debian's `promtool check metrics`, the counters equal what the traffic left in the store, the
// label sets stay bounded (a free-form model id, an end user or a key never becomes a label value).

import { spawnSync } from 'node:child_process';
import t from 'tap';
import { displayPrefix, parseKey } from '../../lib/keys.ts';
import { boardTraffic, LIMITED, MARKUP_USER } from '../helpers/board-traffic.ts';
import { startHarness } from '../helpers/gateway.ts';
import { parseMetrics, sumOf } from '../helpers/prom-text.ts';

const sum = sumOf;

for (const storeKind of ['sqlite', 'postgres'] as const) {
  t.test(`${storeKind}: /metrics after real traffic`, async (t) => {
    const h = await startHarness(t, { store: storeKind, ...LIMITED });
    const traffic = await boardTraffic(h);
    const rows = await h.rows(traffic.rows);
    t.equal(rows.length, traffic.rows, 'every request the traffic made left its row');

    const res = await fetch(`${h.url}/metrics`);
    t.equal(res.status, 200);
    t.match(res.headers.get('content-type'), /^text\/plain; version=0\.0\.4; charset=utf-8$/);
    t.equal(res.headers.get('cache-control'), 'no-store');
    const text = await res.text();

    const lint = spawnSync('/usr/bin/promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    t.equal(lint.status, 0, `promtool check metrics passes: ${lint.stdout}${lint.stderr}`);

    const samples = parseMetrics(text);
    // Requests: one per row, by route, profile, tier, outcome and status class.
    t.equal(sum(samples, 'sluice_requests_total'), rows.length, 'requests_total counts every row');
    for (const r of rows) {
      const tier = r.tier ?? 'none';
      const cls = `${Math.floor(r.status / 100)}xx`;
      const expected = rows.filter((x) => x.endpoint === r.endpoint && x.profile === r.profile && (x.tier ?? 'none') === tier && x.outcome === r.outcome && `${Math.floor(x.status / 100)}xx` === cls).length;
      t.equal(sum(samples, 'sluice_requests_total', { route: r.endpoint, profile: r.profile, tier, outcome: r.outcome, status_class: cls }), expected, `${r.endpoint}/${r.profile}/${tier}/${r.outcome}/${cls}`);
    }
    t.ok(sum(samples, 'sluice_requests_total', { tier: 'auto-decision' }) >= 1, 'the auto decision is its own tier');
    t.equal(sum(samples, 'sluice_requests_total', { outcome: 'upstream_error', status_class: '5xx' }), rows.filter((r) => r.status >= 500).length, 'the upstream 500');
    // Tokens and cost by profile.
    for (const profile of ['dev', 'assistant', 'tiny', 'limited']) {
      const mine = rows.filter((r) => r.profile === profile);
      const cost = mine.reduce((a, r) => a + r.cost_usd, 0);
      t.ok(Math.abs(sum(samples, 'sluice_cost_usd_total', { profile }) - cost) < 1e-9, `${profile}: cost ${cost}`);
      for (const [kind, field] of [['input', 'input_tokens'], ['output', 'output_tokens'], ['cache_read', 'cache_read_tokens'], ['cache_write', 'cache_write_tokens'], ['reasoning', 'reasoning_tokens']] as const) {
        t.equal(sum(samples, 'sluice_tokens_total', { profile, kind }), mine.reduce((a, r) => a + r[field], 0), `${profile}: ${kind} tokens`);
      }
    }
    t.ok(sum(samples, 'sluice_tokens_total', { kind: 'cache_read' }) > 0, 'the cached request shows cache reads');
    // Histograms: every row has a duration; rows with a first byte have a ttfb.
    t.equal(sum(samples, 'sluice_request_duration_seconds_count'), rows.length);
    t.equal(sum(samples, 'sluice_ttfb_seconds_count'), rows.filter((r) => r.ttfb_ms !== null).length);
    t.equal(sum(samples, 'sluice_overhead_seconds_count'), rows.filter((r) => r.overhead_ms !== null).length);
    // Refusals and auth failures.
    t.equal(sum(samples, 'sluice_auth_failures_total', { outcome: 'missing_key' }), 1);
    t.equal(sum(samples, 'sluice_auth_failures_total', { outcome: 'unknown_key' }), 1);
    t.equal(sum(samples, 'sluice_refusals_total', { code: 'invalid_api_key', route: 'chat', profile: 'none' }), 2);
    t.equal(sum(samples, 'sluice_refusals_total', { code: 'budget_exhausted', profile: 'tiny', route: 'chat' }), 1, 'the budget refusal, by profile');
    t.equal(sum(samples, 'sluice_refusals_total', { code: 'rate_limit_exceeded', profile: 'limited', route: 'chat' }), 1, 'the rate-limit refusal, by profile');
    // Gauges read at the scrape.
    t.equal(sum(samples, 'sluice_budget_degradation_stage', { profile: 'tiny' }), 3, 'tiny is blocked');
    t.equal(sum(samples, 'sluice_budget_degradation_stage', { profile: 'dev' }), 0);
    t.ok(sum(samples, 'sluice_budget_spend_ratio', { profile: 'tiny', window: 'day' }) >= 1, "tiny's day spend is at its budget");
    const devDay = rows.filter((r) => r.profile === 'dev').reduce((a, r) => a + r.cost_usd, 0);
    t.ok(Math.abs(sum(samples, 'sluice_budget_spend_ratio', { profile: 'dev', window: 'day' }) - devDay / 5) < 1e-6, "dev's day ratio is its spend over 5 USD");
    t.equal(sum(samples, 'sluice_store_up'), 1);
    t.equal(sum(samples, 'sluice_counters_up'), 1);
    t.equal(sum(samples, 'sluice_rows_pending'), 0);
    t.equal(sum(samples, 'sluice_in_flight_requests'), 1, 'the scrape itself is in flight');
    t.equal(sum(samples, 'sluice_in_flight_streams'), 0);
    t.ok(samples.some((s) => s.name === 'sluice_event_loop_delay_p99_seconds'));
    t.ok(samples.some((s) => s.name === 'nodejs_heap_size_used_bytes'), 'heap, from the default metrics');
    t.equal(sum(samples, 'sluice_build_info'), 1);

    // Bounded labels: nothing free-form, nothing secret.
    const values = new Set(samples.flatMap((s) => Object.values(s.labels)));
    t.notOk(values.has(traffic.randomModel), 'a free-form model id is no label value');
    for (const forbidden of [MARKUP_USER, 'alice', 'bob', 'carol', 'conv-board', '127.0.0.1']) t.notOk(text.includes(forbidden), `${forbidden} is nowhere in the scrape`);
    for (const key of traffic.keys) {
      const { profile, token } = parseKey(key)!;
      t.notOk(text.includes(displayPrefix(profile, token)), 'no key prefix');
      t.notOk(text.includes(token), 'no key');
    }
    const allowedProfiles = new Set([...h.config.profiles.keys(), 'other', 'none']);
    const allowedTiers = new Set([...h.config.tiers.keys(), 'auto-decision', 'none']);
    for (const s of samples) {
      if (s.labels.profile !== undefined) t.ok(allowedProfiles.has(s.labels.profile), `profile label ${s.labels.profile} is configured`);
      if (s.labels.tier !== undefined) t.ok(allowedTiers.has(s.labels.tier), `tier label ${s.labels.tier} is configured`);
    }
    // Another random model adds no series.
    const key = traffic.keys[0];
    const r = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: `vendor/another-${Date.now()}`, user: 'carol', messages: [{ role: 'user', content: 'x' }] }),
    });
    await r.arrayBuffer();
    await h.rows(traffic.rows + 1);
    const again = parseMetrics(await (await fetch(`${h.url}/metrics`)).text());
    t.equal(again.filter((s) => s.name.startsWith('sluice_requests_total')).length, samples.filter((s) => s.name.startsWith('sluice_requests_total')).length, 'a new model id adds no request series');
    t.equal(sum(again, 'sluice_requests_total'), rows.length + 1);
    t.notOk([...new Set(again.flatMap((x) => Object.values(x.labels)))].some((v) => v.startsWith('vendor/')), 'no model id is a label value');

    // HEAD answers the headers only.
    const head = await fetch(`${h.url}/metrics`, { method: 'HEAD' });
    t.equal(head.status, 200);
    t.equal(await head.text(), '');
  });
}
