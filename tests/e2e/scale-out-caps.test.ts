// Key and session caps in scale-out (docs/configuration.md): two real `sluice serve` processes on
// one Postgres and one Redis. A key capped with `sluice keys create --daily-usd` spends through A
// and degrades, then is refused, on B, which never saw that spend itself; a colleague key of the
// same profile stays at normal on both, and the profile's ledger counts both keys. A session's
// spend through A stops that session on B while another session goes on. /metrics counts both
// refusals by their codes.

import t, { type Test } from 'tap';
import { chat, startBackings, until, type ChatAnswer, type GatewayProcess } from '../helpers/processes.ts';
import { parseMetrics, sumOf } from '../helpers/prom-text.ts';

// A profile with a session cap one answer with 300 reasoning tokens spends (about 0.00075 USD).
const SESSIONS = `  sessions:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    session_daily_usd: 0.0005
`;
const SESSIONS_KEY = { SLUICE_UPSTREAM_KEY_SESSIONS: 'sk-or-v1-sessionssessionssessionssessionssessionssessionssessions0' };

const b = await startBackings(t, { extraProfiles: SESSIONS });
const [A, B] = await Promise.all([b.start({ env: SESSIONS_KEY }), b.start({ env: SESSIONS_KEY })]);

/** `sluice keys create` as the operator runs it; returns the key. */
async function createKey(t: Test, ...args: string[]): Promise<string> {
  const r = await b.cli(['keys', 'create', ...args]);
  t.equal(r.code, 0, r.stderr);
  return r.stdout.trim();
}

/** One cheap chat request in session `session` (the x-sluice-session header). */
async function inSession(p: GatewayProcess, key: string, session: string, sim?: string): Promise<ChatAnswer> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'x-sluice-session': session };
  if (sim) headers['x-sim'] = sim;
  const res = await fetch(`${p.url}/v1/chat/completions`, { method: 'POST', headers, body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: '[[reply:k]]' }] }) });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

