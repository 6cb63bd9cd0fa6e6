// The board's store contract, run against SQLite and Postgres (store-board-sqlite/-postgres tests):
// rollups equal a recomputation from the raw rows after inserts and replays, follow cost
// corrections, keep their totals through retention, and are backfilled from a 0.3.0-shaped store
// (resumable, by two processes at once). Backing-specific steps come in through `Backing`.

import { randomUUID } from 'node:crypto';
import type { Test } from 'tap';
import { requestDeltas, auditDeltas, SEP } from '../../lib/store/rollups.ts';
import type { AuditRow, BoardGrain, RequestRow, Store } from '../../lib/store/store.ts';

export interface Backing {
  /** A migrated, empty store on t's own database; a second call with the same t opens it again. */
  open(t: Test): Promise<Store>;
  /** A 0.3.0-shaped database (migration 1 only, no rollups) holding these rows; then opened. */
  open030(t: Test, rows: RequestRow[], audit: AuditRow[]): Promise<void>;
  /** Sets a row's cost the way a reconciliation does, with adjustRollupCost* in the same transaction. */
  adjustCost(t: Test, id: string, costUsd: number): Promise<void>;
  /** Every request row's id still in the table. */
  rawIds(t: Test): Promise<string[]>;
}

const PROFILES = ['dev', 'assistant', 'car'];
const TIERS = [null, 'fast', 'agent', 'auto-decision'];
const MODELS = ['google/gemini-2.5-flash', 'anthropic/claude-sonnet-4.5', 'openai/gpt-4.1-mini', null];

/** Deterministic varied rows over `days` days before 2025-03-10T12:00Z. */
export function rows(n: number, seed = 1, days = 10): RequestRow[] {
  let x = seed;
  const rnd = () => ((x = (x * 1103515245 + 12345) % 2147483648) / 2147483648);
  const pick = <T>(a: T[]) => a[Math.floor(rnd() * a.length)];
  const base = Date.parse('2025-03-10T12:00:00.000Z');
  return Array.from({ length: n }, () => {
    const status = pick([200, 200, 200, 429, 500, 502]);
    return {
      id: randomUUID(), ts: new Date(base - Math.floor(rnd() * days * 86_400_000)).toISOString(), endpoint: pick(['chat', 'messages', 'count_tokens'] as const),
      profile: pick(PROFILES), key_prefix: 'sluice_dev_…abcd', end_user: pick([null, 'alice', 'cc:5e1f', '<b>x</b>']), session: pick([null, 's1', 's2']),
      run: pick([null, null, 'run-a', 'run-b']), tier: pick(TIERS), requested_model: pick(['sluice/auto', 'sluice/fast', 'openai/gpt-4o', null]),
      model: pick(MODELS), stream: rnd() < 0.5, status, outcome: status === 200 ? pick(['ok', 'ok', 'client_disconnect'] as const) : 'upstream_error',
      input_tokens: Math.floor(rnd() * 5000), output_tokens: Math.floor(rnd() * 900), cache_read_tokens: Math.floor(rnd() * 3000),
      cache_write_tokens: Math.floor(rnd() * 100), reasoning_tokens: Math.floor(rnd() * 50), cost_usd: Math.round(rnd() * 1e6) / 1e7,
      cost_source: pick(['upstream', 'estimate'] as const), provider: pick(['Google', 'Anthropic', null]), degradation: pick(['none', 'none', 'fast-only', 'max-tokens'] as const),
      generation_id: null, ttfb_ms: rnd() < 0.2 ? null : Math.floor(rnd() * 4000), duration_ms: Math.floor(rnd() * 20000),
      overhead_ms: rnd() < 0.2 ? null : rnd() * 3, tools: rnd() < 0.3 ? [pick(['Bash', 'Read']), 'Bash'] : [],
    };
  });
}

export function audits(n: number): AuditRow[] {
  return Array.from({ length: n }, (_, i) => ({
    ts: new Date(Date.parse('2025-03-09T00:00:00.000Z') + i * 3_600_000).toISOString(),
    ip: `192.0.2.${i % 3}`, prefix: i % 2 ? 'sluice_dev_…zzzz' : '', outcome: (['unknown_key', 'missing_key', 'expired_key'] as const)[i % 3],
  }));
}

