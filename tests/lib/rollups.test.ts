// requestDeltas groups alike rows before counting them (lib/store/rollups.ts): its result must be
// exactly the merge of every row counted on its own, whatever the mix of rows in a batch.

import t from 'tap';
import { requestDeltas, SEP, type Deltas, type RollupDelta } from '../../lib/store/rollups.ts';
import { rows } from './store-board.contract.ts';

/** The deltas of each row alone, merged the way the store merges them (sums add, latest note wins). */
function oneByOne(list: ReturnType<typeof rows>): Deltas {
  const rollups = new Map<string, RollupDelta>();
  const hist = new Map<string, Deltas['hist'][number]>();
  for (const row of list) {
    const d = requestDeltas([row]);
    for (const r of d.rollups) {
      const id = [r.grain, r.bucket, r.dim, r.key].join(SEP);
      const m = rollups.get(id);
      if (!m) {
        rollups.set(id, { ...r });
        continue;
      }
      for (const k of ['requests', 'errors', 'input_tokens', 'output_tokens', 'cache_read_tokens', 'cache_write_tokens', 'reasoning_tokens', 'cost_usd'] as const) m[k] += r[k];
      if (r.first_ts < m.first_ts) m.first_ts = r.first_ts;
      if (r.last_ts >= m.last_ts) {
        m.last_ts = r.last_ts;
        m.note = r.note;
      }
    }
    for (const h of d.hist) {
      const id = [h.grain, h.bucket, h.dim, h.key, h.metric, h.idx].join(SEP);
      const m = hist.get(id);
      if (m) m.n += h.n;
      else hist.set(id, { ...h });
    }
  }
  const sorted = <T>(m: Map<string, T>) => [...m.entries()].sort((a, b) => (a[0] < b[0] ? -1 : 1)).map(([, v]) => v);
  return { rollups: sorted(rollups), hist: sorted(hist) };
}

const rounded = (d: Deltas) => ({ rollups: d.rollups.map((r) => ({ ...r, cost_usd: r.cost_usd.toFixed(9) })), hist: d.hist });

t.test('grouped deltas equal the merge of every row counted alone', async (t) => {
  // A few hours only, so many rows share every dimension (the grouping is exercised), and a spread.
  for (const [seed, days] of [[3, 0.1], [5, 0.02], [7, 3]] as const) {
    const list = rows(600, seed, days);
    const grouped = requestDeltas(list);
    t.strictSame(rounded(grouped), rounded(oneByOne(list)), `seed ${seed} over ${days} days: ${grouped.rollups.length} rollup rows`);
    t.ok(grouped.rollups.some((r) => r.dim === 'all' && r.requests > 1), 'rows were merged');
  }
});

t.test('a group keeps its earliest and latest timestamps, and the latest tier of a session', async (t) => {
  const [a, b, c] = rows(3, 11, 0.01).map((r) => ({ ...r, session: 's9', end_user: null, profile: 'p', run: null }));
  const early = { ...a, ts: '2025-03-10T11:05:00.000Z', tier: 'fast' };
  const late = { ...b, ts: '2025-03-10T11:55:00.000Z', tier: 'agent' };
  const middle = { ...c, ts: '2025-03-10T11:30:00.000Z', tier: 'fast' };
  const d = requestDeltas([late, early, middle]);
  const session = d.rollups.find((r) => r.grain === 'h' && r.dim === 'session')!;
  t.equal(session.requests, 3);
  t.equal(session.first_ts, '2025-03-10T11:05:00.000Z');
  t.equal(session.last_ts, '2025-03-10T11:55:00.000Z');
  t.equal(session.note, 'agent', 'the latest row names the tier');
});

// A batch of rows nearly all different makes more groups than requestDeltas holds at once, so it
// hands them to their hours part way through the pass: still the merge of every row alone.
t.test('more distinct rows than the grouping holds at once: still the merge of every row alone', async (t) => {
  // 6,000 rows over two days, 5,000 served models (over 4,096 groups), a third calling a tool,
  // sessions shared by a few rows each.
  const list = rows(6000, 13, 2).map((r, i) => ({ ...r, model: `m${i % 5000}`, session: `s${i % 1500}`, tools: i % 3 === 0 ? ['Bash'] : r.tools }));
  const d = requestDeltas(list);
  t.strictSame(rounded(d), rounded(oneByOne(list)), `${d.rollups.length} rollup rows, ${d.hist.length} histogram rows`);
  const all = d.rollups.filter((r) => r.grain === 'd' && r.dim === 'all').reduce((a, r) => a + r.requests, 0);
  t.equal(all, 6000, 'every row counted once');
});
