// The auth chain end to end (spec "Authentication" steps 1–6, docs/http.md "The auth chain"): the five 401s
// with one body per dialect, the key lookup cache (no store lookup for malformed keys, unknown keys
// cached, last_used_at on a miss), revocation and expiry within 60 s, allowlists behind trusted and
// untrusted peers, profile_removed and upstream_key_missing, the order of the steps, and the audit
// rows. Every case runs on both dialects and both store backings; no refusal reaches the upstream.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { Test } from 'tap';
import { revokeKey } from '../../cli/keys.ts';
import { loadConfig } from '../../lib/config.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { CATALOGUE } from '../../lib/errors.ts';
import { displayPrefix, generateKey, hashKey } from '../../lib/keys.ts';
import { createLogger } from '../../lib/log.ts';
import { createGateway } from '../../lib/server.ts';
import { readSettings } from '../../lib/settings.ts';
import { Admission } from '../../lib/admission.ts';
import type { AuditRow, KeyRow, Store } from '../../lib/store/store.ts';
import { startHarness, TIERS_YAML, UPSTREAM_KEYS, type Harness } from '../helpers/gateway.ts';
import { readReply, trackAudits, type Reply } from '../helpers/upstream.ts';

type Dialect = 'chat' | 'messages';
type Refusal = 'invalid_api_key' | 'ip_not_allowed' | 'profile_removed' | 'upstream_key_missing' | 'ip_blocked';

const DIALECTS: Dialect[] = ['chat', 'messages'];
const STORES = ['sqlite', 'postgres'] as const;
/** sluice behind a front proxy on loopback: client addresses arrive as X-Forwarded-For from 127.0.0.0/8. */
const BEHIND_PROXY = { SLUICE_TRUSTED_PROXIES: '127.0.0.1/8,::1' };

/** The error types of docs/http.md, written out here so a wrong catalogue entry fails. */
const TYPES: Record<Refusal, { status: number; messages: string; chat: string }> = {
  invalid_api_key: { status: 401, messages: 'authentication_error', chat: 'invalid_api_key' },
  ip_not_allowed: { status: 403, messages: 'permission_error', chat: 'permission_error' },
  profile_removed: { status: 403, messages: 'permission_error', chat: 'permission_error' },
  upstream_key_missing: { status: 503, messages: 'api_error', chat: 'api_error' },
  ip_blocked: { status: 429, messages: 'rate_limit_error', chat: 'rate_limit_error' },
};

function expectedBody(dialect: Dialect, code: Refusal) {
  const message = CATALOGUE[code].message;
  return dialect === 'messages'
    ? { type: 'error', error: { type: TYPES[code].messages, message } }
    : { error: { message, type: TYPES[code].chat, param: null, code } };
}

interface CallOpts { key?: string; via?: 'bearer' | 'x-api-key'; xff?: string; body?: string; path?: string }

async function call(url: string, dialect: Dialect, o: CallOpts = {}): Promise<Reply> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (o.key !== undefined) {
    if (o.via === 'x-api-key') headers['x-api-key'] = o.key;
    else headers.authorization = `Bearer ${o.key}`;
  }
  if (o.xff !== undefined) headers['x-forwarded-for'] = o.xff;
  if (dialect === 'messages') headers['anthropic-version'] = '2023-06-01';
  const path = o.path ?? (dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages');
  const get = path === '/v1/models';
  const body = o.body ?? JSON.stringify(dialect === 'chat'
    ? { model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }] }
    : { model: 'sluice/fast', max_tokens: 32, messages: [{ role: 'user', content: 'hi' }] });
  return readReply(await fetch(url + path, { method: get ? 'GET' : 'POST', headers, body: get ? undefined : body }));
}

