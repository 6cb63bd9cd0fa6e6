// The budget where the developer works (docs/http.md, "Budgets"): the four x-sluice-budget-*
// headers on every generative response and on sluice's own refusals after the budget step, off for
// a profile that sets budget_headers: false; GET /v1/budget with a client key (its key's and
// profile's standing, caps, spend and resets, its session against the session cap), which spends
// and counts nothing, answers errors in the dialect its headers suggest, and is refused while its
// key is over its rate limit without counting toward it. Spend is seeded as rows already in the
// store (as a restart finds them) on a settable clock.

import t, { type Test } from 'tap';
import { insertKey, prepareKey } from '../../cli/keys.ts';
import type { BudgetReport } from '../../lib/budget-report.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import type { KeyRow } from '../../lib/store/store.ts';
import { spentRow, teamProfiles } from '../helpers/budget-caps.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const NOW = Date.parse('2026-03-10T12:00:00.000Z');
const DAY_END = '2026-03-11T00:00:00.000Z';
const MONTH_END = '2026-04-01T00:00:00.000Z';
const HEADERS = ['x-sluice-budget-stage', 'x-sluice-budget-used', 'x-sluice-budget-scope', 'x-sluice-budget-reset'];

const TEAM = teamProfiles(0.00001);
const PROFILES = `${TEAM.yaml}  hushed:
    default_tier: fast
    router: sim
    budget: { daily_usd: 10, monthly_usd: 100 }
    budget_headers: false
  slow:
    default_tier: fast
    router: sim
    budget: { daily_usd: 10, monthly_usd: 100 }
    rate_limits: { per_key_per_minute: 2, per_user_per_minute: 2 }
`;
const ENV = {
  ...TEAM.env,
  SLUICE_UPSTREAM_KEY_HUSHED: 'sk-or-v1-hushedhushedhushedhushedhushedhushedhushedhushedhushed',
  SLUICE_UPSTREAM_KEY_SLOW: 'sk-or-v1-slowslowslowslowslowslowslowslowslowslowslowslowslowslow00',
};

/** A key made as `sluice keys create` makes it (with its caps), and its row. */
async function mint(h: Harness, profile: string, name: string, dailyUsd?: string): Promise<{ key: string; row: KeyRow }> {
  const key = await insertKey(h.store, prepareKey(h.config, { profile, name, dailyUsd }, h.clock.now));
  const row = (await h.store.listKeys(profile)).find((k) => k.name === name && k.revoked_at === null)!;
  return { key, row };
}

async function start(t: Test, counters?: MemoryCounters) {
  return startHarness(t, { extraProfiles: PROFILES, env: ENV, clockStart: NOW, counters });
}

const budgetOf = async (h: Harness, key: string, headers: Record<string, string> = {}) => {
  const res = await fetch(`${h.url}/v1/budget`, { headers: { authorization: `Bearer ${key}`, ...headers } });
  return { status: res.status, headers: res.headers, body: (await res.json()) as BudgetReport };
};
const chat = (h: Harness, key: string, headers: Record<string, string> = {}) =>
  fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${key}`, ...headers },
    body: JSON.stringify({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }),
  });
const messages = (h: Harness, key: string, body: object = {}, headers: Record<string, string> = {}, path = '/v1/messages') =>
  fetch(`${h.url}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01', ...headers },
    body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }], ...body }),
  });
const budgetHeaders = (res: Response) => HEADERS.map((h) => res.headers.get(h));

