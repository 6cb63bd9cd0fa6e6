// Client addresses end to end. Under the default settings no peer is trusted: a loopback process
// that forges X-Forwarded-For is still judged by its socket address (a key's allowlist refuses
// it, its failures count toward the IP block of 127.0.0.1, the audit names 127.0.0.1), and the
// once-per-process hint is logged. Behind a trusted loopback proxy every spelling of one address
// is one client (IPv4-mapped IPv6 in dotted and hex form, NAT64, IPv6 case and compression, ports
// dropped), distinct `ip:port` values are distinct clients, and an X-Forwarded-For that cannot be
// read is a 400 `invalid_forwarded_for` in the request's dialect, never the proxy's own address.

import t from 'tap';
import type { Test } from 'tap';
import { CATALOGUE } from '../../lib/errors.ts';
import { generateKey } from '../../lib/keys.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { readReply, trackAudits, type Reply } from '../helpers/upstream.ts';

type Dialect = 'chat' | 'messages' | 'responses';
const PATHS: Record<Dialect, string> = { chat: '/v1/chat/completions', messages: '/v1/messages', responses: '/v1/responses' };
const BODIES: Record<Dialect, object> = {
  chat: { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] },
  messages: { model: 'sluice/fast', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] },
  responses: { model: 'sluice/fast', input: 'hi' },
};

async function call(h: Harness, o: { dialect?: Dialect; key?: string; xff?: string } = {}): Promise<Reply> {
  const dialect = o.dialect ?? 'chat';
  const headers: Record<string, string> = { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' };
  if (o.key !== undefined) headers.authorization = `Bearer ${o.key}`;
  if (o.xff !== undefined) headers['x-forwarded-for'] = o.xff;
  return readReply(await fetch(h.url + PATHS[dialect], { method: 'POST', headers, body: JSON.stringify(BODIES[dialect]) }));
}

/** `n` auth failures (unknown keys; default twenty, what blocks), the i-th from xffs[i % xffs.length]. */
async function failures(t: Test, h: Harness, xffs: Array<string | undefined>, n = 20): Promise<void> {
  for (let i = 0; i < n; i++) {
    const r = await call(h, { key: generateKey('dev'), xff: xffs[i % xffs.length] });
    t.equal(r.status, 401, `failure ${i + 1} is a 401`);
  }
}

function auditOf(h: Harness) {
  const written = trackAudits(h.store);
  return async () => {
    await written();
    return h.store.listAudit(1000);
  };
}

t.test('default settings: a loopback peer forging X-Forwarded-For is judged by its socket address', async (t) => {
  const h = await startHarness(t);
  const audit = auditOf(h);
  const far = await h.key('dev', { ip: ['203.0.113.5'] });
  const local = await h.key('dev', { ip: ['127.0.0.1'] });
  for (const dialect of ['chat', 'messages'] as const) {
    const r = await call(h, { dialect, key: far, xff: '203.0.113.5' });
    t.equal(r.status, 403, `${dialect}: a forged allowlisted address does not pass the allowlist`);
    t.equal((await call(h, { dialect, key: local, xff: '203.0.113.5' })).status, 200, `${dialect}: the socket address does`);
  }
  const rows = await audit();
  t.equal(rows.length, 2);
  for (const row of rows) t.match(row, { ip: '127.0.0.1', outcome: 'ip_not_allowed' }, 'audited under the socket address');
  const hints = h.logs.filter((l) => l.msg?.startsWith('X-Forwarded-For from a peer not named in SLUICE_TRUSTED_PROXIES'));
  t.equal(hints.length, 1, 'the hint is logged once');
  t.equal(hints[0]?.peer, '127.0.0.1');

  // The two refusals above and eighteen failures under eighteen forged addresses are twenty
  // failures of 127.0.0.1: it is blocked.
  const valid = await h.key('dev');
  await failures(t, h, Array.from({ length: 18 }, (_, i) => `198.18.0.${i + 1}`), 18);
  const r = await call(h, { key: valid, xff: '198.18.1.1' });
  t.equal(r.status, 429, 'the loopback peer is blocked whatever address it claims next');
  t.equal(r.json.error.code, 'ip_blocked');
  t.equal((await h.gateway.deps.admission.failures('127.0.0.1')).allowed, false, 'the block is on 127.0.0.1');
  t.equal((await h.gateway.deps.admission.failures('198.18.0.1')).allowed, true, 'no forged address was counted');
});

t.test('behind a trusted proxy: every spelling of a blocked address is blocked', async (t) => {
  const h = await startHarness(t, { env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } });
  const audit = auditOf(h);
  const key = await h.key('dev');
  // The failures arrive in mixed spellings of 198.51.100.20; the audit writes one.
  await failures(t, h, ['198.51.100.20', '::ffff:c633:6414', '64:ff9b::198.51.100.20', '198.51.100.20:40000']);
  t.same([...new Set((await audit()).map((r) => r.ip))], ['198.51.100.20'], 'every audit row has the canonical address');
  const forms = ['198.51.100.20', '::ffff:198.51.100.20', '::ffff:c633:6414', '::FFFF:C633:6414', '0:0:0:0:0:ffff:c633:6414',
    '64:ff9b::c633:6414', '64:ff9b::198.51.100.20', '[64:ff9b::c633:6414]:443', '[::ffff:c633:6414]', '198.51.100.20:5555'];
  for (const xff of forms) {
    const r = await call(h, { key, xff });
    t.equal(r.status, 429, `${xff}: blocked`);
  }
  t.equal((await call(h, { key, xff: '198.51.100.21' })).status, 200, 'the neighbour is served');
  t.equal((await call(h, { key })).status, 200, 'the proxy itself is served');

  // IPv6 spellings of one address are one client too.
  await failures(t, h, ['2001:DB8:0:0::1', '2001:db8::1', '[2001:0db8::0001]:443', '2001:db8::1%eth0']);
  for (const xff of ['2001:db8::1', '2001:DB8::1', '[2001:db8:0:0:0:0:0:1]:8443']) t.equal((await call(h, { key, xff })).status, 429, `${xff}: blocked`);
  const v6 = (await audit()).filter((r) => r.ip.includes(':'));
  t.same([...new Set(v6.map((r) => r.ip))], ['2001:db8::1'], 'one spelling in the audit');
});

