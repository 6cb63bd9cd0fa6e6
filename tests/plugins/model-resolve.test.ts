// Model resolution, the chat fallback list and the max_tokens cap (docs/http.md, spec "Request
// processing rules" 2–4): unit-level against a Ctx-like object with a stub catalog, then end to
// end through the gateway and the simulated router (what the sim received, the x-sluice-* headers
// and the row's tier / requested_model / model), including byte identity of an untouched body.

import t from 'tap';
import { GatewayError } from '../../lib/errors.ts';
import { bodyChanged } from '../../lib/request-body.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

import { autoCalls, config, ctxOf, plugin, resolve } from '../helpers/model-resolve.ts';

/** The cap of an id that neither a tier nor the catalog knows: the profile's default tier's. */
const DEFAULT_TIER_MAX = config.tiers.get(config.profiles.get('dev')!.default_tier)!.max_output_tokens;

t.test('unit: sluice/<tier> picks the tier model, with fallbacks on chat only', async (t) => {
  const chat = await resolve('chat', { model: 'sluice/fast', messages: [] });
  t.equal(chat.tier, 'fast');
  t.equal(chat.model, 'google/gemini-2.5-flash');
  t.equal(chat.body!.model, 'google/gemini-2.5-flash');
  t.same(chat.body!.models, ['openai/gpt-4.1-mini']);
  t.equal(bodyChanged(chat.body!), true);

  const msg = await resolve('messages', { model: 'sluice/fast', max_tokens: 100, messages: [] });
  t.equal(msg.body!.model, 'google/gemini-2.5-flash');
  t.notOk('models' in msg.body!, 'messages never gets a fallback list');

  const own = await resolve('chat', { model: 'sluice/agent', models: ['x/one', 'x/two'], messages: [] });
  t.same(own.body!.models, ['x/one', 'x/two'], "the client's own models list is kept");
  t.equal(own.body!.model, 'anthropic/claude-sonnet-4.5');

  const none = await resolve('chat', { model: 'sluice/reasoning', messages: [] });
  t.notOk('models' in none.body!, 'a tier without fallbacks adds no models list');
});

t.test('unit: an unknown sluice/ alias is a 400 invalid_body', async (t) => {
  const ctx = ctxOf('chat', { model: 'sluice/nope', messages: [] });
  const err = await Promise.resolve().then(() => plugin.run(ctx)).then(() => undefined, (e: unknown) => e);
  t.ok(err instanceof GatewayError, 'a GatewayError');
  t.match(err, { code: 'invalid_body', status: 400 });
  t.equal(ctx.body!.model, 'sluice/nope');
  t.equal(bodyChanged(ctx.body!), false);
});

t.test("unit: claude- ids and the bare short names mean the profile's default tier", async (t) => {
  for (const model of ['claude-sonnet-4-5-20250929', 'claude-3-5-haiku-latest', 'sonnet', 'opus', 'haiku']) {
    const dev = await resolve('messages', { model, max_tokens: 10, messages: [] });
    t.equal(dev.tier, 'agent', `${model} on dev`);
    t.equal(dev.body!.model, 'anthropic/claude-sonnet-4.5');
    const asst = await resolve('messages', { model, max_tokens: 10, messages: [] }, { profile: 'assistant' });
    t.equal(asst.tier, 'fast', `${model} on assistant`);
    t.equal(asst.body!.model, 'google/gemini-2.5-flash');
  }
  // Only the prefix and the exact short names count.
  for (const model of ['anthropic/claude-sonnet-4.5', 'sonnet-4', 'my-claude-x']) {
    const ctx = await resolve('messages', { model, max_tokens: 10, messages: [] });
    t.equal(ctx.tier, null, `${model} passes as given`);
    t.equal(ctx.body!.model, model);
  }
});