t.test('a team of two: a capped key binds at its cap, the other at the profile', async (t) => {
  const h = await start(t);
  const alice = await mint(h, 'team', 'alice', '1');
  const bob = await mint(h, 'team', 'bob');
  // Spent earlier today: alice 0.75 of her 1 USD cap, bob 3 USD; the profile 3.75 of its 10.
  await h.store.insertRequests([spentRow(alice.row, 0.75, NOW - 3_600_000), spentRow(bob.row, 3, NOW - 3_600_000)]);

  const a = await budgetOf(h, alice.key);
  t.equal(a.status, 200);
  t.equal(a.headers.get('content-type'), 'application/json');
  t.equal(a.headers.get('cache-control'), 'no-store');
  const profile = {
    name: 'team', stage: 'none', percent: 37.5, window: 'day', resets_at: DAY_END,
    day: { spent_usd: 3.75, limit_usd: 10, percent: 37.5, resets_at: DAY_END },
    month: { spent_usd: 3.75, limit_usd: 100, percent: 3.7, resets_at: MONTH_END },
  };
  t.strictSame(a.body, {
    object: 'budget', stage: 'fast-only', scope: 'key', percent: 75, window: 'day', resets_at: DAY_END,
    thresholds: { 'fast-only': 70, 'max-tokens': 85, blocked: 100 },
    profile,
    key: {
      name: 'alice', stage: 'fast-only', percent: 75, window: 'day', resets_at: DAY_END,
      day: { spent_usd: 0.75, limit_usd: 1, percent: 75, resets_at: DAY_END },
      month: { spent_usd: 0.75, limit_usd: null, percent: null, resets_at: MONTH_END },
    },
    session: null,
  }, "alice: her own cap binds (75 %), the profile's 37.5 % beside it");
  const b = await budgetOf(h, bob.key);
  t.strictSame(b.body, { object: 'budget', stage: 'none', scope: 'profile', percent: 37.5, window: 'day', resets_at: DAY_END, thresholds: a.body.thresholds, profile, key: null, session: null },
    "bob: no caps of his own, the profile's budget, nothing of alice's");
  t.notMatch(JSON.stringify(b.body), /alice/, "no other key's data");
  t.equal(h.rowCount(), 0, 'GET /v1/budget writes no row');
  t.strictSame((await budgetOf(h, bob.key)).body, b.body, 'and spends nothing: asked again, the same');

  // The same standing on each response.
  const ra = await chat(h, alice.key);
  t.equal(ra.status, 200);
  t.strictSame(budgetHeaders(ra), ['fast-only', '75.0', 'key', DAY_END], "alice's chat answer: her key's stage, percentage, scope, reset");
  t.equal(ra.headers.get('x-sluice-degradation'), 'fast-only', 'and it is handled at that stage');
  await ra.arrayBuffer();
  const rb = await messages(h, bob.key, { stream: true });
  t.equal(rb.status, 200);
  t.strictSame(budgetHeaders(rb), ['none', '37.5', 'profile', DAY_END], "bob's streamed messages answer: the profile's");
  await rb.arrayBuffer();
  const rr = await fetch(`${h.url}/v1/responses`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${bob.key}` }, body: JSON.stringify({ model: 'sluice/fast', input: 'hi' }),
  });
  t.equal(rr.status, 200);
  t.equal(rr.headers.get('x-sluice-budget-scope'), 'profile', 'the responses route too');
  await rr.arrayBuffer();
  const ct = await messages(h, bob.key, {}, {}, '/v1/messages/count_tokens');
  await ct.arrayBuffer();
  t.strictSame(budgetHeaders(ct), [null, null, null, null], 'count_tokens is never budget-checked: no budget headers');
  await h.rows(3);

  // Alice past her cap: her 429 carries the same headers, blocked; bob goes on.
  const after = await budgetOf(h, alice.key);
  t.ok(after.body.key!.day.spent_usd > 0.75, "her answered request counts toward her cap (GET /v1/budget reads what the budget step reads)");
  await h.gateway.deps.budget.addRow(spentRow(alice.row, 0.5, h.clock.now));
  const blocked = await chat(h, alice.key);
  t.equal(blocked.status, 429);
  t.equal(blocked.headers.get('x-should-retry'), 'false');
  t.strictSame(budgetHeaders(blocked).slice(0, 1).concat(budgetHeaders(blocked).slice(2)), ['blocked', 'key', DAY_END], 'the refusal: blocked, her key, until midnight');
  t.ok(Number(blocked.headers.get('x-sluice-budget-used')) >= 100, `used ${blocked.headers.get('x-sluice-budget-used')} %`);
  t.match(await blocked.json(), { error: { code: 'key_budget_exhausted' } });
  const stillBob = await chat(h, bob.key);
  t.equal(stillBob.status, 200, "bob's requests go on");
  t.equal(stillBob.headers.get('x-sluice-budget-stage'), 'none');
  await stillBob.arrayBuffer();
  const ab = await budgetOf(h, alice.key);
  t.match(ab.body, { stage: 'blocked', scope: 'key', window: 'day', resets_at: DAY_END, key: { stage: 'blocked' } }, 'GET /v1/budget says she is blocked until midnight');
});

t.test("a session against its profile's session cap", async (t) => {
  const h = await start(t);
  const dev = await mint(h, 'looped', 'dev');
  const fresh = await budgetOf(h, dev.key, { 'x-claude-code-session-id': 'loop-1' });
  t.strictSame(fresh.body.session, { spent_usd: 0, limit_usd: 0.00001, percent: 0, blocked: false, resets_at: DAY_END }, 'a session not seen yet: nothing spent');
  t.equal((await budgetOf(h, dev.key)).body.session, null, 'no session named: none');
  const first = await messages(h, dev.key, {}, { 'x-claude-code-session-id': 'loop-1', 'x-sim': 'chunks=50' });
  t.equal(first.status, 200);
  await first.arrayBuffer();
  await h.rows(1);
  const spent = await budgetOf(h, dev.key, { 'x-claude-code-session-id': 'loop-1' });
  t.match(spent.body.session, { limit_usd: 0.00001, blocked: true }, 'one answer spent the cap');
  t.ok(spent.body.session!.percent >= 100);
  t.equal(spent.body.stage, 'none', "the key's and profile's stage are not the session's");
  const refused = await messages(h, dev.key, {}, { 'x-claude-code-session-id': 'loop-1' });
  t.equal(refused.status, 429);
  t.match(await refused.json(), { type: 'error', error: { type: 'rate_limit_error', message: /session quota/ } });
  t.strictSame(budgetHeaders(refused), ['none', refused.headers.get('x-sluice-budget-used'), 'profile', DAY_END], "a session's refusal carries the profile's standing, which the session cap leaves as it is");
  t.match((await budgetOf(h, dev.key, { 'x-sluice-session': 'other' })).body.session, { spent_usd: 0, blocked: false }, 'another session of the key: untouched');
});

t.test('budget_headers: false turns the headers off; the JSON stays', async (t) => {
  const h = await start(t);
  const k = await mint(h, 'hushed', 'quiet');
  const res = await chat(h, k.key);
  t.equal(res.status, 200);
  t.strictSame(budgetHeaders(res), [null, null, null, null], 'no budget headers');
  t.equal(res.headers.get('x-sluice-degradation'), 'none', 'the degradation header stays');
  await res.arrayBuffer();
  t.match((await budgetOf(h, k.key)).body, { stage: 'none', scope: 'profile', profile: { name: 'hushed' } });
});

t.test('GET /v1/budget: errors in the dialect the headers suggest, GET only', async (t) => {
  const h = await start(t);
  const none = await fetch(`${h.url}/v1/budget`);
  t.equal(none.status, 401);
  t.equal(none.headers.get('x-should-retry'), 'false');
  t.match(await none.json(), { error: { type: 'invalid_api_key', code: 'invalid_api_key' } }, 'chat dialect by default');
  const anthropic = await fetch(`${h.url}/v1/budget`, { headers: { 'anthropic-version': '2023-06-01', 'x-api-key': 'sluice_team_nope' } });
  t.equal(anthropic.status, 401);
  t.match(await anthropic.json(), { type: 'error', error: { type: 'authentication_error' } }, 'messages dialect with anthropic-version');
  const k = await mint(h, 'team', 'poster');
  const post = await fetch(`${h.url}/v1/budget`, { method: 'POST', headers: { authorization: `Bearer ${k.key}` } });
  t.equal(post.status, 405);
  t.equal(post.headers.get('allow'), 'GET');
  await post.arrayBuffer();
});

t.test('GET /v1/budget counts toward no rate-limit window, and is refused while its key is over it', async (t) => {
  // One fixed instant: the 60-second windows cannot roll over during the test.
  const counters = new MemoryCounters({ now: () => NOW });
  t.teardown(() => counters.close());
  const h = await start(t, counters);
  const k = await mint(h, 'slow', 'poller');
  for (let i = 0; i < 5; i++) t.equal((await budgetOf(h, k.key)).status, 200, `status line poll ${i + 1}`);
  for (let i = 0; i < 2; i++) {
    const res = await chat(h, k.key);
    t.equal(res.status, 200, `request ${i + 1} of 2 a minute: the polls took none of them`);
    await res.arrayBuffer();
  }
  const over = await chat(h, k.key);
  t.equal(over.status, 429, 'the third request is over the limit');
  await over.arrayBuffer();
  const refused = await budgetOf(h, k.key);
  t.equal(refused.status, 429, 'GET /v1/budget of a key over its limit: refused as any /v1 route');
  t.equal(refused.headers.get('retry-after'), '5');
  t.match(refused.body, { error: { code: 'rate_limit_exceeded' } });
});
