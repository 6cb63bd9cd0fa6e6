// Holds the simulated router's management side to protocols.md §4: the key lifecycle through
// /api/v1/keys with the provisioning key (and 401/403 without it), pagination, per-key usage
// accrual across UTC day/week/month boundaries on a settable clock, limit_remaining, the
// /api/v1/key readout per key, and the refusals of disabled, expired, deleted and exhausted keys
// in both dialects. Real sims on port 0 over fetch; no sleeps.

import t from 'tap';
import { startSimulatedRouter, type SimulatedRouter } from '../../lib/sim/index.ts';
import { call, chatBody, chunksOf, messagesBody, readSse, type Call } from './client.ts';

const PROVISIONING = 'sk-or-v1-provisioning-test';
const admin = { key: PROVISIONING };
const r10 = (x: number): number => Math.round(x * 1e10) / 1e10;

const sim = await startSimulatedRouter({ provisioningKey: PROVISIONING });
t.teardown(() => sim.close());

async function createKey(router: SimulatedRouter, body: Record<string, unknown>): Promise<{ key: string; data: any }> {
  const res = await call(router, '/api/v1/keys', body, admin);
  if (res.status !== 201) throw new Error(`create answered ${res.status}: ${await res.text()}`);
  return (await res.json()) as { key: string; data: any };
}
const json = async (res: Promise<Response>): Promise<any> => (await res).json();
const patch = (router: SimulatedRouter, hash: string, body: unknown): Promise<Response> => call(router, `/api/v1/keys/${hash}`, body, { ...admin, method: 'PATCH' });
const readout = async (router: SimulatedRouter, key: string): Promise<any> => (await json(call(router, '/api/v1/key', undefined, { key }))).data;
/** One non-streamed chat answer with `key`; gives its cost. */
const spend = async (router: SimulatedRouter, key: string): Promise<number> => (await json(call(router, '/api/v1/chat/completions', chatBody(), { key }))).usage.cost;

