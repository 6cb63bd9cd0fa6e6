// One status class per status code, on /metrics and on the board alike: the same rows, recorded
// by the metrics and stored for the summary, land in the same classes with the same counts. A
// 1xx, a 0 (no response had) and a 499 (the client went away) included.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { createMetrics } from '../../lib/board/metrics.ts';
import { computeSummary, type SummaryDeps } from '../../lib/board/summary.ts';
import { loadConfig } from '../../lib/config.ts';
import { openStore } from '../../lib/store/open.ts';
import { statusClass } from '../../lib/store/rollups.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { profilesYaml, TIERS_YAML } from '../helpers/gateway.ts';
import { parseMetrics } from '../helpers/prom-text.ts';

const NOW = Date.parse('2025-03-10T12:30:00.000Z');

function row(i: number, status: number): RequestRow {
  return {
    id: `r-${i}`, ts: '2025-03-10T12:00:00.000Z', endpoint: 'chat', profile: 'dev', key_prefix: 'sluice_dev_…abcd',
    end_user: null, session: null, run: null, tier: null, requested_model: null, model: null, stream: false, status, outcome: status === 200 ? 'ok' : 'upstream_error',
    input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, cost_usd: 0, cost_source: 'estimate',
    provider: null, degradation: 'none', generation_id: null, ttfb_ms: null, duration_ms: 1, overhead_ms: null, tools: [],
  };
}

t.test('the status classes', async (t) => {
  const cases: Array<[number, string]> = [
    [0, 'other'], [99, 'other'], [100, 'other'], [101, 'other'], [199, 'other'], [200, '2xx'], [204, '2xx'], [302, '3xx'],
    [404, '4xx'], [429, '4xx'], [499, '4xx'], [500, '5xx'], [503, '5xx'], [599, '5xx'], [600, 'other'], [-1, 'other'],
  ];
  for (const [status, cls] of cases) t.equal(statusClass(status), cls, String(status));
});

t.test('/metrics and the summary count the same rows under the same classes', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-status-class-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profilesYaml('http://127.0.0.1:9'));
  writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
  const config = loadConfig(dir);
  const store = await openStore({ dataDir: dir });
  t.teardown(() => store.close());

  // Every status from 0 to 699 once, then the ones a gateway meets most again.
  const statuses = [...Array.from({ length: 700 }, (_, i) => i), 0, 101, 200, 200, 429, 499, 499, 502];
  const rows = statuses.map((s, i) => row(i, s));
  const want: Record<string, number> = {};
  for (const s of statuses) want[statusClass(s)] = (want[statusClass(s)] ?? 0) + 1;
  t.strictSame(want, { other: 302, '2xx': 102, '3xx': 100, '4xx': 103, '5xx': 101 }, '0–199 and 600–699 are other, and the extra rows in their classes');

  const metrics = createMetrics({
    config, budget: { state: async () => { throw new Error('no budget here'); }, now: Date.now }, store: {}, recorder: { pending: 0, storeDown: false },
    counters: { degraded: false }, inFlight: () => 0, version: 'test', collectTimeoutMs: 10,
  });
  t.teardown(() => metrics.close());
  for (const r of rows) metrics.row(r);
  const onMetrics: Record<string, number> = {};
  for (const s of parseMetrics((await metrics.scrape()).body)) {
    if (s.name === 'sluice_requests_total' && s.value > 0) onMetrics[s.labels.status_class] = (onMetrics[s.labels.status_class] ?? 0) + s.value;
  }

  await store.insertRequests(rows);
  const deps: SummaryDeps = {
    store, config, budget: { state: async () => { throw new Error('no budget here'); }, view: async () => { throw new Error('no budget here'); } }, catalog: { prices: () => undefined },
    admission: { failures: async () => ({ allowed: true, count: 0, msLeft: 0 }) }, keyCacheSize: () => 0,
    health: () => ({
      status: 'ok', version: 'test', uptime_s: 0, store: { kind: 'sqlite', reachable: true, rows_written: 0, rows_pending: 0 },
      counters: { kind: 'memory', degraded: false }, catalog: {}, in_flight: 0, connections: { max: 0, max_per_address: 0, refused: { per_address: 0, global: 0 } },
    }),
    maintenance: () => ({ backfill_done: true, backfill_rows: 0, retention_days: null, retention_deleted: 0 }),
    now: () => NOW, startedAt: NOW, version: 'test', driftUsd: 0.05,
  };
  const onBoard = (await computeSummary(deps)).requests.today.by_status_class;

  t.strictSame(onMetrics, want, '/metrics: sluice_requests_total by status_class');
  t.strictSame(onBoard, want, 'the summary: requests.today.by_status_class');
});
