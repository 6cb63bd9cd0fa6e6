// docs/http.md "Errors", row by row: every condition of the table in all three dialects
// (the Responses API writes chat's envelope) against both store backings, each answered with the
// table's status, exactly the dialect's body shape with the table's type/code, the table's headers
// (and no retry header the table does not list), and, for every refusal sluice makes itself,
// nothing sent upstream. Then the Responses route's own refusals (stateful fields, the compact
// endpoint). The upstream failures (502, 504) come last: 502 in a harness of its own, with the
// simulated router closed.

import { randomUUID } from 'node:crypto';
import { once } from 'node:events';
import http from 'node:http';
import t, { type Test } from 'tap';
import { revokeKey } from '../../cli/keys.ts';
import { displayPrefix, generateKey, hashKey, parseKey } from '../../lib/keys.ts';
import type { SimRequest, SimulatedRouter } from '../../lib/sim/index.ts';
import type { RequestRow } from '../../lib/store/store.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';

type Dialect = 'chat' | 'messages' | 'responses';
const DIALECTS: Dialect[] = ['chat', 'messages', 'responses'];
const STORES = ['sqlite', 'postgres'] as const;
const PATH: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };
/** The upstream paths of inference requests (the catalog fetch at start-up is not one). */
const INFERENCE = ['/api/v1/chat', '/api/v1/messages', '/api/v1/responses'];

/** One row of the table: what the client must see. `retryAfter: 'reset'` is the budget's computed value. */
interface Entry {
  status: number;
  messagesType: string;
  chatType: string;
  code: string;
  retryAfter: string | null | 'reset';
  shouldRetryFalse: boolean;
}

// The table of docs/http.md, written out here (not read from lib/errors.ts) so the test holds the contract.
const TABLE = {
  ip_blocked: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', code: 'ip_blocked', retryAfter: '600', shouldRetryFalse: false },
  invalid_api_key: { status: 401, messagesType: 'authentication_error', chatType: 'invalid_api_key', code: 'invalid_api_key', retryAfter: null, shouldRetryFalse: true },
  ip_not_allowed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', code: 'ip_not_allowed', retryAfter: null, shouldRetryFalse: true },
  profile_removed: { status: 403, messagesType: 'permission_error', chatType: 'permission_error', code: 'profile_removed', retryAfter: null, shouldRetryFalse: true },
  upstream_key_missing: { status: 503, messagesType: 'api_error', chatType: 'api_error', code: 'upstream_key_missing', retryAfter: null, shouldRetryFalse: false },
  rate_limit_exceeded: { status: 429, messagesType: 'rate_limit_error', chatType: 'rate_limit_error', code: 'rate_limit_exceeded', retryAfter: '5', shouldRetryFalse: false },
  budget_exhausted: { status: 429, messagesType: 'rate_limit_error', chatType: 'insufficient_quota', code: 'budget_exhausted', retryAfter: 'reset', shouldRetryFalse: true },
  invalid_body: { status: 400, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', code: 'invalid_body', retryAfter: null, shouldRetryFalse: false },
  request_too_large: { status: 413, messagesType: 'invalid_request_error', chatType: 'invalid_request_error', code: 'request_too_large', retryAfter: null, shouldRetryFalse: false },
  upstream_unreachable: { status: 502, messagesType: 'api_error', chatType: 'api_error', code: 'upstream_unreachable', retryAfter: null, shouldRetryFalse: false },
  upstream_timeout: { status: 504, messagesType: 'api_error', chatType: 'api_error', code: 'upstream_timeout', retryAfter: null, shouldRetryFalse: false },
} satisfies Record<string, Entry>;

// A profile allowing two requests per key and minute, for the rate-limit row.
const LIMITED = `  limited:
    default_tier: fast
    router: sim
    budget: { daily_usd: 100, monthly_usd: 1000 }
    rate_limits: { per_key_per_minute: 2, per_user_per_minute: 100 }
`;
// SLUICE_TRUSTED_PROXIES: a front proxy on loopback, so the IP-block row can name its client as X-Forwarded-For.
const LIMITED_ENV = { SLUICE_UPSTREAM_KEY_LIMITED: 'sk-or-x', SLUICE_TRUSTED_PROXIES: '127.0.0.1' };

interface Reply { status: number; headers: Headers; json: any }

interface Send { key?: string; xff?: string; sim?: string; body?: string }

function requestBody(dialect: Dialect): string {
  const messages = [{ role: 'user', content: 'hi' }];
  if (dialect === 'responses') return JSON.stringify({ model: 'sluice/fast', input: messages, max_output_tokens: 32 });
  return JSON.stringify(dialect === 'chat' ? { model: 'sluice/fast', messages } : { model: 'sluice/fast', max_tokens: 32, messages });
}

/** Headers as each dialect's clients send them: chat and responses a Bearer token, messages x-api-key. */
function requestHeaders(dialect: Dialect, o: Send): Record<string, string> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (dialect === 'messages') headers['anthropic-version'] = '2023-06-01';
  if (o.key !== undefined) headers[dialect === 'messages' ? 'x-api-key' : 'authorization'] = dialect === 'messages' ? o.key : `Bearer ${o.key}`;
  if (o.xff !== undefined) headers['x-forwarded-for'] = o.xff;
  if (o.sim !== undefined) headers['x-sim'] = o.sim;
  return headers;
}