t.test('key lifecycle: create, list, get, patch, disable, delete', async (t) => {
  for (const c of [{ key: null }, { key: 'sk-or-v1-not-the-provisioning-key' }] as Call[]) {
    for (const [method, path] of [['GET', '/api/v1/keys'], ['POST', '/api/v1/keys'], ['GET', '/api/v1/keys/abc'], ['PATCH', '/api/v1/keys/abc'], ['DELETE', '/api/v1/keys/abc']] as const) {
      const res = await call(sim, path, method === 'POST' || method === 'PATCH' ? { name: 'x' } : undefined, { ...c, method });
      t.equal(res.status, 401, `${method} ${path} without the provisioning key`);
      t.match(await res.json(), { error: { code: 401, message: String } });
    }
  }

  const created = await call(sim, '/api/v1/keys', { name: 'tenant-42', limit: 25, limit_reset: 'monthly' }, admin);
  t.equal(created.status, 201);
  const c = (await created.json()) as any;
  t.match(c.key, /^sk-or-v1-[0-9a-f]{64}$/);
  t.match(c.data, {
    hash: /^[0-9a-f]{64}$/, name: 'tenant-42', label: /^sk-or-v1-.+\.\.\..+$/, disabled: false, limit: 25, limit_remaining: 25, limit_reset: 'monthly',
    include_byok_in_limit: false, usage: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0, byok_usage: 0, byok_usage_daily: 0, byok_usage_weekly: 0, byok_usage_monthly: 0,
    created_at: String, updated_at: null, expires_at: null, creator_user_id: String, workspace_id: String,
  });
  t.notOk(c.data.label.includes(c.key.slice(12, -3)), 'the label masks the secret');
  const hash = c.data.hash;

  const list = await json(call(sim, '/api/v1/keys', undefined, admin));
  t.match(list.data.find((k: any) => k.hash === hash), { name: 'tenant-42' });
  t.notOk(JSON.stringify(list).includes(c.key), 'the secret is never listed');
  t.same(await json(call(sim, `/api/v1/keys/${hash}`, undefined, admin)), { data: c.data }, 'get gives the created object, without the secret');

  const patched = await patch(sim, hash, { limit: 5, limit_reset: 'daily', name: 'renamed', include_byok_in_limit: true });
  t.equal(patched.status, 200);
  const p = (await patched.json()) as any;
  t.match(p.data, { hash, name: 'renamed', limit: 5, limit_reset: 'daily', limit_remaining: 5, include_byok_in_limit: true, updated_at: String });
  t.notOk('key' in p, 'no secret after create');

  const disabled = await json(patch(sim, hash, { disabled: true }));
  t.equal(disabled.data.disabled, true);
  t.notOk((await json(call(sim, '/api/v1/keys', undefined, admin))).data.some((k: any) => k.hash === hash), 'disabled keys are hidden by default');
  t.ok((await json(call(sim, '/api/v1/keys?include_disabled=true', undefined, admin))).data.some((k: any) => k.hash === hash));
  const refused = await call(sim, '/api/v1/chat/completions', chatBody(), { key: c.key });
  t.equal(refused.status, 401, 'a disabled key cannot run inference');
  t.match(await refused.json(), { error: { code: 401, message: /disabled/ } });
  const refusedM = await call(sim, '/api/v1/messages', messagesBody(), { key: c.key });
  t.equal(refusedM.status, 401);
  t.match(await refusedM.json(), { type: 'error', error: { type: 'authentication_error', error_type: 'authentication' } });
  t.equal((await json(patch(sim, hash, { disabled: false }))).data.disabled, false);
  t.equal((await call(sim, '/api/v1/chat/completions', chatBody(), { key: c.key })).status, 200, 'enabled again');

  const del = await call(sim, `/api/v1/keys/${hash}`, undefined, { ...admin, method: 'DELETE' });
  t.equal(del.status, 200);
  t.same(await del.json(), { deleted: true });
  const gone = await call(sim, `/api/v1/keys/${hash}`, undefined, admin);
  t.equal(gone.status, 404);
  t.same(await gone.json(), { error: { code: 404, message: 'Key not found' } });
  t.equal((await call(sim, `/api/v1/keys/${hash}`, { limit: 1 }, { ...admin, method: 'PATCH' })).status, 404);
  t.equal((await call(sim, `/api/v1/keys/${hash}`, undefined, { ...admin, method: 'DELETE' })).status, 404);
  t.equal((await call(sim, '/api/v1/key', undefined, { key: c.key })).status, 401, 'a deleted key is unknown');
  t.equal((await call(sim, '/api/v1/chat/completions', chatBody(), { key: c.key })).status, 401, 'and cannot run inference');
  t.equal((await call(sim, '/api/v1/keys', undefined, { key: c.key })).status, 401, 'nor manage keys');

  const closedSim = await startSimulatedRouter();
  t.teardown(() => closedSim.close());
  t.equal((await call(closedSim, '/api/v1/keys', undefined, admin)).status, 401, 'no provisioning key configured: always 401');
});

t.test('an inference key may not manage keys (403); the management key may not run inference (403)', async (t) => {
  const { key } = await createKey(sim, { name: 'inference-only' });
  for (const [method, path] of [['GET', '/api/v1/keys'], ['POST', '/api/v1/keys'], ['GET', '/api/v1/keys/abc']] as const) {
    const res = await call(sim, path, method === 'POST' ? { name: 'x' } : undefined, { key, method });
    t.equal(res.status, 403, `${method} ${path} with an inference key`);
    t.same(await res.json(), { error: { code: 403, message: 'Only management keys can perform this operation' } });
  }
  const chat = await call(sim, '/api/v1/chat/completions', chatBody(), admin);
  t.equal(chat.status, 403);
  t.match(await chat.json(), { error: { code: 403, message: /Management keys/ } });
  const messages = await call(sim, '/api/v1/messages', messagesBody(), admin);
  t.equal(messages.status, 403);
  t.match(await messages.json(), { type: 'error', error: { type: 'permission_error', error_type: 'permission_denied' }, request_id: null });
  t.equal(sim.usageByKey(PROVISIONING), 0, 'nothing charged');
});