/** Sends a request that must be refused with `code`, and checks status, headers, exact body and that nothing went upstream. */
async function refused(t: Test, h: Harness, dialect: Dialect, code: Refusal, o: CallOpts, url = h.url): Promise<Reply> {
  const before = h.sim.received.length;
  const r = await call(url, dialect, o);
  const what = `${dialect} ${code} ${o.via ?? 'bearer'} key=${o.key === undefined ? 'none' : o.key.slice(0, 14)} xff=${o.xff ?? ''}`;
  t.equal(r.status, TYPES[code].status, `${what}: status`);
  t.same(r.json, expectedBody(dialect, code), `${what}: body`);
  t.match(r.headers.get('content-type'), /^application\/json/, `${what}: content-type`);
  if (code === 'ip_blocked') t.equal(r.headers.get('retry-after'), '600', `${what}: retry-after`);
  else t.equal(r.headers.get('retry-after'), null, `${what}: no retry-after`);
  if (code === 'upstream_key_missing' || code === 'ip_blocked') t.equal(r.headers.get('x-should-retry'), null, `${what}: no x-should-retry`);
  else t.equal(r.headers.get('x-should-retry'), 'false', `${what}: x-should-retry`);
  t.equal(h.sim.received.length, before, `${what}: nothing sent upstream`);
  return r;
}

/** Sends a request that must be served by the upstream with the profile's upstream key. */
async function served(t: Test, h: Harness, dialect: Dialect, o: CallOpts, profile = 'dev'): Promise<Reply> {
  const before = h.sim.received.length;
  const r = await call(h.url, dialect, o);
  t.equal(r.status, 200, `${dialect} served (xff=${o.xff ?? ''}): ${r.text.slice(0, 200)}`);
  t.equal(h.sim.received.length, before + 1, `${dialect}: one request upstream`);
  t.equal(h.sim.received.at(-1)?.headers.authorization, `Bearer ${UPSTREAM_KEYS[profile]}`, `${dialect}: with the profile's upstream key`);
  return r;
}

/** Observes the store: key lookups, last_used_at touches, and audit inserts (awaited before reading). */
function tap(store: Store) {
  const seen = { lookups: 0, touches: [] as Array<{ id: number; at: string }> };
  const pending: Promise<unknown>[] = [];
  const keyByHash = store.keyByHash.bind(store);
  store.keyByHash = (hash: string) => {
    seen.lookups++;
    return keyByHash(hash);
  };
  const touchKey = store.touchKey.bind(store);
  store.touchKey = (id: number, at: string) => {
    seen.touches.push({ id, at });
    const p = touchKey(id, at);
    pending.push(p);
    return p;
  };
  const auditsWritten = trackAudits(store);
  return {
    seen,
    /** Audit rows (oldest first, without id/ts), optionally of one ip, once every pending write landed. */
    async audit(ip?: string): Promise<AuditRow[]> {
      await Promise.all([...pending, auditsWritten()]);
      const rows = (await store.listAudit(100_000)).reverse();
      return rows.filter((r) => ip === undefined || r.ip === ip).map(({ ip, prefix, outcome }) => ({ ip, prefix, outcome }) as AuditRow);
    },
    async settled(): Promise<void> {
      await Promise.all([...pending, auditsWritten()]);
    },
  };
}

let ipSeq = 1;
/** A fresh client address (sent as X-Forwarded-For from the trusted loopback peer), so no case nears the IP block. */
function nextIp(): string {
  const n = ipSeq++;
  return `198.18.${Math.floor(n / 250)}.${(n % 250) + 1}`;
}

function prefixOf(key: string): string {
  const m = /^sluice_([a-z][a-z0-9-]*)_([A-Za-z0-9]{32})$/.exec(key)!;
  return displayPrefix(m[1], m[2]);
}

async function keyRow(store: Store, key: string): Promise<KeyRow> {
  return (await store.listKeys()).find((k) => k.key_hash === hashKey(key))!;
}

/** A key row written straight into the store, for a profile the configuration does not have. */
async function storeKey(store: Store, profile: string, o: { ip?: string; expires_at?: string | null } = {}): Promise<string> {
  const key = generateKey(profile);
  await store.createKey({
    key_hash: hashKey(key), prefix: prefixOf(key), profile, name: `direct-${ipSeq++}`, ip_allow: o.ip ?? '',
    created_at: new Date().toISOString(), expires_at: o.expires_at ?? null,
  });
  return key;
}