const GRAINS: Array<[BoardGrain, string, string]> = [['h', '0000', '9999'], ['d', '0000', '9999'], ['a', '', '']];

/** Every rollup and histogram row of the store, keyed, with costs rounded (float sums differ in the last bits). */
async function snapshot(store: Store): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const [grain, from, to] of GRAINS) {
    const dims = ['all', 'endpoint', 'outcome', 'status', 'profile', 'provider', 'pmodel', 'tier', 'route', 'auto', 'degradation', 'session', 'end_user', 'run', 'tool', 'auth_outcome', 'auth_ip', 'limited'];
    for (const r of await store.boardSums({ grain, dims, from, to, byBucket: true })) {
      out.set(`${grain}${SEP}${r.dim}${SEP}${r.bucket}${SEP}${r.key}`, JSON.stringify([r.requests, r.errors, r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens, r.reasoning_tokens, r.cost_usd.toFixed(9), r.first_ts, r.last_ts, r.note]));
    }
    for (const h of await store.boardHist({ grain, dims: ['all', 'provider', 'run'], from, to })) {
      const k = `${grain}${SEP}${h.dim}${SEP}${h.key}${SEP}${h.metric}${SEP}${h.idx}`;
      out.set(k, String(Number(out.get(k) ?? 0) + h.n));
    }
  }
  return out;
}

/** The same, computed in memory from raw rows (histograms merged over buckets, as boardHist does). */
function expected(reqs: RequestRow[], audit: AuditRow[] = []): Map<string, string> {
  const out = new Map<string, string>();
  for (const d of [requestDeltas(reqs), auditDeltas(audit)]) {
    for (const r of d.rollups) out.set(`${r.grain}${SEP}${r.dim}${SEP}${r.bucket}${SEP}${r.key}`, JSON.stringify([r.requests, r.errors, r.input_tokens, r.output_tokens, r.cache_read_tokens, r.cache_write_tokens, r.reasoning_tokens, r.cost_usd.toFixed(9), r.first_ts, r.last_ts, r.note]));
    for (const h of d.hist) {
      const k = `${h.grain}${SEP}${h.dim}${SEP}${h.key}${SEP}${h.metric}${SEP}${h.idx}`;
      out.set(k, String(Number(out.get(k) ?? 0) + h.n));
    }
  }
  return out;
}

function sameMaps(t: Test, got: Map<string, string>, want: Map<string, string>, msg: string): void {
  const diff: string[] = [];
  for (const [k, v] of want) if (got.get(k) !== v) diff.push(`${k.replaceAll(SEP, '|')}: got ${got.get(k)} want ${v}`);
  for (const k of got.keys()) if (!want.has(k)) diff.push(`${k.replaceAll(SEP, '|')}: unexpected`);
  t.strictSame(diff.slice(0, 10), [], `${msg} (${want.size} rollup rows)`);
}