t.test('create and patch validate their bodies; wrong methods get 405', async (t) => {
  const bad: Array<[unknown, RegExp]> = [
    [{ limit: 1 }, /name/],
    [{ name: '' }, /name/],
    [{ name: 'x', limit: -1 }, /limit/],
    [{ name: 'x', limit: 'ten' }, /limit/],
    [{ name: 'x', limit_reset: 'hourly' }, /limit_reset/],
    [{ name: 'x', include_byok_in_limit: 'yes' }, /include_byok_in_limit/],
    [{ name: 'x', expires_at: 'not a date' }, /expires_at/],
    [['name'], /body/],
  ];
  for (const [body, message] of bad) {
    const res = await call(sim, '/api/v1/keys', body, admin);
    t.equal(res.status, 400, JSON.stringify(body));
    t.match(await res.json(), { error: { code: 400, message } });
  }
  const { data } = await createKey(sim, { name: 'validated', limit: null, limit_reset: null });
  t.match(data, { limit: null, limit_remaining: null, limit_reset: null });
  for (const body of [{ disabled: 'no' }, { name: 7 }, { limit: 'ten' }, null]) {
    const res = await patch(sim, data.hash, body);
    t.equal(res.status, 400, `patch ${JSON.stringify(body)}`);
  }
  t.equal((await json(call(sim, `/api/v1/keys/${data.hash}`, undefined, admin))).data.name, 'validated', 'a refused patch changes nothing');
  const put = await call(sim, '/api/v1/keys', {}, { ...admin, method: 'PUT' });
  t.equal(put.status, 405);
  t.equal(put.headers.get('allow'), 'GET, POST');
  const putOne = await call(sim, `/api/v1/keys/${data.hash}`, {}, { ...admin, method: 'PUT' });
  t.equal(putOne.status, 405);
  t.equal(putOne.headers.get('allow'), 'GET, PATCH, DELETE');
  t.equal((await call(sim, '/api/v1/key', {}, { method: 'POST' })).status, 405);
  t.equal((await call(sim, '/api/v1/keys/a/b', undefined, admin)).status, 404, 'no deeper paths');
  t.equal((await call(sim, '/api/v1/keys/%E0%A4%A', undefined, admin)).status, 404, 'a malformed hash names no key');
});

t.test('the key list pages by 100 with offset; include_disabled and workspace_id filter it', async (t) => {
  const paged = await startSimulatedRouter({ provisioningKey: PROVISIONING, record: false });
  t.teardown(() => paged.close());
  const hashes: string[] = [];
  for (let i = 0; i < 250; i++) hashes.push((await createKey(paged, { name: `k${i}` })).data.hash);
  for (let i = 10; i < 20; i++) t.equal((await patch(paged, hashes[i]!, { disabled: true })).status, 200);
  const page = async (q: string): Promise<string[]> => (await json(call(paged, `/api/v1/keys${q}`, undefined, admin))).data.map((k: any) => k.hash);
  const all = [...(await page('?include_disabled=true')), ...(await page('?include_disabled=true&offset=100')), ...(await page('?include_disabled=true&offset=200'))];
  t.same(all, hashes, 'three pages of 100, 100, 50 in creation order');
  t.same(await page('?include_disabled=true&offset=250'), []);
  const enabled = hashes.filter((_, i) => i < 10 || i >= 20);
  t.same([...(await page('')), ...(await page('?offset=100')), ...(await page('?offset=200'))], enabled, 'without include_disabled: 240 keys');
  t.equal((await page('?offset=200')).length, 40);
  t.same(await page('?offset=nope&include_disabled=false'), enabled.slice(0, 100), 'a bad offset reads as 0');
  t.same(await page('?workspace_id=11111111-1111-1111-1111-111111111111'), [], 'another workspace holds nothing');
  t.equal((await page('?workspace_id=00000000-0000-0000-0000-000000000000')).length, 100);
});