t.test('a key capped at 0.001 USD a day: spend through A degrades and then blocks it on B; its colleague stays at normal', async (t) => {
  const runaway = await createKey(t, '--profile', 'dev', '--name', 'runaway', '--daily-usd', '0.001');
  const colleague = await createKey(t, '--profile', 'dev', '--name', 'colleague');

  // The sim charges $0.0000025 per completion token on the fast model: 300 reasoning tokens spend
  // about 75 % of the cap in one request. B polls with the cheapest request (a one-token reply).
  const spend = await chat(A.url, runaway, { sim: 'reasoning=300' });
  t.equal(spend.status, 200);
  t.equal(spend.headers.get('x-sluice-degradation'), 'none');
  await until('B to see the key\'s spend through A', async () => {
    const r = await chat(B.url, runaway, { reply: 'k' });
    return r.headers.get('x-sluice-degradation') === 'none' ? undefined : r;
  }, 5000);
  const degraded = await chat(B.url, runaway, { model: 'sluice/agent', reply: 'k' });
  t.equal(degraded.status, 200);
  t.equal(degraded.headers.get('x-sluice-degradation'), 'fast-only', 'B degrades the key on spend it never saw itself');
  t.equal(degraded.headers.get('x-sluice-tier'), 'fast');
  const normal = await chat(B.url, colleague, { model: 'sluice/agent', reply: 'k' });
  t.equal(normal.headers.get('x-sluice-degradation'), 'none', 'the colleague key of the same profile is not degraded');
  t.equal(normal.headers.get('x-sluice-tier'), 'agent', 'and gets the tier it asked for');

  t.equal((await chat(A.url, runaway, { sim: 'reasoning=150' })).status, 200);
  const blocked = await until('B to refuse the key on the spend through A', async () => {
    const r = await chat(B.url, runaway, { reply: 'k' });
    return r.status === 429 ? r : undefined;
  }, 5000);
  t.match(blocked.body.error, { code: 'key_budget_exhausted', type: 'insufficient_quota', message: 'daily quota of key runaway exhausted; resets at 00:00 UTC' });
  t.equal(blocked.headers.get('x-should-retry'), 'false');
  t.ok(Number(blocked.headers.get('retry-after')) >= 3600, 'retry-after at least an hour');
  t.equal((await chat(A.url, runaway, { reply: 'k' })).body.error?.code, 'key_budget_exhausted', 'A refuses it too');
  for (const p of [A, B]) {
    const r = await chat(p.url, colleague, { model: 'sluice/agent', reply: 'k' });
    t.equal(r.status, 200, 'the colleague is still served');
    t.equal(r.headers.get('x-sluice-degradation'), 'none');
  }

  // The profile's ledger counts both keys: their own ledgers add up to it (every row of dev today is one of theirs).
  const since = new Date(new Date().setUTCHours(0, 0, 0, 0)).toISOString();
  const ids = new Map((await b.store.listKeys('dev')).map((k) => [k.name, k.id]));
  await until('both processes to write every row they hold', async () => (await Promise.all([A.health(), B.health()])).every((h) => h.store.rows_pending === 0));
  const [a, c, profile] = await Promise.all([
    b.store.keyLedgerSpendSince(ids.get('runaway')!, since), b.store.keyLedgerSpendSince(ids.get('colleague')!, since), b.store.ledgerSpendSince('dev', since),
  ]);
  const sums = { a, c, profile };
  t.ok(a >= 0.001 && c > 0, 'both keys spent');
  t.ok(Math.abs(a + c - profile) < 1e-9, 'the two keys\' spend is the profile\'s');
  t.ok(sums.profile > sums.a, `the profile's ${sums.profile} USD counts the capped key's ${sums.a} and its colleague's ${sums.c}`);
  const listed = JSON.parse((await b.cli(['keys', 'list', '--json', '--profile', 'dev'])).stdout) as Array<Record<string, unknown>>;
  t.match(listed.find((k) => k.name === 'runaway'), { daily_usd: 0.001, monthly_usd: null, day_usd: Math.round(sums.a * 1e6) / 1e6 }, '`keys list` shows the cap and the spend');
});

t.test('a session past its cap through A is refused on B; another session goes on', async (t) => {
  const key = await createKey(t, '--profile', 'sessions', '--name', 'agent');
  t.equal((await inSession(A, key, 'loop', 'reasoning=300')).status, 200, 'the session spends its cap through A');
  const refused = await until('B to refuse the session', async () => {
    const r = await inSession(B, key, 'loop');
    return r.status === 429 ? r : undefined;
  }, 5000);
  t.match(refused.body.error, { code: 'session_budget_exhausted', message: 'daily session quota of profile sessions (0.0005 USD) exhausted for this session; resets at 00:00 UTC' });
  t.equal(refused.headers.get('x-should-retry'), 'false');
  t.equal((await inSession(A, key, 'loop')).status, 429, 'and on A');
  t.equal((await inSession(B, key, 'other')).status, 200, 'another session of the same key is served');
  t.equal((await chat(B.url, key, { reply: 'k' })).status, 200, 'a request without a session is not capped');
});

t.test('/metrics counts the key-cap and session-cap refusals by code, with no per-key series', async (t) => {
  const samples = parseMetrics(await (await fetch(`${B.url}/metrics`)).text());
  t.ok(sumOf(samples, 'sluice_refusals_total', { code: 'key_budget_exhausted', profile: 'dev', route: 'chat' }) >= 1, 'key_budget_exhausted');
  t.ok(sumOf(samples, 'sluice_refusals_total', { code: 'session_budget_exhausted', profile: 'sessions', route: 'chat' }) >= 1, 'session_budget_exhausted');
  const labels = new Set(samples.filter((s) => s.name === 'sluice_refusals_total').flatMap((s) => Object.keys(s.labels)));
  t.strictSame([...labels].sort(), ['code', 'profile', 'route'], 'the same bounded labels as every refusal');
});