async function send(h: Harness, dialect: Dialect, o: Send = {}): Promise<Reply> {
  const res = await fetch(h.url + PATH[dialect], { method: 'POST', headers: requestHeaders(dialect, o), body: o.body ?? requestBody(dialect) });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = { unparsable: text };
  }
  return { status: res.status, headers: res.headers, json };
}

/** Declares a body over 32 MiB and sends none of it: the answer must come before any body does. */
async function sendTooLarge(h: Harness, dialect: Dialect, key: string): Promise<Reply> {
  const { hostname, port } = new URL(h.url);
  const req = http.request({
    host: hostname, port: Number(port), method: 'POST', path: PATH[dialect], agent: false,
    headers: { ...requestHeaders(dialect, { key }), 'content-length': String(32 * 1024 * 1024 + 1) },
  });
  req.flushHeaders();
  const [res] = (await once(req, 'response')) as [http.IncomingMessage];
  req.on('error', () => {}); // the gateway closes a connection whose body it refused; that is expected
  const chunks: Buffer[] = [];
  for await (const c of res) chunks.push(c as Buffer);
  req.destroy();
  const headers = new Headers();
  for (const [name, v] of Object.entries(res.headers)) if (typeof v === 'string') headers.set(name, v);
  return { status: res.statusCode!, headers, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) };
}

/** Inference requests the sim received. */
function upstreamCount(sim: SimulatedRouter): number {
  return sim.received.filter((r) => INFERENCE.some((p) => r.path.startsWith(p))).length;
}

/** The table's answer: status, exactly the dialect's body with its type/code, its headers and no others of the two. */
function checkError(t: Test, r: Reply, dialect: Dialect, e: Entry, retryAfter?: string): void {
  t.equal(r.status, e.status, `status ${e.status}`);
  t.match(r.headers.get('content-type'), /^application\/json/, 'a JSON body');
  const message = r.json?.error?.message; // every dialect keeps it at error.message
  t.type(message, 'string', 'the body carries a message');
  t.ok(typeof message === 'string' && message.length > 0, 'the message is not empty');
  const expected = dialect === 'messages'
    ? { type: 'error', error: { type: e.messagesType, message } }
    : { error: { message, type: e.chatType, param: null, code: e.code } };
  t.strictSame(r.json, expected, `exactly the ${dialect} error body with the table's type${dialect === 'messages' ? '' : ' and code'}`);
  const wantRetryAfter = e.retryAfter === 'reset' ? retryAfter : e.retryAfter;
  t.equal(r.headers.get('retry-after'), wantRetryAfter ?? null, wantRetryAfter ? `retry-after: ${wantRetryAfter}` : 'no retry-after');
  t.equal(r.headers.get('x-should-retry'), e.shouldRetryFalse ? 'false' : null, e.shouldRetryFalse ? 'x-should-retry: false' : 'no x-should-retry');
}

/** A refusal sluice makes itself: the table's answer, and nothing sent upstream for it. */
async function refused(t: Test, h: Harness, dialect: Dialect, o: Send, e: Entry, retryAfter?: string): Promise<Reply> {
  const before = upstreamCount(h.sim);
  const r = await send(h, dialect, o);
  checkError(t, r, dialect, e, retryAfter);
  t.equal(upstreamCount(h.sim), before, 'nothing reached the upstream');
  return r;
}

/** A finished request of `profile` already in the store, costing `usd`, at `at`. */
function spentRow(profile: string, usd: number, at: number): RequestRow {
  return {
    id: randomUUID(), ts: new Date(at).toISOString(), endpoint: 'chat', profile, key_prefix: `sluice_${profile}_…seed`,
    end_user: null, session: null, run: null, tier: 'fast', requested_model: 'sluice/fast', model: 'google/gemini-2.5-flash', stream: false,
    status: 200, outcome: 'ok', input_tokens: 10, output_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0,
    cost_usd: usd, cost_source: 'upstream', provider: 'Google', degradation: 'none', generation_id: null, ttfb_ms: 1, duration_ms: 2,
    overhead_ms: 0.1, tools: [],
  };
}

