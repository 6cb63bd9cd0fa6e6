// Step 1 of the auth chain end to end: 20 auth failures from one client address within 10 minutes
// block every /v1/* request from it (valid key too) with 429, retry-after 600 and the ip_blocked
// body in the request's dialect; 19 do not. Other addresses are unaffected; IPv6 counts per /64.
// The block lives in the Counters, so a second gateway on the same counters refuses too.

import t from 'tap';
import type { Test } from 'tap';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { CATALOGUE } from '../../lib/errors.ts';
import { generateKey } from '../../lib/keys.ts';
import type { Store } from '../../lib/store/store.ts';
import { Admission, AUTH_FAILURE_LIMIT, AUTH_FAILURE_WINDOW_S } from '../../lib/admission.ts';
import type { Counters } from '../../lib/counters/counters.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { readReply, trackAudits, type Reply } from '../helpers/upstream.ts';

type Dialect = 'chat' | 'messages';
const STORES = ['sqlite', 'postgres'] as const;
/** sluice behind a front proxy on loopback: client addresses arrive as X-Forwarded-For from 127.0.0.1. */
const BEHIND_PROXY = { SLUICE_TRUSTED_PROXIES: '127.0.0.1' };

const ROUTES: Array<{ path: string; dialect: Dialect }> = [
  { path: '/v1/chat/completions', dialect: 'chat' },
  { path: '/v1/messages', dialect: 'messages' },
  { path: '/v1/messages/count_tokens', dialect: 'messages' },
  { path: '/v1/models', dialect: 'chat' },
];

const BLOCKED = {
  chat: { error: { message: CATALOGUE.ip_blocked.message, type: 'rate_limit_error', param: null, code: 'ip_blocked' } },
  messages: { type: 'error', error: { type: 'rate_limit_error', message: CATALOGUE.ip_blocked.message } },
};

async function call(h: Harness, path: string, o: { key?: string; xff?: string } = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' };
  if (o.key !== undefined) headers.authorization = `Bearer ${o.key}`;
  if (o.xff !== undefined) headers['x-forwarded-for'] = o.xff;
  const get = path === '/v1/models';
  const body = path === '/v1/chat/completions'
    ? { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }
    : { model: 'sluice/fast', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] };
  return readReply(await fetch(h.url + path, { method: get ? 'GET' : 'POST', headers, body: get ? undefined : JSON.stringify(body) }));
}

/** A key check that fails (each of the kinds that count), from `xff`. */
async function fail(t: Test, h: Harness, xff: string, i: number): Promise<void> {
  const keys = [undefined, 'sluice_dev_short', generateKey('dev'), 'not-a-key-at-all'];
  const r = await call(h, i % 2 ? '/v1/messages' : '/v1/chat/completions', { key: keys[i % keys.length], xff });
  t.equal(r.status, 401, `failure ${i + 1} from ${xff} is a 401`);
}

/** Every /v1 route answers 429 from `xff`, with a valid key, a bad key or none (step 1 comes first). */
async function isBlocked(t: Test, h: Harness, key: string, xff: string): Promise<void> {
  for (const { path, dialect } of ROUTES) {
    for (const k of [key, 'sluice_dev_bad', undefined]) {
      const before = h.sim.received.length;
      const r = await call(h, path, { key: k, xff });
      const what = `${path} from ${xff} with ${k === key ? 'a valid key' : k ?? 'no key'}`;
      t.equal(r.status, 429, `${what}: 429`);
      t.same(r.json, BLOCKED[dialect], `${what}: the ip_blocked body in the ${dialect} dialect`);
      t.equal(r.headers.get('retry-after'), '600', `${what}: retry-after 600`);
      t.equal(r.headers.get('x-should-retry'), null, `${what}: no x-should-retry`);
      t.equal(h.sim.received.length, before, `${what}: nothing sent upstream`);
    }
  }
}

async function isServed(t: Test, h: Harness, key: string, xff?: string): Promise<void> {
  for (const { path } of ROUTES.filter((r) => r.path !== '/v1/messages/count_tokens')) {
    const r = await call(h, path, { key, xff });
    t.equal(r.status, 200, `${path} from ${xff ?? 'the loopback peer'}: served`);
  }
}

