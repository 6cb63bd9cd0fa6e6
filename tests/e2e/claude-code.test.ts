// The real coding agent through sluice: `claude -p` (Claude Code, pinned in devDependencies) with
// only environment variables pointing it at the gateway. It streams an answer through sluice from
// the simulated router (sanitized body, Claude Code's session as end user and auto session, one
// row), and the refusals meant to stop it do stop it after exactly one request.

import t from 'tap';
import { startHarness, UPSTREAM_KEYS, type Harness } from '../helpers/gateway.ts';
import { claude } from '../helpers/clients.ts';

/** Counts the client's POST /v1/messages requests as sluice receives them. */
function countMessages(h: Harness): () => number {
  let n = 0;
  h.gateway.server.on('request', (req) => {
    if (req.method === 'POST' && req.url?.split('?')[0] === '/v1/messages') n++;
  });
  return () => n;
}

t.test('claude -p streams an answer through sluice and leaves one row', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const { code, out } = await claude(t, h.url, key, 'say hi');
  t.equal(code, 0);
  t.equal(out.is_error, false);
  t.equal(out.result, 'Hello from the simulated router.');
  const session = out.session_id as string;
  t.match(session, /^[0-9a-f-]{36}$/);

  const upstream = h.sim.received.filter((r) => r.path.startsWith('/api/v1/messages'));
  t.equal(upstream.length, 1, 'one inference request reached the router');
  const r = upstream[0];
  t.equal(r.path, '/api/v1/messages?beta=true', 'the query string is kept');
  t.equal(r.headers.authorization, `Bearer ${UPSTREAM_KEYS.dev}`);
  t.notOk('x-claude-code-session-id' in r.headers, 'the session header is consumed');
  t.notOk(JSON.stringify(r.headers).includes(key.slice(-32)), 'the client key never goes upstream');
  t.ok(r.headers['anthropic-beta'], 'anthropic-beta passes');
  t.equal(r.json.model, 'anthropic/claude-sonnet-4.5', "a claude-… model means the profile's default tier");
  t.notOk(r.json.thinking?.type === 'adaptive', 'adaptive thinking dropped');
  t.notOk('context_management' in r.json);
  t.notOk('output_config' in r.json);
  t.notOk(r.json.messages.some((m: any) => m.role === 'system'), 'system turns became user turns');
  t.equal(r.json.messages.at(-1).role, 'user');
  t.notOk(r.json.tools.some((tool: any) => 'defer_loading' in tool || 'strict' in tool));
  t.ok(r.json.max_tokens <= 32000, 'max_tokens capped at the tier maximum');

  const [row] = await h.rows(1);
  t.match(row, { endpoint: 'messages', tier: 'agent', model: 'anthropic/claude-sonnet-4.5', stream: true, status: 200, outcome: 'ok', end_user: `cc:${session}`, session });
  t.ok(row.output_tokens > 0 && row.cost_usd > 0);
});

t.test('a revoked or unknown key stops claude after one request', async (t) => {
  const h = await startHarness(t);
  const seen = countMessages(h);
  const { code, out } = await claude(t, h.url, 'sluice_dev_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'say hi');
  t.not(code, 0);
  t.equal(out.is_error, true);
  t.equal(out.api_error_status, 401);
  t.equal(seen(), 1, 'x-should-retry: false means no retry');
});

t.test('an exhausted budget stops claude after one request with the budget message', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('tiny');
  await h.store.insertRequests([{
    id: '01900000-0000-7000-8000-000000000001', ts: new Date(h.clock.now).toISOString(), endpoint: 'messages', profile: 'tiny',
    key_prefix: 'x', end_user: null, session: null, run: null, tier: 'fast', requested_model: 'm', model: 'm', stream: false,
    status: 200, outcome: 'ok', input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_write_tokens: 0,
    reasoning_tokens: 0, cost_usd: 0.002, cost_source: 'upstream', provider: null, degradation: 'none', generation_id: null,
    ttfb_ms: null, duration_ms: 1, overhead_ms: null, tools: [],
  }]);
  const seen = countMessages(h);
  const { code, out } = await claude(t, h.url, key, 'say hi');
  t.not(code, 0);
  t.equal(out.is_error, true);
  t.equal(out.api_error_status, 429);
  t.match(String(out.result), /daily quota of profile tiny exhausted; resets at 00:00 UTC/, 'the refusal names the budget and its reset');
  t.equal(seen(), 1, 'retry-after ≥ 3600 with x-should-retry: false: no retry');
  t.equal(h.sim.received.filter((r) => r.path.startsWith('/api/v1/messages')).length, 0, 'nothing went upstream');
});
