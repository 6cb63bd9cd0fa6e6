// The CI version of `npm run bench -- --soak MINUTES`: 10 seconds of the soak's mixed traffic
// (bench/soak-traffic.ts: both dialects, streamed and not, disconnects, upstream errors, bad keys)
// through a real `sluice serve` on Postgres + Redis: every answer the expected one, rows written =
// requests proxied, no error-level log line, and its open fds back to the idle baseline.

import { readdirSync } from 'node:fs';
import t from 'tap';
import { runMixed } from '../../bench/soak-traffic.ts';
import { startBackings, until } from '../helpers/processes.ts';

const BULK = `  bulk:
    default_tier: fast
    router: sim
    budget: { daily_usd: 1000, monthly_usd: 10000 }
    rate_limits: { per_key_per_minute: 100000, per_user_per_minute: 100000 }
`;

const fds = (pid: number) => readdirSync(`/proc/${pid}/fd`).length;

t.test('10 s of mixed traffic: expected answers, one row per proxied request, fds back to baseline', async (t) => {
  const b = await startBackings(t, { extraProfiles: BULK });
  const A = await b.start({ env: { SLUICE_UPSTREAM_KEY_BULK: 'sk-or-v1-bulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulkbulk04' } });
  const key = await b.key('bulk');
  // The idle baseline after a short warm-up of the same traffic, so the store and Redis pools are
  // at their working size: the fd count once it has held still for 6 s (idle upstream sockets
  // close after the router's 5 s keep-alive hint).
  await runMixed({ origin: A.url, key, badKey: `sluice_bulk_${'Y'.repeat(32)}`, rate: 20, durationMs: 1000, run: 'warm-up' });
  const steady = async () => {
    let last = fds(A.pid);
    let still = 0;
    return until('a steady fd count', async () => {
      const now = fds(A.pid);
      still = now === last ? still + 1 : 0;
      last = now;
      return still >= 120 ? now : undefined; // until() polls every 50 ms: 6 s
    }, 20_000);
  };
  const base = await steady();
  const mark = A.lines.length;
  const r = await runMixed({ origin: A.url, key, badKey: `sluice_bulk_${'Z'.repeat(32)}`, rate: 20, durationMs: 10_000, run: 'soak-short' });
  t.equal(r.sent, 200);
  t.equal(r.unexpected, 0, 'every answer the expected one', { examples: r.examples });

  const rows = await until('every row', async () => {
    const n = (await b.store.listRequests(10_000)).filter((x) => x.run === 'soak-short').length;
    return n >= r.proxied ? n : undefined;
  }, 15_000);
  t.equal(rows, r.proxied, `rows written = requests proxied (${r.proxied}; the ${r.sent - r.proxied} bad keys leave none)`);
  const errors = A.lines.slice(mark).filter((l) => l.level >= 50);
  t.strictSame(errors.map((l) => l.msg), [], 'no error-level log line');
  // Idle upstream sockets close after the router's keep-alive hint (5 s at the sim).
  const end = await steady();
  t.ok(end <= base, `open fds ${end} ≤ baseline ${base}`);
});