/** Resolves with the next inference exchange of the sim that has closed. */
function nextClosed(sim: SimulatedRouter): Promise<SimRequest> {
  return new Promise((resolve) => {
    const on = (r: SimRequest): void => {
      if (!INFERENCE.some((p) => r.path.startsWith(p))) return;
      sim.events.off('closed', on);
      resolve(r);
    };
    sim.events.on('closed', on);
  });
}

for (const store of STORES) {
  t.test(`${store} store`, async (t) => {
    // One harness for every row that can share it. The upstream timeout is short for the 504 row;
    // the body timeout is short so a gateway that waited for the undeclared 413 body fails fast.
    const h = await startHarness(t, { store, extraProfiles: LIMITED, env: LIMITED_ENV, upstreamTimeoutMs: 300, bodyTimeoutMs: 2000 });
    const devKey = await h.key('dev');
    // The refusals below that count as auth failures come from the loopback peer: 18 in all
    // (five 401 kinds and one 403, in three dialects), under the 20 that would block it.

    t.test('IP blocked: 429, retry-after 600', async (t) => {
      const ip = '203.0.113.9';
      for (let i = 0; i < 20; i++) {
        const r = await send(h, DIALECTS[i % 2], { key: i % 4 < 2 ? undefined : 'sluice_dev_bad', xff: ip });
        t.equal(r.status, 401, `auth failure ${i + 1} from ${ip} is still a 401`);
      }
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          await refused(t, h, dialect, { key: devKey, xff: ip }, TABLE.ip_blocked);
        });
      }
    });

    const bodies401: Record<Dialect, unknown[]> = { chat: [], messages: [], responses: [] };
    const keyCases: Array<{ name: string; key: (t: Test) => Promise<string | undefined> }> = [
      { name: 'key missing', key: async () => undefined },
      { name: 'key malformed', key: async () => 'sluice_dev_notthirtytwocharacters' },
      { name: 'key unknown', key: async () => generateKey('dev') },
      {
        name: 'key revoked',
        key: async (t) => {
          const key = await h.key('dev', { name: 'to-revoke' });
          // Used once first, so the revocation has to get past the key cache too.
          t.equal((await send(h, 'chat', { key })).status, 200, 'the key works before its revocation');
          await revokeKey(h.store, { profile: 'dev', name: 'to-revoke' }, h.clock.now);
          h.clock.now += 61_000;
          return key;
        },
      },
      { name: 'key expired', key: () => h.key('dev', { expires: '2020-01-01' }) },
    ];
    for (const c of keyCases) {
      t.test(`${c.name}: 401`, async (t) => {
        const key = await c.key(t);
        for (const dialect of DIALECTS) {
          t.test(dialect, async (t) => {
            const r = await refused(t, h, dialect, { key }, TABLE.invalid_api_key);
            bodies401[dialect].push(r.json);
          });
        }
      });
    }
    t.test('the five 401s share one body per dialect, word for word', async (t) => {
      for (const dialect of DIALECTS) {
        t.equal(bodies401[dialect].length, 5, `${dialect}: five bodies`);
        for (const b of bodies401[dialect].slice(1)) t.strictSame(b, bodies401[dialect][0], `${dialect}: the same body`);
      }
    });

    t.test('IP outside the allowlist: 403', async (t) => {
      const key = await h.key('dev', { ip: ['10.1.2.3'] });
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          await refused(t, h, dialect, { key }, TABLE.ip_not_allowed);
        });
      }
    });

    t.test('profile removed from configuration: 403', async (t) => {
      // A key as `keys create` stores it, of a profile this configuration no longer has.
      t.notOk(h.config.profiles.has('gone'), 'the profile is not configured');
      const key = generateKey('gone');
      await h.store.createKey({
        key_hash: hashKey(key), prefix: displayPrefix('gone', parseKey(key)!.token), profile: 'gone', name: 'orphan',
        ip_allow: '', created_at: new Date(h.clock.now).toISOString(), expires_at: null,
      });
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          await refused(t, h, dialect, { key }, TABLE.profile_removed);
        });
      }
    });

    t.test('upstream key of the profile missing: 503', async (t) => {
      const key = await h.key('nokey');
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          await refused(t, h, dialect, { key }, TABLE.upstream_key_missing);
        });
      }
    });

    t.test('rate limit: the third request in a minute is a 429, retry-after 5', async (t) => {
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          const key = await h.key('limited');
          for (let i = 1; i <= 2; i++) {
            const before = upstreamCount(h.sim);
            t.equal((await send(h, dialect, { key })).status, 200, `request ${i} is served`);
            t.equal(upstreamCount(h.sim), before + 1, `request ${i} went upstream`);
          }
          await refused(t, h, dialect, { key }, TABLE.rate_limit_exceeded);
        });
      }
    });

    t.test('budget at 100 %: 429, retry-after to the reset, x-should-retry false', async (t) => {
      // Spend equal to tiny's daily budget (0.001 USD), already in the store: the budget seeds from it.
      const now = h.clock.now;
      await h.store.insertRequests([spentRow('tiny', 0.001, now)]);
      const d = new Date(now);
      const midnight = Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1);
      const expected = Math.max(3600, Math.ceil((midnight - now) / 1000));
      const key = await h.key('tiny');
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          const r = await refused(t, h, dialect, { key }, TABLE.budget_exhausted, String(expected));
          const s = Number(r.headers.get('retry-after'));
          t.ok(Number.isInteger(s) && s >= 3600, `retry-after is an integer of at least 3600 s (${s})`);
        });
      }
    });

    t.test('bad body, not JSON: 400', async (t) => {
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          await refused(t, h, dialect, { key: devKey, body: '{"model": "sluice/fast", "messages": [' }, TABLE.invalid_body);
        });
      }
    });

    t.test('responses: what a stateless router cannot honour is a 400 before anything goes upstream', async (t) => {
      const input = [{ role: 'user', content: 'hi' }];
      const cases: Array<[string, Record<string, unknown>, RegExp]> = [
        ['previous_response_id', { previous_response_id: 'resp_1' }, /previous_response_id/], ['store: true', { store: true }, /store: true/],
        ['conversation', { conversation: 'conv_1' }, /conversation/], ['background: true', { background: true }, /background: true/],
        ['an item_reference', { input: [...input, { type: 'item_reference', id: 'msg_1' }] }, /item_reference/],
        ["Codex's compaction_trigger", { input: [...input, { type: 'compaction_trigger' }] }, /compaction_trigger/], ['input a number', { input: 5 }, /`input` must be/],
      ];
      for (const [name, extra, names] of cases) {
        t.test(name, async (t) => {
          const r = await refused(t, h, 'responses', { key: devKey, body: JSON.stringify({ model: 'sluice/fast', input, ...extra }) }, TABLE.invalid_body);
          t.match(r.json.error.message, names, 'the message names the field');
        });
      }
    });

    t.test('responses: the compact endpoint is a 404 in the dialect, saying compaction stays local', async (t) => {
      const before = upstreamCount(h.sim);
      const res = await fetch(`${h.url}/v1/responses/compact`, { method: 'POST', headers: requestHeaders('responses', { key: devKey }), body: requestBody('responses') });
      const json: any = await res.json();
      t.equal(res.status, 404);
      t.strictSame(Object.keys(json.error).sort(), ['code', 'message', 'param', 'type']);
      t.strictSame([json.error.type, json.error.code], ['invalid_request_error', 'not_found']);
      t.match(json.error.message, /compact locally/);
      t.equal(upstreamCount(h.sim), before, 'nothing reached the upstream');
    });

    t.test('bad body, over 32 MiB declared: 413 before the body arrives', async (t) => {
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          const before = upstreamCount(h.sim);
          checkError(t, await sendTooLarge(h, dialect, devKey), dialect, TABLE.request_too_large);
          t.equal(upstreamCount(h.sim), before, 'nothing reached the upstream');
        });
      }
    });

    t.test('upstream timed out: 504', async (t) => {
      for (const dialect of DIALECTS) {
        t.test(dialect, async (t) => {
          const before = upstreamCount(h.sim);
          const closed = nextClosed(h.sim);
          checkError(t, await send(h, dialect, { key: devKey, sim: 'hang' }), dialect, TABLE.upstream_timeout);
          t.equal(upstreamCount(h.sim), before + 1, 'the request reached the upstream');
          t.equal((await closed).aborted, true, 'the hanging upstream request was given up');
        });
      }
    });
  });
}

for (const store of STORES) {
  t.test(`${store} store: upstream unreachable: 502`, async (t) => {
    const h = await startHarness(t, { store });
    const key = await h.key('dev');
    await h.sim.close();
    for (const dialect of DIALECTS) {
      t.test(dialect, async (t) => {
        checkError(t, await send(h, dialect, { key }), dialect, TABLE.upstream_unreachable);
      });
    }
  });
}