t.test('usage accrues per key by UTC day, Monday week and month (settable clock)', async (t) => {
  let now = Date.UTC(2026, 0, 31, 23, 0, 0); // Saturday 31 January
  const clocked = await startSimulatedRouter({ provisioningKey: PROVISIONING, now: () => now });
  t.teardown(() => clocked.close());
  const weekly = await createKey(clocked, { name: 'weekly', limit: 1, limit_reset: 'weekly' });
  const other = await createKey(clocked, { name: 'other' });

  const a = await spend(clocked, weekly.key);
  t.match(await readout(clocked, weekly.key), { usage: a, usage_daily: a, usage_weekly: a, usage_monthly: a, limit_remaining: r10(1 - a) });
  t.match(await readout(clocked, other.key), { usage: 0, usage_daily: 0, usage_weekly: 0, usage_monthly: 0, limit: null, limit_remaining: null }, '/api/v1/key answers for the calling key only');

  now = Date.UTC(2026, 1, 1, 0, 0, 0); // Sunday 1 February, midnight: new day and month, same week
  t.match(await readout(clocked, weekly.key), { usage: a, usage_daily: 0, usage_weekly: a, usage_monthly: 0, limit_remaining: r10(1 - a) });
  const b = await spend(clocked, weekly.key);
  const o = await spend(clocked, other.key);
  now = Date.UTC(2026, 1, 1, 23, 59, 59, 999);
  t.match(await readout(clocked, weekly.key), { usage: r10(a + b), usage_daily: b, usage_weekly: r10(a + b), usage_monthly: b, limit_remaining: r10(1 - r10(a + b)) });
  t.match(await readout(clocked, other.key), { usage: o, usage_daily: o });

  now = Date.UTC(2026, 1, 2, 0, 0, 0); // Monday: a new week
  t.match(await readout(clocked, weekly.key), { usage: r10(a + b), usage_daily: 0, usage_weekly: 0, usage_monthly: b, limit_remaining: 1 });
  const viaAdmin = await json(call(clocked, `/api/v1/keys/${weekly.data.hash}`, undefined, admin));
  t.match(viaAdmin.data, { usage: r10(a + b), usage_daily: 0, usage_weekly: 0, usage_monthly: b, limit_remaining: 1 }, 'the management API agrees');
  t.equal(clocked.usageByKey(weekly.key), r10(a + b));
  t.equal(clocked.usageByKey('sk-or-v1-never-used'), 0);
});

