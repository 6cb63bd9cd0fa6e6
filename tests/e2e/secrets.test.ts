// Secrets never leak (docs/http.md): after a full session through the gateway (keys made,
// chat and messages served streamed and not, every kind of auth refusal, upstream errors, a key
// revoked), no client key or token and no upstream key appears in the logs, the stored rows, the
// SQLite files, or any response the client got; and the upstream never saw a client key.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { revokeKey } from '../../cli/keys.ts';
import { generateKey, hashKey, parseKey, displayPrefix } from '../../lib/keys.ts';
import { startHarness, UPSTREAM_KEYS, type Harness } from '../helpers/gateway.ts';
import { trackAudits } from '../helpers/upstream.ts';

type Dialect = 'chat' | 'messages';

interface Seen { status: number; headers: string; body: string }

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}

for (const storeKind of ['sqlite', 'postgres'] as const) {
  t.test(`${storeKind}: no key leaks anywhere`, async (t) => {
    const h: Harness = await startHarness(t, { store: storeKind, env: { SLUICE_TRUSTED_PROXIES: '127.0.0.1' } }); // client addresses as X-Forwarded-For from loopback
    const auditsWritten = trackAudits(h.store);
    const seen: Seen[] = [];
    /** Every string presented as a client key during the session. */
    const presented = new Set<string>();

    async function send(dialect: Dialect, o: { key?: string; via?: 'bearer' | 'x-api-key'; xff?: string; stream?: boolean; sim?: string; path?: string } = {}): Promise<Seen> {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (o.key !== undefined) {
        presented.add(o.key);
        if (o.via === 'x-api-key') headers['x-api-key'] = o.key;
        else headers.authorization = `Bearer ${o.key}`;
      }
      if (o.xff) headers['x-forwarded-for'] = o.xff;
      if (o.sim) headers['x-sim'] = o.sim;
      if (dialect === 'messages') headers['anthropic-version'] = '2023-06-01';
      const path = o.path ?? (dialect === 'chat' ? '/v1/chat/completions' : '/v1/messages');
      const get = path === '/v1/models';
      const body = dialect === 'chat'
        ? { model: 'sluice/fast', stream: o.stream ?? false, user: 'u-1', messages: [{ role: 'user', content: 'hello' }] }
        : { model: 'claude-sonnet-4-5', max_tokens: 64, stream: o.stream ?? false, metadata: { user_id: 'u-2' }, messages: [{ role: 'user', content: 'hello' }] };
      const res = await fetch(h.url + path, { method: get ? 'GET' : 'POST', headers, body: get ? undefined : JSON.stringify(body) });
      const s = { status: res.status, headers: JSON.stringify([...res.headers]), body: await res.text() };
      seen.push(s);
      return s;
    }

    const dev = await h.key('dev', { name: 'app' });
    const assistant = await h.key('assistant');
    const fenced = await h.key('dev', { ip: ['203.0.113.5'] });
    const expired = await h.key('dev', { expires: '2020-01-01' });
    const doomed = await h.key('dev', { name: 'doomed' });
    const nokey = await h.key('nokey');
    const clientKeys = [dev, assistant, fenced, expired, doomed, nokey];

    // Served, streamed and not, on both dialects and through both headers.
    let proxied = 0;
    for (const dialect of ['chat', 'messages'] as const) {
      for (const stream of [false, true]) {
        for (const [key, via] of [[dev, 'bearer'], [assistant, 'x-api-key'], [doomed, 'bearer']] as const) {
          const r = await send(dialect, { key, via, stream });
          t.equal(r.status, 200, `${dialect} stream=${stream} served`);
          proxied++;
        }
      }
      // Upstream errors, before the response and mid-stream.
      t.equal((await send(dialect, { key: dev, sim: 'status=500' })).status, 500, `${dialect}: upstream 500 passed back`);
      t.equal((await send(dialect, { key: dev, sim: 'status=401' })).status, 401, `${dialect}: upstream 401 passed back`);
      t.equal((await send(dialect, { key: dev, stream: true, sim: 'fail-after=2' })).status, 200, `${dialect}: stream fails midway`);
      proxied += 3;
    }
    t.equal((await send('chat', { key: dev, path: '/v1/models' })).status, 200);

    // Every kind of refusal.
    for (const dialect of ['chat', 'messages'] as const) {
      t.equal((await send(dialect, {})).status, 401, 'missing');
      t.equal((await send(dialect, { key: `${dev}X` })).status, 401, 'malformed: the whole key plus one character');
      t.equal((await send(dialect, { key: dev.slice(0, -1), via: 'x-api-key' })).status, 401, 'malformed: one character short');
      const { profile, token } = parseKey(dev)!;
      const unknown = `sluice_${profile}_${token.slice(0, -1)}${token.endsWith('a') ? 'b' : 'a'}`;
      t.equal((await send(dialect, { key: unknown })).status, 401, 'unknown: the key with its last character changed');
      t.equal((await send(dialect, { key: generateKey('dev') })).status, 401, 'unknown');
      t.equal((await send(dialect, { key: expired })).status, 401, 'expired');
      t.equal((await send(dialect, { key: fenced, xff: '198.51.100.1' })).status, 403, 'ip_not_allowed');
      t.equal((await send(dialect, { key: nokey })).status, 503, 'upstream key missing');
    }
    await revokeKey(h.store, { profile: 'dev', name: 'doomed' }, h.clock.now);
    h.clock.now += 61_000;
    for (const dialect of ['chat', 'messages'] as const) t.equal((await send(dialect, { key: doomed })).status, 401, 'revoked');
    // Enough failures from one address to block it.
    for (let i = 0; i < 21; i++) await send('chat', { key: `sluice_dev_${'x'.repeat(i)}`, xff: '192.0.2.1' });
    t.equal((await send('messages', { key: dev, xff: '192.0.2.1' })).status, 429, 'blocked');

    const rows = await h.rows(proxied);
    await auditsWritten();
    t.ok(rows.some((r) => r.outcome === 'upstream_error'), 'the upstream errors were recorded');

    const upstreamKeys = Object.values(UPSTREAM_KEYS);
    const clientSecrets = [...clientKeys, ...[...presented].filter((k) => k.length >= 24)];
    const tokens = clientKeys.map((k) => parseKey(k)!.token);
    // Any 8 characters of a token in a row is a leak too: the display prefix shows only the last 4.
    const pieces = tokens.flatMap((tok) => Array.from({ length: tok.length - 7 }, (_, i) => tok.slice(i, i + 8)));
    const secrets = [...new Set([...clientSecrets, ...tokens, ...upstreamKeys])];

    // Where secrets must not be: logs, rows, database files, responses.
    const logText = h.logText();
    // Spread first: the harness's `logs` Proxy has no `has` trap, so Array methods called on it skip every line.
    t.ok([...h.logs].some((l) => l.msg === 'auth failure'), 'the log holds the auth failures (the scan has something to read)');
    const keyRows = await h.store.listKeys();
    t.equal(keyRows.length, clientKeys.length);
    t.same(keyRows.map((k) => k.key_hash).sort(), clientKeys.map(hashKey).sort(), 'only hashes are stored');
    t.same(keyRows.map((k) => k.prefix).sort(), clientKeys.map((k) => displayPrefix(parseKey(k)!.profile, parseKey(k)!.token)).sort(), 'and display prefixes');
    // board: the operator's surfaces show what the session did, never a secret.
    const operator: Record<string, string> = {};
    for (const path of ['/', '/api/summary', '/metrics']) {
      const res = await fetch(h.url + path);
      t.equal(res.status, 200, `${path} answers`);
      operator[`board ${path}`] = await res.text();
    }
    t.ok(operator['board /metrics'].includes('sluice_auth_failures_total'), 'the metrics hold the session (the scan has something to read)');
    const places: Record<string, string | Buffer> = {
      ...operator,
      log: logText,
      requests: JSON.stringify(await h.store.listRequests(100_000)),
      auth_audit: JSON.stringify(await h.store.listAudit(100_000)),
      keys: JSON.stringify(keyRows),
      responses: JSON.stringify(seen),
    };
    t.ok((await h.store.listAudit(100_000)).length >= 20, 'the audit holds the refusals');
    if (storeKind === 'sqlite') {
      const files = filesUnder(h.dataDir);
      t.ok(files.some((f) => f.endsWith('sluice.db')), 'the SQLite file is there to scan');
      for (const f of files) places[`file ${f}`] = readFileSync(f);
    }
    for (const [where, text] of Object.entries(places)) {
      for (const secret of secrets) {
        const found = typeof text === 'string' ? text.includes(secret) : text.includes(Buffer.from(secret));
        t.notOk(found, `${where} does not hold ${secret.slice(0, 12)}…`);
      }
      const piece = pieces.find((p) => (typeof text === 'string' ? text.includes(p) : text.includes(Buffer.from(p))));
      t.equal(piece, undefined, `${where} holds no 8 characters of a key's token`);
    }

    // The upstream got the profile's upstream key, never a client key.
    t.ok(h.sim.received.length >= proxied, 'the upstream received the proxied requests');
    const chatOrMessages = h.sim.received.filter((r) => r.path.startsWith('/api/v1/chat') || r.path.startsWith('/api/v1/messages'));
    t.equal(chatOrMessages.length, proxied);
    for (const r of chatOrMessages) t.match(r.headers.authorization, /^Bearer sk-or-v1-/, 'upstream authorization is an upstream key');
    const upstreamText = JSON.stringify(h.sim.received.map((r) => ({ path: r.path, headers: r.headers, body: r.body })));
    t.ok(upstreamText.includes(UPSTREAM_KEYS.dev) && upstreamText.includes(UPSTREAM_KEYS.assistant), 'the upstream keys went upstream (the scan can see them)');
    for (const secret of [...clientSecrets, ...tokens]) t.notOk(upstreamText.includes(secret), `the upstream never saw ${secret.slice(0, 12)}…`);
    t.notOk(/sluice_[a-z]/.test(upstreamText), 'no sluice key shape went upstream');
  });
}