const MALFORMED = (valid: string): string[] => [
  'sk-ant-api03-0123456789abcdefghijklmnopqrstuv', // another vendor's key
  valid.slice(0, -1), // 31-character token
  `${valid}x`, // 33-character token
  valid.replace('sluice_dev_', 'sluice_Dev_'), // profile not lower case
  valid.replace('sluice_dev_', 'sluice__'), // no profile
  `${valid.slice(0, -1)}!`, // a character outside [A-Za-z0-9]
  valid.replace('sluice_', 'gw_'), // the spec's placeholder name
];

for (const storeKind of STORES) {
  t.test(`${storeKind}: missing, malformed, unknown, revoked and expired keys share one 401`, async (t) => {
    const h = await startHarness(t, { store: storeKind, env: BEHIND_PROXY });
    const s = tap(h.store);
    const valid = await h.key('dev');
    for (const dialect of DIALECTS) {
      for (const via of ['bearer', 'x-api-key'] as const) {
        await served(t, h, dialect, { key: valid, via, xff: nextIp() });
      }
    }
    const revoked = await h.key('dev', { name: 'to-revoke' });
    await revokeKey(h.store, { profile: 'dev', name: 'to-revoke' }, h.clock.now);
    const expired = await h.key('dev', { expires: '2020-01-01' });
    const unknown = generateKey('dev');
    const cases: Array<{ outcome: AuditRow['outcome']; key?: string }> = [
      { outcome: 'missing_key' },
      { outcome: 'malformed_key', key: MALFORMED(valid)[1] },
      { outcome: 'unknown_key', key: unknown },
      { outcome: 'revoked_key', key: revoked },
      { outcome: 'expired_key', key: expired },
    ];
    for (const dialect of DIALECTS) {
      const bodies = new Set<string>();
      for (const c of cases) {
        for (const via of ['bearer', 'x-api-key'] as const) {
          const ip = nextIp();
          const r = await refused(t, h, dialect, 'invalid_api_key', { key: c.key, via, xff: ip });
          bodies.add(r.text);
          const prefix = c.outcome === 'missing_key' || c.outcome === 'malformed_key' ? '' : prefixOf(c.key!);
          t.same(await s.audit(ip), [{ ip, prefix, outcome: c.outcome }], `${dialect} ${c.outcome} via ${via}: one audit row`);
        }
      }
      t.equal(bodies.size, 1, `${dialect}: the five 401 bodies are byte-identical`);
    }
    // Other malformed shapes, and empty or non-Bearer headers, are the same 401.
    for (const dialect of DIALECTS) {
      for (const key of MALFORMED(valid)) {
        const ip = nextIp();
        await refused(t, h, dialect, 'invalid_api_key', { key, via: 'x-api-key', xff: ip });
        t.same(await s.audit(ip), [{ ip, prefix: '', outcome: 'malformed_key' }]);
      }
      const ip = nextIp();
      await refused(t, h, dialect, 'invalid_api_key', { key: '', via: 'bearer', xff: ip });
      t.same(await s.audit(ip), [{ ip, prefix: '', outcome: 'missing_key' }], `${dialect}: "Bearer " alone is a missing key`);
    }
    // The other /v1 routes are behind the same chain.
    for (const path of ['/v1/models', '/v1/messages/count_tokens']) {
      const ip = nextIp();
      await refused(t, h, path === '/v1/models' ? 'chat' : 'messages', 'invalid_api_key', { path, xff: ip });
      t.same(await s.audit(ip), [{ ip, prefix: '', outcome: 'missing_key' }], `${path}: audited`);
    }
    const other = await call(h.url, 'chat', { path: '/v1/models', key: valid });
    t.equal(other.status, 200, '/v1/models with a valid key');
  });

  t.test(`${storeKind}: the key lookup cache`, async (t) => {
    const h = await startHarness(t, { store: storeKind, clockStart: Date.UTC(2031, 4, 10, 12), env: BEHIND_PROXY });
    const s = tap(h.store);
    const valid = await h.key('dev');
    // Malformed keys never reach the store.
    for (const dialect of DIALECTS) {
      for (const key of MALFORMED(valid)) await refused(t, h, dialect, 'invalid_api_key', { key, xff: nextIp() });
    }
    t.equal(s.seen.lookups, 0, 'no store lookup for any malformed key');
    // An unknown key: one lookup, then served from the cache for 60 s, then looked up again.
    const unknown = generateKey('dev');
    await refused(t, h, 'chat', 'invalid_api_key', { key: unknown, xff: nextIp() });
    t.equal(s.seen.lookups, 1, 'an unknown key is looked up once');
    await refused(t, h, 'messages', 'invalid_api_key', { key: unknown, via: 'x-api-key', xff: nextIp() });
    h.clock.now += 59_000;
    await refused(t, h, 'chat', 'invalid_api_key', { key: unknown, xff: nextIp() });
    t.equal(s.seen.lookups, 1, 'and then answered from the cache within 60 s');
    h.clock.now += 2_000;
    await refused(t, h, 'chat', 'invalid_api_key', { key: unknown, xff: nextIp() });
    t.equal(s.seen.lookups, 2, 'looked up again once the 60 s have passed');
    t.same(s.seen.touches, [], 'an unknown key touches nothing');

    // A valid key: last_used_at set on each cache miss, not on hits.
    t.equal((await keyRow(h.store, valid)).last_used_at, null, 'a new key was never used');
    const t0 = h.clock.now;
    await served(t, h, 'chat', { key: valid });
    t.equal(s.seen.lookups, 3);
    await s.settled();
    const row = await keyRow(h.store, valid);
    t.same(s.seen.touches, [{ id: row.id, at: new Date(t0).toISOString() }], 'one touch on the miss');
    t.equal(row.last_used_at, new Date(t0).toISOString(), 'last_used_at is the time of the miss');
    h.clock.now += 30_000;
    await served(t, h, 'messages', { key: valid, via: 'x-api-key' });
    t.equal(s.seen.lookups, 3, 'a hit does not look up');
    t.equal(s.seen.touches.length, 1, 'a hit does not touch');
    h.clock.now += 31_000;
    await served(t, h, 'messages', { key: valid });
    t.equal(s.seen.lookups, 4, 'a miss after 60 s');
    await s.settled();
    t.equal((await keyRow(h.store, valid)).last_used_at, new Date(t0 + 61_000).toISOString(), 'last_used_at moves on the next miss');
  });

  t.test(`${storeKind}: revocation and expiry take effect within 60 s`, async (t) => {
    const h = await startHarness(t, { store: storeKind, clockStart: Date.UTC(2031, 4, 10, 12), env: BEHIND_PROXY });
    const s = tap(h.store);
    const key = await h.key('dev', { name: 'rev' });
    for (const dialect of DIALECTS) await served(t, h, dialect, { key });
    const prefix = await revokeKey(h.store, { profile: 'dev', name: 'rev' }, h.clock.now);
    t.equal(prefix, prefixOf(key));
    // Documented behaviour (spec step 4): the cached lookup keeps the key valid until its 60 s end.
    h.clock.now += 30_000;
    for (const dialect of DIALECTS) await served(t, h, dialect, { key });
    h.clock.now += 31_000;
    const ips: string[] = [];
    for (const dialect of DIALECTS) {
      for (const via of ['bearer', 'x-api-key'] as const) {
        const ip = nextIp();
        ips.push(ip);
        await refused(t, h, dialect, 'invalid_api_key', { key, via, xff: ip });
      }
    }
    const audit = await s.audit();
    t.same(audit.filter((r) => r.outcome === 'revoked_by_admin'), [{ ip: 'cli', prefix, outcome: 'revoked_by_admin' }], 'the CLI revocation is audited');
    // Same timestamp, written concurrently: compare without order.
    t.same(audit.filter((r) => r.outcome === 'revoked_key').sort((a, b) => a.ip.localeCompare(b.ip)), ips.map((ip) => ({ ip, prefix, outcome: 'revoked_key' })).sort((a, b) => a.ip.localeCompare(b.ip)), 'each refusal is audited');
    // Never valid again: a new key may take the name, the old one stays refused.
    const renewed = await h.key('dev', { name: 'rev' });
    await served(t, h, 'chat', { key: renewed });
    await refused(t, h, 'chat', 'invalid_api_key', { key, xff: nextIp() });

    // Expiry: a key valid now stops once the clock is past its expiry and past the cache's 60 s.
    const expiring = await h.key('dev', { expires: '2031-05-11' });
    for (const dialect of DIALECTS) await served(t, h, dialect, { key: expiring });
    h.clock.now = Date.UTC(2031, 4, 11) + 61_000;
    for (const dialect of DIALECTS) {
      const ip = nextIp();
      await refused(t, h, dialect, 'invalid_api_key', { key: expiring, via: 'x-api-key', xff: ip });
      t.same(await s.audit(ip), [{ ip, prefix: prefixOf(expiring), outcome: 'expired_key' }], `${dialect}: expired_key audited`);
    }
    await served(t, h, 'messages', { key: renewed });
  });

  t.test(`${storeKind}: IP allowlists behind the trusted loopback proxy`, async (t) => {
    const h = await startHarness(t, { store: storeKind, env: BEHIND_PROXY });
    const s = tap(h.store);
    const lists: Array<{ ip: string[]; inside: string[]; outside: string[] }> = [
      { ip: ['203.0.113.5'], inside: ['203.0.113.5'], outside: ['203.0.113.6', '2001:db8::5'] },
      { ip: ['198.51.100.0/24'], inside: ['198.51.100.1', '198.51.100.254'], outside: ['198.51.101.1', '198.51.99.255'] },
      { ip: ['2001:db8:abcd:12::7'], inside: ['2001:db8:abcd:12::7', '2001:db8:abcd:12:0:0:0:7'], outside: ['2001:db8:abcd:12::8', '203.0.113.5'] },
      { ip: ['2001:db8:abcd:34::/64', '192.0.2.9'], inside: ['2001:db8:abcd:34:ffff::1', '192.0.2.9'], outside: ['2001:db8:abcd:35::1', '192.0.2.10'] },
    ];
    for (const l of lists) {
      const key = await h.key('dev', { ip: l.ip });
      for (const dialect of DIALECTS) {
        for (const ip of l.inside) await served(t, h, dialect, { key, xff: ip });
        for (const ip of l.outside) {
          await refused(t, h, dialect, 'ip_not_allowed', { key, via: 'x-api-key', xff: ip });
          t.same(await s.audit(ip).then((rows) => rows.at(-1)), { ip, prefix: prefixOf(key), outcome: 'ip_not_allowed' }, `${dialect} ${l.ip} from ${ip}: audited`);
        }
      }
    }
    // The right-most X-Forwarded-For entry that is not a trusted proxy is the client.
    const key = await h.key('dev', { ip: ['203.0.113.50'] });
    for (const dialect of DIALECTS) {
      await served(t, h, dialect, { key, xff: '198.51.100.77, 203.0.113.50' });
      await served(t, h, dialect, { key, xff: '198.51.100.77, 203.0.113.50, 127.0.0.9' });
      await refused(t, h, dialect, 'ip_not_allowed', { key, xff: '203.0.113.50, 198.51.100.78' });
      t.same((await s.audit('198.51.100.78')).at(-1), { ip: '198.51.100.78', prefix: prefixOf(key), outcome: 'ip_not_allowed' });
      // Without X-Forwarded-For, the loopback peer itself is the client.
      await refused(t, h, dialect, 'ip_not_allowed', { key });
    }
    const local = await h.key('dev', { ip: ['127.0.0.1'] });
    for (const dialect of DIALECTS) await served(t, h, dialect, { key: local });
  });

  t.test(`${storeKind}: an untrusted peer is judged by its socket address`, async (t) => {
    const h = await startHarness(t, { store: storeKind, env: { SLUICE_TRUSTED_PROXIES: '10.9.9.9' } });
    const s = tap(h.store);
    const local = await h.key('dev', { ip: ['127.0.0.1'] });
    const far = await h.key('dev', { ip: ['203.0.113.5'] });
    for (const dialect of DIALECTS) {
      await served(t, h, dialect, { key: local, xff: '203.0.113.5' });
      await served(t, h, dialect, { key: local });
      await refused(t, h, dialect, 'ip_not_allowed', { key: far, xff: '203.0.113.5' });
      await refused(t, h, dialect, 'ip_not_allowed', { key: far, xff: '10.9.9.9, 203.0.113.5' });
    }
    const audit = await s.audit();
    t.equal(audit.length, 4);
    for (const row of audit) t.same(row, { ip: '127.0.0.1', prefix: prefixOf(far), outcome: 'ip_not_allowed' }, 'audited under the socket address');
  });

  t.test(`${storeKind}: profile removed (403) and upstream key missing (503), unaudited`, async (t) => {
    const h = await startHarness(t, { store: storeKind, env: BEHIND_PROXY });
    const s = tap(h.store);
    const counters = h.gateway.deps.counters;
    const ghost = await storeKey(h.store, 'ghost');
    const nokey = await h.key('nokey');
    const assistant = await h.key('assistant');
    for (const dialect of DIALECTS) await served(t, h, dialect, { key: assistant }, 'assistant');
    // A second gateway on the same store whose configuration no longer has `assistant`.
    const dir = mkdtempSync(join(tmpdir(), 'sluice-cfg-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'profiles.yaml'), `routers:\n  sim:\n    url: ${h.sim.url}\nprofiles:\n  dev:\n    default_tier: agent\n    router: sim\n    budget: { daily_usd: 5, monthly_usd: 60 }\n`);
    writeFileSync(join(dir, 'tiers.yaml'), TIERS_YAML);
    const counters2 = new MemoryCounters();
    t.teardown(() => counters2.close());
    const second = await createGateway({
      config: loadConfig(dir), store: h.store, counters: counters2, log: createLogger('silent'), dataDir: h.dataDir,
      settings: readSettings({ ...BEHIND_PROXY, SLUICE_UPSTREAM_KEY_DEV: UPSTREAM_KEYS.dev, SLUICE_UPSTREAM_KEY_ASSISTANT: UPSTREAM_KEYS.assistant }),
      now: () => h.clock.now, loadCatalog: false,
    });
    const addr = await second.listen('127.0.0.1', 0);
    t.teardown(() => second.close(1000));
    const url2 = `http://127.0.0.1:${addr.port}`;
    const before = (await s.audit()).length;
    const ips: string[] = [];
    for (const dialect of DIALECTS) {
      for (const via of ['bearer', 'x-api-key'] as const) {
        const ip = nextIp();
        ips.push(ip);
        await refused(t, h, dialect, 'profile_removed', { key: ghost, via, xff: ip });
        await refused(t, h, dialect, 'profile_removed', { key: assistant, via, xff: ip }, url2);
        await refused(t, h, dialect, 'upstream_key_missing', { key: nokey, via, xff: ip });
      }
    }
    await refused(t, h, 'chat', 'upstream_key_missing', { key: nokey, path: '/v1/models' });
    t.equal((await s.audit()).length, before, 'no audit row for 403 profile_removed or 503');
    for (const ip of ips) {
      const v = await new Admission({ counters, budget: { spendKeys: () => ['', ''], observe: () => {} } }).failures(ip);
      t.equal(v.count, 0, `${ip}: nothing counted toward the IP block`);
    }
    // The first gateway still serves the profile it has.
    await served(t, h, 'chat', { key: assistant }, 'assistant');
  });

  t.test(`${storeKind}: the chain runs in order`, async (t) => {
    const h = await startHarness(t, { store: storeKind, clockStart: Date.UTC(2031, 4, 10, 12), env: BEHIND_PROXY });
    const s = tap(h.store);
    const valid = await h.key('dev');
    // Step 1 before everything: a blocked address gets 429 even with a valid key.
    const blocked = nextIp();
    for (let i = 0; i < 20; i++) await refused(t, h, i % 2 ? 'chat' : 'messages', 'invalid_api_key', { xff: blocked });
    for (const dialect of DIALECTS) {
      await refused(t, h, dialect, 'ip_blocked', { key: valid, xff: blocked });
      await refused(t, h, dialect, 'ip_blocked', { key: 'malformed', xff: blocked });
    }
    t.equal((await s.audit(blocked)).length, 20, 'a blocked request is not audited again');

    // Steps 2–5 before the allowlist: a bad key from outside any allowlist is a 401, audited as such.
    const allowed = '203.0.113.5';
    const outside = '203.0.113.99';
    const revoked = await h.key('dev', { name: 'order-rev', ip: [allowed] });
    await revokeKey(h.store, { profile: 'dev', name: 'order-rev' }, h.clock.now);
    const expired = await h.key('dev', { expires: '2031-05-01', ip: [allowed] });
    const fenced = await h.key('dev', { ip: [allowed] });
    for (const dialect of DIALECTS) {
      const cases: Array<{ key?: string; outcome: AuditRow['outcome'] }> = [
        { key: undefined, outcome: 'missing_key' },
        { key: `${fenced}0`, outcome: 'malformed_key' },
        { key: generateKey('dev'), outcome: 'unknown_key' },
        { key: revoked, outcome: 'revoked_key' },
        { key: expired, outcome: 'expired_key' },
      ];
      for (const c of cases) {
        for (const ip of [allowed, outside]) {
          const n = (await s.audit(ip)).length;
          await refused(t, h, dialect, 'invalid_api_key', { key: c.key, xff: ip });
          const prefix = c.outcome === 'missing_key' || c.outcome === 'malformed_key' ? '' : prefixOf(c.key!);
          t.same((await s.audit(ip)).slice(n), [{ ip, prefix, outcome: c.outcome }], `${dialect} ${c.outcome} from ${ip}: audited as such`);
        }
      }
      await served(t, h, dialect, { key: fenced, xff: allowed });
    }

    // Profile checks (step 6) only once the key is valid and its address allowed.
    const ghostFenced = await storeKey(h.store, 'ghost', { ip: allowed });
    const ghostRevoked = await storeKey(h.store, 'ghost');
    const ghostExpired = await storeKey(h.store, 'ghost', { expires_at: '2031-05-01T00:00:00.000Z' });
    await h.store.revokeKey('ghost', (await keyRow(h.store, ghostRevoked)).name, new Date(h.clock.now).toISOString());
    const nokeyFenced = await h.key('nokey', { ip: [allowed] });
    const nokeyExpired = await h.key('nokey', { expires: '2031-05-01' });
    for (const dialect of DIALECTS) {
      const steps: Array<{ key: string; code: Refusal; outcome?: AuditRow['outcome']; xff?: string; body?: string }> = [
        { key: generateKey('ghost'), code: 'invalid_api_key', outcome: 'unknown_key' },
        { key: ghostRevoked, code: 'invalid_api_key', outcome: 'revoked_key' },
        { key: ghostExpired, code: 'invalid_api_key', outcome: 'expired_key' },
        { key: nokeyExpired, code: 'invalid_api_key', outcome: 'expired_key' },
        { key: 'sluice_nokey_short', code: 'invalid_api_key', outcome: 'malformed_key' },
        { key: ghostFenced, code: 'ip_not_allowed', outcome: 'ip_not_allowed' },
        { key: nokeyFenced, code: 'ip_not_allowed', outcome: 'ip_not_allowed' },
        { key: ghostFenced, code: 'profile_removed', xff: allowed },
        { key: nokeyFenced, code: 'upstream_key_missing', xff: allowed },
        // Header-only checks come before the body is read: a bad body does not change the answer.
        { key: generateKey('dev'), code: 'invalid_api_key', outcome: 'unknown_key', body: '{not json' },
        { key: nokeyFenced, code: 'upstream_key_missing', xff: allowed, body: '{not json' },
      ];
      for (const step of steps) {
        const ip = step.xff ?? nextIp();
        const n = (await s.audit(ip)).length;
        await refused(t, h, dialect, step.code, { key: step.key, xff: ip, body: step.body });
        const rows = await s.audit(ip);
        if (step.outcome === undefined) t.equal(rows.length, n, `${dialect} ${step.code}: not audited`);
        else {
          const prefix = step.outcome === 'malformed_key' ? '' : prefixOf(step.key);
          t.same(rows.slice(n), [{ ip, prefix, outcome: step.outcome }], `${dialect} ${step.code}: audited as ${step.outcome}`);
        }
      }
    }
  });
}