t.test('limit_remaining and 402 follow the limit_reset period, total when it never resets', async (t) => {
  let now = Date.UTC(2026, 0, 5, 23, 0, 0); // a Monday
  const clocked = await startSimulatedRouter({ provisioningKey: PROVISIONING, now: () => now });
  t.teardown(() => clocked.close());

  const daily = await createKey(clocked, { name: 'daily', limit: 0.00000001, limit_reset: 'daily' });
  const j = await json(call(clocked, '/api/v1/chat/completions', chatBody(), { key: daily.key }));
  t.equal(j.created, Math.floor(now / 1000));
  t.equal((await readout(clocked, daily.key)).limit_remaining, 0, 'never below 0');
  const chat = await call(clocked, '/api/v1/chat/completions', chatBody(), { key: daily.key });
  t.equal(chat.status, 402);
  t.same(await chat.json(), { error: { code: 402, message: 'Key limit exceeded (daily limit). Manage it using https://openrouter.ai/settings/keys', metadata: { limit_source: 'openrouter_key_limit', provider_name: null } } });
  const messages = await call(clocked, '/api/v1/messages', messagesBody({ stream: true }), { key: daily.key });
  t.equal(messages.status, 402);
  t.match(await messages.json(), { type: 'error', error: { type: 'billing_error', error_type: 'payment_required', message: /Key limit exceeded/ } });
  now += 2 * 3600_000; // Tuesday
  t.match(await readout(clocked, daily.key), { usage: j.usage.cost, usage_daily: 0, usage_weekly: j.usage.cost, limit_remaining: 0.00000001 });
  t.equal((await call(clocked, '/api/v1/chat/completions', chatBody(), { key: daily.key })).status, 200, 'the next UTC day is allowed again');

  const total = await createKey(clocked, { name: 'total', limit: 0.00000001 });
  await spend(clocked, total.key);
  now += 40 * 86_400_000; // another month: a limit without reset stays spent
  t.equal((await call(clocked, '/api/v1/chat/completions', chatBody(), { key: total.key })).status, 402);
  t.match(await json(call(clocked, '/api/v1/chat/completions', chatBody(), { key: total.key })), { error: { message: /\(total limit\)/ } });
  t.equal((await patch(clocked, total.data.hash, { limit: null })).status, 200);
  t.equal((await call(clocked, '/api/v1/chat/completions', chatBody(), { key: total.key })).status, 200, 'lifting the limit lets it run again');

  const zero = await createKey(clocked, { name: 'zero', limit: 0, limit_reset: 'monthly' });
  t.equal((await call(clocked, '/api/v1/chat/completions', chatBody(), { key: zero.key })).status, 402, 'a zero limit refuses the first request');
  t.equal(clocked.usageByKey(zero.key), 0);

  const expiring = await createKey(clocked, { name: 'expiring', expires_at: new Date(now + 60_000).toISOString() });
  t.equal(expiring.data.expires_at, new Date(now + 60_000).toISOString());
  t.equal((await call(clocked, '/api/v1/chat/completions', chatBody(), { key: expiring.key })).status, 200);
  now += 60_000;
  const expired = await call(clocked, '/api/v1/chat/completions', chatBody(), { key: expiring.key });
  t.equal(expired.status, 401);
  t.match(await expired.json(), { error: { code: 401, message: /expired/ } });
});

t.test('/api/v1/key accounts the cost served per key, streamed or not, and 402s at the limit', async (t) => {
  t.equal((await call(sim, '/api/v1/key', undefined, { key: null })).status, 401);
  const stranger = await readout(sim, 'sk-or-v1-never-created');
  t.match(stranger, { limit: null, limit_remaining: null, usage: 0, usage_daily: 0, is_management_key: false, is_provisioning_key: false, is_free_tier: false });

  const c = await createKey(sim, { name: 'budgeted', limit: 0.0001, limit_reset: 'daily' });
  const key = c.key;
  const first = await json(call(sim, '/api/v1/chat/completions', chatBody({ model: 'google/gemini-2.5-flash-lite' }), { key }));
  const second = chunksOf(await readSse(await call(sim, '/api/v1/chat/completions', chatBody({ model: 'google/gemini-2.5-flash-lite', stream: true }), { key }))).at(-1);
  const spent = r10(first.usage.cost + second.usage.cost);
  t.ok(spent < 0.0001, 'still under the limit');

  const r = await readout(sim, key);
  t.match(r, { label: c.data.label, limit: 0.0001, limit_reset: 'daily', usage: spent, usage_daily: spent, usage_weekly: spent, usage_monthly: spent, limit_remaining: r10(0.0001 - spent) });
  t.equal(sim.usageByKey(key), spent);
  t.equal((await json(call(sim, '/api/v1/auth/key', undefined, { key }))).data.usage, spent, 'the legacy path answers the same');

  // A large answer pushes the key over its limit; the next request is refused in each dialect.
  const over = await json(call(sim, '/api/v1/messages', messagesBody(), { key, sim: 'chunks=300' }));
  t.ok(spent + over.usage.cost >= 0.0001);
  t.equal((await call(sim, '/api/v1/chat/completions', chatBody(), { key })).status, 402);
  t.equal((await call(sim, '/api/v1/messages', messagesBody({ stream: true }), { key })).status, 402);
  t.equal((await readout(sim, key)).limit_remaining, 0);
  t.equal((await readout(sim, PROVISIONING)).is_management_key, true);
});