export function storeBoardContract(t: Test, b: Backing): void {
  async function storeFor(tt: Test): Promise<Store> {
    const store = await b.open(tt);
    tt.teardown(() => store.close());
    return store;
  }

  t.test('rollups equal a recomputation from the raw rows; replays count once', async (t) => {
    const store = await storeFor(t);
    const all = rows(400);
    await store.insertRequests(all.slice(0, 250));
    await store.insertRequests(all.slice(200)); // 50 replayed in a batch with 150 new ones
    await store.insertRequests(all.slice(0, 10)); // a pure replay
    const audit = audits(7);
    await store.insertAudit(audit);
    sameMaps(t, await snapshot(store), expected(all, audit), 'after inserts and replays');
    const raw = await store.listRequests(1000);
    t.equal(raw.length, 400);
    sameMaps(t, await snapshot(store), expected(raw, audit), 'equal to the rows read back');
  });

  t.test('keys of any text come back as written (quotes, backslashes, commas, braces, NULL, empty, unicode)', async (t) => {
    const store = await storeFor(t);
    const base = rows(1, 11)[0];
    const names = ['a"b', 'back\\slash', 'c,d', '{e}', 'NULL', ' spaced ', '', 'ünï 😀', 'x\t"\\"y', '\\'];
    await store.insertRequests(names.map((end_user, i) => ({ ...base, id: randomUUID(), end_user, session: `s${i}`, ts: '2025-03-10T11:00:00.000Z' })));
    const got = await store.boardSums({ grain: 'd', dims: ['end_user'], from: '2025-03-10', to: '2025-03-10' });
    t.same(got.map((r) => r.key.split(SEP)[1]).sort(), [...names].sort());
    t.ok(got.every((r) => r.requests === 1));
  });

  t.test('boardActiveSessions: the sessions that spent enough this hour, with their earlier hours of the day summed', async (t) => {
    const store = await storeFor(t);
    const base = rows(3, 7)[0];
    const at = (session: string, ts: string, cost_usd: number) => ({ ...base, id: randomUUID(), session, end_user: null, ts, cost_usd });
    await store.insertRequests([
      at('busy', '2025-03-09T23:10:00.000Z', 5), // yesterday: not an earlier hour of today
      at('busy', '2025-03-10T08:10:00.000Z', 0.25), at('busy', '2025-03-10T08:50:00.000Z', 0.25),
      at('busy', '2025-03-10T09:30:00.000Z', 0), // an hour that spent nothing does not count
      at('busy', '2025-03-10T10:05:00.000Z', 1.5),
      at('busy', '2025-03-10T11:20:00.000Z', 2), at('busy', '2025-03-10T11:40:00.000Z', 1),
      at('busy', '2025-03-10T12:00:00.000Z', 9), // a later hour is not earlier
      at('new', '2025-03-10T11:30:00.000Z', 0.5), // active, no earlier hour
      at('cheap', '2025-03-10T09:30:00.000Z', 1), at('cheap', '2025-03-10T11:30:00.000Z', 0.01), // under minUsd this hour
      at('idle', '2025-03-10T09:30:00.000Z', 1), at('idle', '2025-03-10T10:40:00.000Z', 1), // nothing this hour
    ]);
    const got = (await store.boardActiveSessions('2025-03-10T11', 0.05)).sort((a, b) => a.key.localeCompare(b.key));
    t.same(got.map((r) => r.key.split(SEP)[1]), ['busy', 'new']);
    t.match(got[0], { hour_usd: 3, earlier_hours: 2 });
    t.equal(Math.round(got[0].earlier_usd * 1e6) / 1e6, 2, 'the earlier hours 08 and 10 of the day');
    t.match(got[1], { hour_usd: 0.5, earlier_usd: 0, earlier_hours: 0 });
    t.same(await store.boardActiveSessions('2025-03-10T07', 0.05), [], 'an hour nobody spent in');
  });

  t.test('a reconciled cost moves every rollup row of its request', async (t) => {
    const store = await storeFor(t);
    const all = rows(60, 7);
    await store.insertRequests(all);
    const target = all.find((r) => r.run !== null && r.end_user !== null && r.tools.length > 0) ?? all[0];
    await b.adjustCost(t, target.id, target.cost_usd + 0.25);
    target.cost_usd += 0.25;
    sameMaps(t, await snapshot(store), expected(all), 'after the correction');
    await b.adjustCost(t, 'no-such-id', 1);
    sameMaps(t, await snapshot(store), expected(all), 'a missing row changes nothing');
  });

  t.test('ledgerSpendSince agrees with spendSince, and retention keeps the totals', async (t) => {
    const store = await storeFor(t);
    const all = rows(300, 3, 20);
    await store.insertRequests(all);
    for (const since of ['2025-03-01T00:00:00.000Z', '2025-03-10T00:00:00.000Z', '2025-03-05T06:30:00.000Z', '2025-02-01T00:00:00.000Z']) {
      for (const p of PROFILES) t.ok(Math.abs((await store.ledgerSpendSince(p, since)) - (await store.spendSince(p, since))) < 1e-9, `${p} since ${since}`);
    }
    const before = await snapshot(store);
    const monthSpend = await store.ledgerSpendSince('dev', '2025-02-01T00:00:00.000Z');
    const cut = '2025-03-05T00:00:00.000Z';
    const old = all.filter((r) => r.ts < cut).length;
    let deleted = 0;
    for (let n = -1; n !== 0;) deleted += n = await store.pruneRequests(cut, 40);
    t.equal(deleted, old, 'every row older than the cut went, in slices');
    t.strictSame((await b.rawIds(t)).sort(), all.filter((r) => r.ts >= cut).map((r) => r.id).sort(), 'newer rows stay');
    sameMaps(t, await snapshot(store), before, 'rollups unchanged');
    t.ok(Math.abs((await store.ledgerSpendSince('dev', '2025-02-01T00:00:00.000Z')) - monthSpend) < 1e-9, 'the budget still sees the deleted rows\' spend');
  });

  t.test('board reads: the last hour of raw rows and of auth failures', async (t) => {
    const store = await storeFor(t);
    const all = rows(50, 5, 1);
    await store.insertRequests(all);
    const since = '2025-03-10T00:00:00.000Z';
    const recent = await store.boardRecent(since, 1000);
    t.equal(recent.length, all.filter((r) => r.ts >= since).length);
    t.ok(recent.every((r, i) => i === 0 || recent[i - 1].ts >= r.ts), 'newest first');
    t.notOk('key_prefix' in recent[0], 'no key prefix');
    t.equal((await store.boardRecent(since, 3)).length, 3, 'limited');
    await store.insertAudit(audits(9));
    t.strictSame(await store.boardAuditSince('2025-03-09T03:00:00.000Z', 2), [{ ip: '192.0.2.0', failures: 2 }, { ip: '192.0.2.1', failures: 2 }]);
    const top = await store.boardSums({ grain: 'd', dims: ['auth_ip'], from: '2025-03-09', to: '2025-03-09', order: 'requests', limit: 1 });
    t.equal(top.length, 1);
    t.equal(top[0].requests, 3);
  });

  t.test('a 0.3.0 store is backfilled in slices, by two processes at once, never twice', async (t) => {
    const old = rows(230, 11);
    const oldAudit = audits(5);
    await b.open030(t, old, oldAudit);
    const first = await storeFor(t);
    const second = await storeFor(t);
    t.strictSame(await snapshot(first), new Map(), 'nothing rolled up yet');
    t.equal(await first.ledgerSpendSince('dev', '2025-03-01T00:00:00.000Z'), await first.spendSince('dev', '2025-03-01T00:00:00.000Z'), 'budget reads raw rows meanwhile');
    const fresh = rows(40, 12);
    await first.insertRequests(fresh.slice(0, 20)); // written during the backfill: rolled up as written
    let slices = 0;
    let done = false;
    let total = 0;
    while (!done) {
      const [a, c] = await Promise.all([first.backfillRollups(17), second.backfillRollups(17)]);
      total += a.rows + c.rows;
      done = a.done && c.done;
      if (++slices === 3) await second.insertRequests([...fresh.slice(20), old[0]]); // old[0] replayed: skipped
      t.ok(slices < 100, 'terminates');
    }
    // Postgres leaves rows written meanwhile inside the backfill's (ts, id) range to the backfill.
    t.ok(total >= old.length + oldAudit.length && total <= old.length + oldAudit.length + fresh.length, `the backfill read ${total} rows`);
    t.same(await first.backfillRollups(17), { done: true, rows: 0 }, 'done stays done');
    sameMaps(t, await snapshot(first), expected([...old, ...fresh], oldAudit), 'rollups equal the recomputation');
    await first.insertRequests(rows(5, 13));
    t.ok(Math.abs((await first.ledgerSpendSince('dev', '2025-03-01T00:00:00.000Z')) - (await first.spendSince('dev', '2025-03-01T00:00:00.000Z'))) < 1e-9, 'rollup spend after the backfill');
  });
}