function auditOf(store: Store) {
  const auditsWritten = trackAudits(store);
  return async (ip: string) => {
    await auditsWritten();
    return (await store.listAudit(100_000)).filter((r) => r.ip === ip);
  };
}

/** The IP block's windows over `counters` (the budget's spend read is not used here). */
function ipWindows(counters: Counters): Admission {
  return new Admission({ counters, budget: { spendKeys: () => ['', ''], observe: () => {} } });
}

t.test('the block is 20 failures in a 600 s window, for 600 s', async (t) => {
  t.equal(AUTH_FAILURE_WINDOW_S, 600);
  t.equal(AUTH_FAILURE_LIMIT, 20);
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const admission = ipWindows(counters);
  for (let i = 0; i < 19; i++) t.equal((await admission.countAuthFailure('203.0.113.1')).allowed, true);
  t.equal((await admission.countAuthFailure('203.0.113.1')).allowed, false, 'the 20th failure blocks');
  const v = await admission.failures('203.0.113.1');
  t.ok(!v.allowed && v.msLeft > 590_000, 'for the 600 s window');
  t.equal((await admission.failures('203.0.113.2')).allowed, true, 'another address is its own window');
  t.equal(admission.blockedHere('203.0.113.1'), true, 'and this process refuses it from memory');
});

for (const storeKind of STORES) {
  t.test(`${storeKind}: 20 failures from one address block it, 19 do not`, async (t) => {
    const counters = new MemoryCounters();
    t.teardown(() => counters.close());
    const h = await startHarness(t, { store: storeKind, counters, env: BEHIND_PROXY });
    const audit = auditOf(h.store);
    const key = await h.key('dev');
    const ip = '203.0.113.7';
    const other = '203.0.113.8';
    for (let i = 0; i < 19; i++) await fail(t, h, ip, i);
    await isServed(t, h, key, ip);
    // Successes do not reset the count: one more failure makes 20.
    await fail(t, h, ip, 19);
    await isBlocked(t, h, key, ip);
    // A blocked request never reaches the key check: no further audit rows, no further counting.
    t.equal((await audit(ip)).length, 20, 'twenty audit rows, none for the blocked requests');
    const v = await h.gateway.deps.admission.failures(ip);
    t.equal(v.allowed, false, 'the counters hold the block');
    t.ok(v.msLeft > 590_000 && v.msLeft <= 600_000, `blocked for the 600 s window (${v.msLeft} ms left)`);
    // The same address through a chain of trusted proxies is still that address.
    await isBlocked(t, h, key, `${ip}, 127.0.0.1`);
    // Other addresses, and the loopback peer itself, are unaffected.
    await isServed(t, h, key, other);
    await isServed(t, h, key);
    const r = await call(h, '/v1/chat/completions', { xff: other });
    t.equal(r.status, 401, 'another address still gets its 401');

    // A second gateway on the same Counters (as processes on one Redis) refuses the address too.
    const h2 = await startHarness(t, { store: storeKind, counters, env: BEHIND_PROXY });
    await isBlocked(t, h2, await h2.key('dev'), ip);
  });

  t.test(`${storeKind}: IPv6 addresses count per /64`, async (t) => {
    const h = await startHarness(t, { store: storeKind, env: BEHIND_PROXY });
    const key = await h.key('dev');
    // Twenty failures spread over one /64, written in several forms.
    const net = ['2001:db8:1:2::a', '2001:db8:1:2:ffff::1', '2001:0db8:0001:0002:0000:0000:0000:0009', '2001:DB8:1:2:1:2:3:4'];
    for (let i = 0; i < 19; i++) await fail(t, h, net[i % net.length], i);
    await isServed(t, h, key, '2001:db8:1:2::77');
    await fail(t, h, '2001:db8:1:2::ff', 19);
    for (const ip of ['2001:db8:1:2::a', '2001:db8:1:2::1234', '2001:db8:1:2:abcd:abcd:abcd:abcd']) await isBlocked(t, h, key, ip);
    // The neighbouring /64s are another count.
    for (const ip of ['2001:db8:1:3::1', '2001:db8:1:1:ffff:ffff:ffff:ffff', '2001:db8::1']) await isServed(t, h, key, ip);
    const v = await h.gateway.deps.admission.failures('2001:db8:1:2::5');
    t.equal(v.allowed, false, 'one bucket for the /64');
  });
}