t.test('unit: any other id passes as given, with no tier', async (t) => {
  const ctx = await resolve('chat', { model: 'meta-llama/llama-3.3-70b-instruct', messages: [] });
  t.equal(ctx.tier, null);
  t.equal(ctx.model, 'meta-llama/llama-3.3-70b-instruct');
  t.notOk('models' in ctx.body!);
  t.equal(ctx.body!.max_tokens, DEFAULT_TIER_MAX, 'no catalog maximum and no tier: the default tier\'s maximum');
  t.equal(bodyChanged(ctx.body!), true);
  for (const model of ['openrouter/auto', 'openai/gpt-5@preset/x', 'acme/unknown:online']) {
    const asked = await resolve('chat', { model, max_tokens: 10 ** 9, messages: [] });
    t.equal(asked.body!.max_tokens, DEFAULT_TIER_MAX, `${model}: capped though the catalog has no entry`);
    const small = await resolve('responses', { model, max_output_tokens: 100, input: 'x' });
    t.equal(small.body!.max_output_tokens, 100, `${model}: a smaller ask is kept`);
  }
});

t.test('unit: max_tokens cap = min(catalog, tier)', async (t) => {
  const fast = await resolve('messages', { model: 'sluice/fast', max_tokens: 60000, messages: [] });
  t.equal(fast.body!.max_tokens, 8192, 'tier 8192 below catalog 65535');
  const reasoning = await resolve('messages', { model: 'sluice/reasoning', max_tokens: 100000, messages: [] });
  t.equal(reasoning.body!.max_tokens, 65536, 'catalog 65536 below tier 100000');
  const explicit = await resolve('chat', { model: 'openai/gpt-4.1-mini', messages: [] });
  t.equal(explicit.body!.max_tokens, 32768, 'explicit model: the catalog maximum alone');
  const offlist = await resolve('messages', { model: 'sluice/offlist', max_tokens: 10000, messages: [] });
  t.equal(offlist.body!.max_tokens, 4000, 'a tier model the catalog lacks: the tier value alone');
  const unlisted = await resolve('messages', { model: 'acme/other', max_tokens: 999999, messages: [] });
  t.equal(unlisted.body!.max_tokens, DEFAULT_TIER_MAX, 'explicit model absent from the catalog: the default tier\'s maximum');
  const within = await resolve('messages', { model: 'acme/other', max_tokens: 100, messages: [] });
  t.equal(within.body!.max_tokens, 100);
  t.equal(bodyChanged(within.body!), false, 'a request within the cap is untouched');
});

t.test('unit: which max_tokens field is capped', async (t) => {
  const neither = await resolve('chat', { model: 'sluice/fast', messages: [] });
  t.equal(neither.body!.max_tokens, 8192, 'set when neither is present');
  t.notOk('max_completion_tokens' in neither.body!);

  const mct = await resolve('chat', { model: 'sluice/fast', max_completion_tokens: 50000, messages: [] });
  t.equal(mct.body!.max_completion_tokens, 8192, 'the field the client used');
  t.notOk('max_tokens' in mct.body!, 'no second field added');

  const both = await resolve('chat', { model: 'sluice/fast', max_tokens: 50000, max_completion_tokens: 50000, messages: [] });
  t.equal(both.body!.max_tokens, 8192);
  t.equal(both.body!.max_completion_tokens, 8192, 'neither field slips past the cap');

  const msg = await resolve('messages', { model: 'sluice/fast', max_completion_tokens: 50000, max_tokens: 100, messages: [] });
  t.equal(msg.body!.max_tokens, 100, 'messages: max_tokens only');
  t.equal(msg.body!.max_completion_tokens, 50000);

  const small = await resolve('chat', { model: 'openai/gpt-4.1-mini', max_tokens: 100, messages: [] });
  t.equal(small.body!.max_tokens, 100, 'a smaller client value is kept');
  t.equal(bodyChanged(small.body!), false, 'and the body is not marked changed');
});

