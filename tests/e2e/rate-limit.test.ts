// Rate limits end to end (spec "Limits", docs/http.md), on memory and on Redis counters: the 61st
// request in a minute from one key and the 11th from one (key, end user) answer 429 with
// retry-after 5 in the request's dialect and reach nothing upstream; other end users and other
// keys still pass; requests without an end user count toward the key only; a profile's own
// limits apply; count_tokens counts too.

import t, { type Test } from 'tap';
import { openRedisCounters } from '../lib/counters.contract.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

const LIMITED = `  limited:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    rate_limits: { per_key_per_minute: 3, per_user_per_minute: 2 }
`;

type Call = (user?: string) => Promise<Response>;

function calls(h: Harness, key: string) {
  const post = (path: string, body: object, headers: Record<string, string>) =>
    fetch(`${h.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const chat: Call = (user) =>
    post('/v1/chat/completions', { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }], ...(user ? { user } : {}) }, { authorization: `Bearer ${key}` });
  const messages: Call = (user) =>
    post('/v1/messages', { model: 'sluice/fast', max_tokens: 50, messages: [{ role: 'user', content: 'hi' }], ...(user ? { metadata: { user_id: user } } : {}) },
      { 'x-api-key': key, 'anthropic-version': '2023-06-01' });
  const countTokens: Call = (user) =>
    post('/v1/messages/count_tokens', { model: 'claude-sonnet-4-5', messages: [{ role: 'user', content: 'hi' }], ...(user ? { metadata: { user_id: user } } : {}) },
      { 'x-api-key': key, 'anthropic-version': '2023-06-01' });
  return { chat, messages, countTokens };
}

/** Inference and count_tokens requests the sim has received (the catalog fetch is not one). */
function upstream(h: Harness): number {
  return h.sim.received.filter((r) => r.path.startsWith('/api/v1/chat/') || r.path.startsWith('/api/v1/messages')).length;
}

async function passes(t: Test, res: Response, what: string): Promise<void> {
  t.equal(res.status, 200, what);
  await res.arrayBuffer();
}

/** A 429 for a rate limit, in the chat dialect. */
async function chatLimited(t: Test, res: Response, what: string): Promise<void> {
  t.equal(res.status, 429, what);
  t.equal(res.headers.get('retry-after'), '5');
  const body = (await res.json()) as Record<string, any>;
  t.match(body, { error: { message: String, type: 'rate_limit_error', param: null, code: 'rate_limit_exceeded' } }, `${what}: chat body`);
  t.same(Object.keys(body.error).sort(), ['code', 'message', 'param', 'type']);
}

/** A 429 for a rate limit, in the messages dialect. */
async function messagesLimited(t: Test, res: Response, what: string): Promise<void> {
  t.equal(res.status, 429, what);
  t.equal(res.headers.get('retry-after'), '5');
  const body = (await res.json()) as Record<string, any>;
  t.match(body, { type: 'error', error: { type: 'rate_limit_error', message: String } }, `${what}: messages body`);
  t.same(Object.keys(body).sort(), ['error', 'type']);
}

for (const backing of ['memory', 'redis'] as const) {
  t.test(`on ${backing} counters`, async (t) => {
    async function harness(t: Test): Promise<Harness> {
      // Opened before the harness, so its teardown (last in, first out) runs after the gateway's.
      const counters = backing === 'redis' ? await openRedisCounters(t) : undefined;
      return startHarness(t, { counters, extraProfiles: LIMITED, env: { SLUICE_UPSTREAM_KEY_LIMITED: 'sk-or-x' } });
    }

    t.test('the 61st request in a minute from one key is refused, in both dialects', async (t) => {
      const h = await harness(t);
      const one = calls(h, await h.key('dev'));
      // 60 requests, both dialects sharing the key's window, ten at a time.
      for (let i = 0; i < 60; i += 10) {
        const batch = await Promise.all(Array.from({ length: 10 }, (_, j) => ((i + j) % 2 === 0 ? one.chat() : one.messages())));
        for (const res of batch) await passes(t, res, `request ${i + 1}…${i + 10}`);
      }
      const before = upstream(h);
      await chatLimited(t, await one.chat(), 'the 61st (chat)');
      await messagesLimited(t, await one.messages(), 'the 62nd (messages)');
      await messagesLimited(t, await one.messages('someone'), 'with an end user too');
      t.equal(upstream(h), before, 'nothing went upstream');
      const other = calls(h, await h.key('dev'));
      await passes(t, await other.chat(), 'another key of the same profile still passes');
    });

    t.test('the 11th request from one (key, end user) is refused; another end user passes', async (t) => {
      const h = await harness(t);
      const k = calls(h, await h.key('dev'));
      for (let i = 0; i < 10; i++) await passes(t, await (i % 2 === 0 ? k.chat('alice') : k.messages('alice')), `alice ${i + 1}`);
      const before = upstream(h);
      await chatLimited(t, await k.chat('alice'), "alice's 11th (chat)");
      await messagesLimited(t, await k.messages('alice'), "alice's 12th (messages)");
      t.equal(upstream(h), before, 'nothing went upstream');
      await passes(t, await k.chat('bob'), 'bob, same key, chat');
      await passes(t, await k.messages('bob'), 'bob, same key, messages');
      await passes(t, await k.chat(), 'no end user, same key');
    });

    t.test('requests without an end user count toward the key only', async (t) => {
      const h = await harness(t);
      const k = calls(h, await h.key('dev'));
      for (let i = 0; i < 15; i++) await passes(t, await (i % 2 === 0 ? k.chat() : k.messages()), `no end user ${i + 1}: no per-user limit`);
      for (let i = 0; i < 10; i++) await passes(t, await k.chat('carol'), `carol ${i + 1}: the anonymous requests were not hers`);
      await chatLimited(t, await k.chat('carol'), "carol's 11th");
      // On a key limited to 3: anonymous requests use the key's window up.
      const small = calls(h, await h.key('limited'));
      for (let i = 0; i < 3; i++) await passes(t, await small.chat(), `limited, anonymous ${i + 1}`);
      await chatLimited(t, await small.chat('dave'), 'a fresh end user meets the full key window');
    });

    t.test("a profile's own limits replace the defaults", async (t) => {
      const h = await harness(t);
      const a = calls(h, await h.key('limited'));
      await passes(t, await a.chat('erin'), 'erin 1');
      await passes(t, await a.messages('erin'), 'erin 2');
      await messagesLimited(t, await a.messages('erin'), 'erin 3: per user 2');
      const b = calls(h, await h.key('limited'));
      for (let i = 0; i < 3; i++) await passes(t, await b.messages(), `key b ${i + 1}`);
      await messagesLimited(t, await b.messages(), 'key b 4: per key 3');
      await chatLimited(t, await b.chat(), 'key b 5, chat');
      const dev = calls(h, await h.key('dev'));
      for (let i = 0; i < 4; i++) await passes(t, await dev.chat('erin'), `dev keeps the default limits (${i + 1})`);
    });

    t.test('count_tokens counts toward the limits', async (t) => {
      const h = await harness(t);
      const k = calls(h, await h.key('limited'));
      for (let i = 0; i < 3; i++) {
        const res = await k.countTokens();
        t.equal(res.status, 404, `count_tokens ${i + 1} reaches the upstream (the sim has none: 404 passes back)`);
        await res.arrayBuffer();
      }
      t.equal(h.sim.received.filter((r) => r.path === '/api/v1/messages/count_tokens').length, 3);
      await messagesLimited(t, await k.countTokens(), 'the 4th count_tokens');
      await chatLimited(t, await k.chat(), 'then a chat request');
      t.equal(h.sim.received.filter((r) => r.path === '/api/v1/messages/count_tokens').length, 3, 'the refused one went nowhere');
      const u = calls(h, await h.key('limited'));
      await passes(t, await u.chat('frank'), 'frank 1');
      const ct = await u.countTokens('frank');
      t.equal(ct.status, 404, 'frank 2, count_tokens');
      await ct.arrayBuffer();
      await messagesLimited(t, await u.messages('frank'), 'frank 3: his count_tokens counted toward his limit');
    });
  });
}

t.test('a key over its limit is refused before its body is read', async (t) => {
  const h = await startHarness(t, { extraProfiles: LIMITED, env: { SLUICE_UPSTREAM_KEY_LIMITED: 'sk-or-limited' }, bodyTimeoutMs: 60_000 });
  const key = await h.key('limited');
  const { chat } = calls(h, key);
  for (let i = 0; i < 3; i++) await passes(t, await chat(), `request ${i + 1} of 3`);
  // The fourth request declares a body and never sends it: only a check that does not wait for
  // the body can answer before the 60 s body timeout.
  const { request } = await import('node:http');
  const res = await new Promise<import('node:http').IncomingMessage>((resolve, reject) => {
    const req = request(`${h.url}/v1/chat/completions`, {
      method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'content-length': '1000' },
    }, resolve);
    req.on('error', reject);
    req.write('{"model":');
    t.teardown(() => req.destroy());
  });
  t.equal(res.statusCode, 429);
  t.equal(res.headers['retry-after'], '5');
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  t.match(JSON.parse(Buffer.concat(chunks).toString()), { error: { code: 'rate_limit_exceeded' } });
});
