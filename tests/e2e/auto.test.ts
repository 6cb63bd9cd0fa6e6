// `sluice/auto` end to end (docs/http.md): one decision request to the decision model on the sim
// (profile's key, ladder names and the conversation's excerpt in the prompt, the client's x-sim
// header not passed on), the reply read leniently, the tier used for the real request, the
// decision kept per session (x-sluice-session or the Claude Code session), none without a
// session, the default tier when no ladder tier is named, and the decision's own row.

import t from 'tap';
import type { SimRequest } from '../../lib/sim/index.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, UPSTREAM_KEYS } from '../helpers/gateway.ts';

const DECISION_MODEL = 'google/gemini-2.5-flash-lite';

t.test('sluice/auto', async (t) => {
  const h = await startHarness(t);
  const dev = await h.key('dev');
  const asst = await h.key('assistant');
  let rowsSoFar = 0;

  const decisions = () => h.sim.received.filter((r) => r.json?.model === DECISION_MODEL);
  const lastModelCall = (): SimRequest => h.sim.received.filter((r) => r.method === 'POST' && r.json?.model !== DECISION_MODEL).at(-1)!;

  /** Sends one request; returns its tier headers, its row, how many decisions it caused and every decision row so far. */
  async function send(o: { key?: string; dialect?: 'chat' | 'messages'; text: string; headers?: Record<string, string>; metadata?: Record<string, string> }) {
    const decided = decisions().length;
    const dialect = o.dialect ?? 'chat';
    const body: Record<string, any> = { model: 'sluice/auto', messages: [{ role: 'user', content: o.text }] };
    if (dialect === 'messages') body.max_tokens = 200;
    if (o.metadata) body.metadata = o.metadata;
    const res = await fetch(`${h.url}${dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages'}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${o.key ?? dev}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...o.headers },
      body: JSON.stringify(body),
    });
    t.equal(res.status, 200);
    await res.json();
    const newDecisions = decisions().length - decided;
    rowsSoFar += 1 + newDecisions;
    const rows = await h.rows(rowsSoFar);
    const row = rows.find((r) => r.id === res.headers.get('x-sluice-request-id'))!;
    const decisionRows = rows.filter((r) => r.tier === 'auto-decision');
    return { tier: res.headers.get('x-sluice-tier'), model: res.headers.get('x-sluice-model'), row, newDecisions, decisionRows };
  }

  await t.test('one decision, read leniently, picks the tier of the real request', async (t) => {
    const text = 'Plan the migration of our billing system. [[reply:Reasoning, definitely]]';
    const r = await send({ text, headers: { 'x-sluice-session': 'conv-a', 'x-sim': 'provider=Acme' } });
    t.equal(r.newDecisions, 1);
    const d = decisions().at(-1)!;
    t.equal(d.path, '/api/v1/chat/completions', 'chat dialect');
    t.equal(d.headers.authorization, `Bearer ${UPSTREAM_KEYS.dev}`, "the profile's upstream key");
    t.notOk('x-sim' in d.headers, "the client's headers are not passed to the decision");
    const prompt = JSON.stringify(d.json.messages);
    for (const tier of ['fast', 'agent', 'reasoning']) t.ok(prompt.includes(tier), `the prompt names ${tier}`);
    t.ok(prompt.includes('Plan the migration of our billing system.'), 'the prompt carries an excerpt of the conversation');

    t.equal(r.tier, 'reasoning');
    t.equal(r.model, 'google/gemini-2.5-pro');
    const real = lastModelCall();
    t.equal(real.json.model, 'google/gemini-2.5-pro');
    t.equal(real.headers['x-sim'], 'provider=Acme', 'the real request keeps the client header');
    t.match(r.row, { tier: 'reasoning', requested_model: 'sluice/auto', model: 'google/gemini-2.5-pro', session: 'conv-a', endpoint: 'chat' });

    t.equal(r.decisionRows.length, 1);
    const [dr] = r.decisionRows;
    t.match(dr, { endpoint: 'chat', tier: 'auto-decision', profile: 'dev', requested_model: DECISION_MODEL, model: DECISION_MODEL, status: 200, outcome: 'ok', cost_source: 'upstream', session: 'conv-a' });
    t.ok(dr.cost_usd > 0, 'the decision has a cost');
    t.ok(dr.input_tokens > 0);
  });

  await t.test('the same x-sluice-session makes no new decision', async (t) => {
    const r = await send({ text: 'Just say hi. [[reply:fast]]', headers: { 'x-sluice-session': 'conv-a' } });
    t.equal(r.newDecisions, 0);
    t.equal(r.tier, 'reasoning', 'the kept decision');
    t.equal(lastModelCall().json.model, 'google/gemini-2.5-pro');
    t.equal(r.row.session, 'conv-a');
  });

  await t.test('the Claude Code session keeps the decision too', async (t) => {
    const cc = '7d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6';
    const first = await send({ dialect: 'messages', text: '[[reply:agent]] refactor this module', headers: { 'x-claude-code-session-id': cc } });
    t.equal(first.newDecisions, 1);
    t.equal(first.tier, 'agent');
    t.equal(lastModelCall().json.model, 'anthropic/claude-sonnet-4.5');
    t.notOk('models' in lastModelCall().json, 'no fallbacks on messages');
    const again = await send({ dialect: 'messages', text: '[[reply:reasoning]] now think hard', headers: { 'x-claude-code-session-id': cc } });
    t.equal(again.newDecisions, 0);
    t.equal(again.tier, 'agent');
    t.equal(again.row.session, cc);

    // The session inside a Claude Code metadata.user_id blob works the same way.
    const blob = JSON.stringify({ device_id: 'ab'.repeat(32), account_uuid: '', session_id: '0f0e0d0c-0b0a-4909-8807-060504030201' });
    const b1 = await send({ dialect: 'messages', text: '[[reply:fast]]', metadata: { user_id: blob } });
    const b2 = await send({ dialect: 'messages', text: '[[reply:reasoning]]', metadata: { user_id: blob } });
    t.same([b1.newDecisions, b1.tier, b2.newDecisions, b2.tier], [1, 'fast', 0, 'fast']);
  });

  await t.test('without a session every request decides', async (t) => {
    const a = await send({ text: '[[reply:fast]]' });
    const b = await send({ text: '[[reply:AGENT!]]' });
    t.same([a.newDecisions, a.tier, b.newDecisions, b.tier], [1, 'fast', 1, 'agent']);
    t.equal(a.row.session, null);
  });

  await t.test("a reply naming no ladder tier gives the profile's default tier", async (t) => {
    const d = await send({ text: '[[reply:no idea, sorry]]' });
    t.equal(d.newDecisions, 1);
    t.equal(d.tier, 'agent', 'dev: agent');
    t.equal(lastModelCall().json.model, 'anthropic/claude-sonnet-4.5');
    const a = await send({ key: asst, text: '[[reply:¯\\_(ツ)_/¯]]' });
    t.equal(a.newDecisions, 1);
    t.equal(a.tier, 'fast', 'assistant: fast');
    t.equal(decisions().at(-1)!.headers.authorization, `Bearer ${UPSTREAM_KEYS.assistant}`);
    const rows: RequestRow[] = await h.rows(rowsSoFar);
    t.equal(rows.filter((r) => r.tier === 'auto-decision' && r.profile === 'assistant').length, 1, 'its decision row is the profile\'s');
  });

  await t.test('every decision left exactly one auto-decision row', async (t) => {
    const rows = await h.rows(rowsSoFar);
    t.equal(rows.filter((r) => r.tier === 'auto-decision').length, decisions().length);
    t.equal(rows.length, rowsSoFar);
  });
});