t.test('unit: sluice/auto asks the auto router unless degraded; degradation forces fast', async (t) => {
  autoCalls.length = 0;
  const auto = await resolve('chat', { model: 'sluice/auto', messages: [] });
  t.equal(autoCalls.length, 1);
  t.equal(auto.tier, 'reasoning');
  t.equal(auto.body!.model, 'google/gemini-2.5-pro');

  const degraded = await resolve('chat', { model: 'sluice/auto', messages: [] }, { degradation: 'fast-only' });
  t.equal(autoCalls.length, 1, 'no decision while degraded');
  t.equal(degraded.tier, 'fast');

  const explicit = await resolve('chat', { model: 'openai/gpt-5', messages: [] }, { degradation: 'fast-only' });
  t.equal(explicit.tier, 'fast');
  t.equal(explicit.body!.model, 'google/gemini-2.5-flash');

  const capped = await resolve('messages', { model: 'claude-opus-4-1', max_tokens: 5000, messages: [] }, { degradation: 'max-tokens' });
  t.equal(capped.tier, 'fast');
  t.equal(capped.body!.max_tokens, 2048);
});

// ---------------------------------------------------------------------------------------------
// End to end

function post(h: Harness, key: string, path: string, body: Record<string, any> | string, headers: Record<string, string> = {}) {
  return fetch(`${h.url}${path}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...(path.startsWith('/v1/messages') ? { 'anthropic-version': '2023-06-01' } : {}), ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}

/** The model requests the sim received (the catalog fetch and other calls left out). */
function upstreamCalls(h: Harness) {
  return h.sim.received.filter((r) => r.method === 'POST' && r.path.startsWith('/api/v1/'));
}

t.test('e2e: resolution, headers, fallbacks, cap and rows', async (t) => {
  const h = await startHarness(t);
  const dev = await h.key('dev');
  const asst = await h.key('assistant');
  let rowsSoFar = 0;
  async function rowOf(res: Response) {
    const rows = await h.rows(++rowsSoFar);
    const row = rows.find((r) => r.id === res.headers.get('x-sluice-request-id'));
    if (!row) throw new Error('no row for this request');
    return row;
  }

  await t.test('the catalog is loaded at start-up', async (t) => {
    t.ok(h.sim.received.some((r) => r.method === 'GET' && r.path === '/api/v1/models'), 'the sim served its catalog');
    const health: any = await (await fetch(`${h.url}/api/health`)).json();
    t.type(health.catalog.sim.refreshed_at, 'string');
  });

  await t.test('chat sluice/fast', async (t) => {
    const res = await post(h, dev, '/v1/chat/completions', { model: 'sluice/fast', max_tokens: 60000, messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200);
    t.equal(res.headers.get('x-sluice-tier'), 'fast');
    t.equal(res.headers.get('x-sluice-model'), 'google/gemini-2.5-flash');
    await res.json();
    const sent = upstreamCalls(h).at(-1)!;
    t.equal(sent.path, '/api/v1/chat/completions');
    t.equal(sent.json.model, 'google/gemini-2.5-flash');
    t.same(sent.json.models, ['openai/gpt-4.1-mini']);
    t.equal(sent.json.max_tokens, 8192);
    const row = await rowOf(res);
    t.equal(row.tier, 'fast');
    t.equal(row.requested_model, 'sluice/fast');
    t.equal(row.model, 'google/gemini-2.5-flash');
  });

  await t.test('messages sluice/agent: no models list, cap min(tier 32000, catalog 64000)', async (t) => {
    const res = await post(h, dev, '/v1/messages', { model: 'sluice/agent', max_tokens: 50000, messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200);
    t.equal(res.headers.get('x-sluice-tier'), 'agent');
    await res.json();
    const sent = upstreamCalls(h).at(-1)!;
    t.equal(sent.path, '/api/v1/messages');
    t.equal(sent.json.model, 'anthropic/claude-sonnet-4.5');
    t.notOk('models' in sent.json);
    t.equal(sent.json.max_tokens, 32000);
    await rowOf(res);
  });

  await t.test('claude- ids follow the profile default tier', async (t) => {
    for (const [key, tier, model] of [[dev, 'agent', 'anthropic/claude-sonnet-4.5'], [asst, 'fast', 'google/gemini-2.5-flash']] as const) {
      const res = await post(h, key, '/v1/messages', { model: 'claude-sonnet-4-5-20250929', max_tokens: 100, messages: [{ role: 'user', content: 'hi' }] });
      t.equal(res.status, 200);
      t.equal(res.headers.get('x-sluice-tier'), tier);
      t.equal(res.headers.get('x-sluice-model'), model);
      await res.json();
      t.equal(upstreamCalls(h).at(-1)!.json.model, model);
      const row = await rowOf(res);
      t.equal(row.tier, tier);
      t.equal(row.requested_model, 'claude-sonnet-4-5-20250929');
      t.equal(row.model, model);
    }
  });

  await t.test('sluice/reasoning on chat with max_completion_tokens: capped at the catalog 65536', async (t) => {
    const res = await post(h, dev, '/v1/chat/completions', { model: 'sluice/reasoning', max_completion_tokens: 100000, messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200);
    await res.json();
    const sent = upstreamCalls(h).at(-1)!;
    t.equal(sent.json.model, 'google/gemini-2.5-pro');
    t.equal(sent.json.max_completion_tokens, 65536);
    t.notOk('max_tokens' in sent.json);
    t.notOk('models' in sent.json, 'reasoning has no fallbacks');
    await rowOf(res);
  });

  await t.test('an explicit model goes as given, capped by the catalog alone', async (t) => {
    const res = await post(h, dev, '/v1/chat/completions', { model: 'openai/gpt-4.1-mini', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(res.status, 200);
    t.equal(res.headers.get('x-sluice-tier'), 'none');
    t.equal(res.headers.get('x-sluice-model'), 'openai/gpt-4.1-mini');
    await res.json();
    const sent = upstreamCalls(h).at(-1)!;
    t.equal(sent.json.model, 'openai/gpt-4.1-mini');
    t.equal(sent.json.max_tokens, 32768);
    t.notOk('models' in sent.json);
    const row = await rowOf(res);
    t.equal(row.tier, null);
    t.equal(row.requested_model, 'openai/gpt-4.1-mini');
    t.equal(row.model, 'openai/gpt-4.1-mini');
  });

  await t.test('an untouched body reaches the sim byte for byte', async (t) => {
    // Odd spacing and key order: any re-serialisation would show.
    const chat = '{ "model":"openai/gpt-4.1-mini",  "max_tokens": 100, "messages":[{"role":"user","content":"hi \\u00e9"}], "zeta": {"b":1,"a":2} }';
    const res = await post(h, dev, '/v1/chat/completions', chat);
    t.equal(res.status, 200);
    await res.json();
    t.equal(upstreamCalls(h).at(-1)!.body, chat);
    await rowOf(res);

    const unlisted = '{"model":"acme/not-in-catalog" , "messages":[{"role":"user","content":"hi"}]}';
    const res2 = await post(h, dev, '/v1/chat/completions', unlisted);
    t.equal(res2.status, 400, 'the router refuses a model it does not know, and sluice passes that on');
    t.match(await res2.json(), { error: { message: 'acme/not-in-catalog is not a valid model ID', code: 400 } });
    t.same(JSON.parse(upstreamCalls(h).at(-1)!.body), { ...JSON.parse(unlisted), max_tokens: DEFAULT_TIER_MAX }, 'a model absent from the catalog: capped at the default tier\'s maximum');
    await rowOf(res2);
  });

  await t.test('an unknown sluice/ alias answers 400 in the dialect and sends nothing', async (t) => {
    const before = upstreamCalls(h).length;
    const rowsBefore = h.rowCount();
    const chat = await post(h, dev, '/v1/chat/completions', { model: 'sluice/bogus', messages: [{ role: 'user', content: 'hi' }] });
    t.equal(chat.status, 400);
    const chatErr: any = await chat.json();
    t.equal(chatErr.error.type, 'invalid_request_error');
    t.equal(chatErr.error.code, 'invalid_body');
    t.match(chatErr.error.message, /sluice\/bogus/);
    const msg = await post(h, dev, '/v1/messages', { model: 'sluice/bogus', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
    t.equal(msg.status, 400);
    const msgErr: any = await msg.json();
    t.equal(msgErr.type, 'error');
    t.equal(msgErr.error.type, 'invalid_request_error');
    t.equal(upstreamCalls(h).length, before, 'nothing went upstream');
    t.equal(h.rowCount(), rowsBefore, 'no row');
  });
});