t.test('behind a trusted proxy: ip:port values are distinct clients, not the proxy', async (t) => {
  const h = await startHarness(t, { env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } });
  const key = await h.key('dev');
  await failures(t, h, ['203.0.113.30:1111', '203.0.113.30:2222']);
  t.equal((await call(h, { key, xff: '203.0.113.30:3333' })).status, 429, 'the address behind the ports is blocked');
  t.equal((await call(h, { key, xff: '203.0.113.31:1111' })).status, 200, 'another address with the same port is served');
  t.equal((await call(h, { key, xff: '[2001:db8::31]:1111' })).status, 200, 'a bracketed IPv6 with a port is served');
  t.equal((await call(h, { key })).status, 200, 'the proxy itself was never counted');
  t.equal((await h.gateway.deps.admission.failures('127.0.0.1')).allowed, true);
});

t.test('behind a trusted proxy: an X-Forwarded-For that cannot be read is a 400 in the dialect', async (t) => {
  const h = await startHarness(t, { env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } });
  const audit = auditOf(h);
  const key = await h.key('dev');
  const before = h.sim.received.length;
  const message = CATALOGUE.invalid_forwarded_for.message;
  t.match(message, /X-Forwarded-For/, 'the message names the header');
  const bad = ['garbage', '198.51.100.7, garbage', 'unknown', '198.51.100.7,,', '198.51.100.7:99999', '[2001:db8::1', '1.2.3', 'garbage, 127.0.0.1'];
  for (const xff of bad) {
    for (const dialect of ['chat', 'messages', 'responses'] as const) {
      const r = await call(h, { dialect, key, xff });
      t.equal(r.status, 400, `${dialect} ${JSON.stringify(xff)}: 400`);
      if (dialect === 'messages') t.same(r.json, { type: 'error', error: { type: 'invalid_request_error', message } });
      else t.same(r.json, { error: { message, type: 'invalid_request_error', param: null, code: 'invalid_forwarded_for' } });
    }
  }
  // Junk left of the client's entry is never read: the client planted it, the proxy appended the truth.
  t.equal((await call(h, { key, xff: 'junk, 198.51.100.9' })).status, 200);
  t.equal(h.sim.received.length, before + 1, 'nothing refused reached the upstream');
  t.same(await audit(), [], 'a refused header is no auth failure');
  t.equal((await h.gateway.deps.admission.failures('127.0.0.1')).allowed, true);
});
