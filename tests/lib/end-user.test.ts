// End user and auto session of a request (docs/http.md): chat `user`, messages `metadata.user_id`,
// Claude Code blobs (JSON and the older `user_…_session_<uuid>`) reduced to `cc:<session>`, the
// `x-claude-code-session-id` header winning without the body being read, and `x-sluice-session`
// as the auto session. Unit-level on a Ctx-like object, then the rows written end to end.

import t from 'tap';
import type { Ctx } from '../../lib/context.ts';
import { claudeCodeSession, identify, label, MAX_LABEL } from '../../lib/end-user.ts';
import { startHarness } from '../helpers/gateway.ts';

const SESSION = '3f2b6a1e-9c4d-4e8f-a1b2-c3d4e5f6a7b8';
const OTHER = '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d';
const HEX64 = 'ab'.repeat(32);
const JSON_BLOB = JSON.stringify({ device_id: 'd'.repeat(64), account_uuid: '11111111-2222-4333-8444-555555555555', session_id: SESSION });
const LEGACY_EMPTY = `user_${HEX64}_account__session_${SESSION}`;
const LEGACY_ACCOUNT = `user_${HEX64}_account_11111111-2222-4333-8444-555555555555_session_${SESSION}`;

function who(dialect: 'chat' | 'messages' | 'responses', body: Record<string, any> | undefined, headers: Record<string, string> = {}) {
  const ctx = { dialect, body, req: { headers }, endUser: 'unset', session: 'unset' } as unknown as Ctx;
  identify(ctx);
  return { endUser: ctx.endUser, session: ctx.session };
}

t.test('claudeCodeSession recognises both Claude Code shapes only', async (t) => {
  t.equal(claudeCodeSession(JSON_BLOB), SESSION);
  t.equal(claudeCodeSession(LEGACY_EMPTY), SESSION);
  t.equal(claudeCodeSession(LEGACY_ACCOUNT), SESSION);
  for (const other of ['alice', '{"session_id":"abc"', '{"user":"x"}', `user_${HEX64}`, `user_xyz_account__session_${SESSION}`, '']) {
    t.equal(claudeCodeSession(other), undefined, JSON.stringify(other));
  }
});

t.test('chat: `user` is the end user', async (t) => {
  t.same(who('chat', { model: 'm', user: 'user-42' }), { endUser: 'user-42', session: null });
  t.same(who('chat', { model: 'm' }), { endUser: null, session: null });
  t.same(who('chat', { model: 'm', user: '' }), { endUser: null, session: null });
  t.same(who('chat', { model: 'm', user: 42 }), { endUser: null, session: null }, 'only a string counts');
  t.same(who('chat', { model: 'm', metadata: { user_id: 'x' } }), { endUser: null, session: null }, 'metadata is the messages dialect');
  t.same(who('chat', { model: 'm', user: 'u' }, { 'x-sluice-session': 'conv-1' }), { endUser: 'u', session: 'conv-1' });
  t.same(who('chat', { model: 'm', user: 'a\u0000b\u0000' }), { endUser: 'a\ufffdb\ufffd', session: null }, 'a NUL becomes U+FFFD');
});

t.test('messages: metadata.user_id, Claude Code blobs reduced to cc:<session>', async (t) => {
  t.same(who('messages', { model: 'm', metadata: { user_id: 'alice' } }), { endUser: 'alice', session: null }, 'other values as they are');
  t.same(who('messages', { model: 'm', metadata: { user_id: JSON_BLOB } }), { endUser: `cc:${SESSION}`, session: SESSION });
  t.same(who('messages', { model: 'm', metadata: { user_id: LEGACY_EMPTY } }), { endUser: `cc:${SESSION}`, session: SESSION });
  t.same(who('messages', { model: 'm', metadata: { user_id: LEGACY_ACCOUNT } }), { endUser: `cc:${SESSION}`, session: SESSION });
  t.same(who('messages', { model: 'm', metadata: { user_id: '{"team":"a"}' } }), { endUser: '{"team":"a"}', session: null }, 'JSON that is no Claude Code blob: as it is');
  t.same(who('messages', { model: 'm', user: 'x' }), { endUser: null, session: null }, '`user` is the chat dialect');
  t.same(who('messages', { model: 'm', metadata: { user_id: JSON_BLOB } }, { 'x-sluice-session': 'conv-9' }), { endUser: `cc:${SESSION}`, session: 'conv-9' }, 'x-sluice-session is the auto session first');
});

t.test('x-claude-code-session-id wins and spares the body', async (t) => {
  let bodyRead = false;
  const ctx = {
    dialect: 'messages', req: { headers: { 'x-claude-code-session-id': OTHER } }, endUser: null, session: null,
    get body() {
      bodyRead = true;
      return { model: 'm', metadata: { user_id: JSON_BLOB } };
    },
  } as unknown as Ctx;
  identify(ctx);
  t.equal(ctx.endUser, `cc:${OTHER}`);
  t.equal(ctx.session, OTHER);
  t.equal(bodyRead, false, 'the body was not consulted');

  t.same(who('chat', { model: 'm', user: 'u' }, { 'x-claude-code-session-id': OTHER }), { endUser: `cc:${OTHER}`, session: OTHER }, 'on chat too');
  t.same(who('messages', { model: 'm' }, { 'x-claude-code-session-id': OTHER, 'x-sluice-session': 'conv-2' }), { endUser: `cc:${OTHER}`, session: 'conv-2' });
});

t.test('responses: `user`, else `safety_identifier`; Codex\'s session-id header is the session', async (t) => {
  const CODEX = '01a21037-d823-7521-b1bb-0db43948f683';
  t.same(who('responses', { model: 'm', user: 'u-1' }), { endUser: 'u-1', session: null });
  t.same(who('responses', { model: 'm', safety_identifier: 'hash-9' }), { endUser: 'hash-9', session: null });
  t.same(who('responses', { model: 'm', user: 'u-1', safety_identifier: 'hash-9' }), { endUser: 'u-1', session: null }, '`user` wins');
  t.same(who('responses', { model: 'm', user: '', safety_identifier: 'hash-9' }), { endUser: 'hash-9', session: null }, 'an empty user is none');
  t.same(who('responses', { model: 'm', user: 7, safety_identifier: ['x'] }), { endUser: null, session: null }, 'only strings count');
  t.same(who('responses', { model: 'm', metadata: { user_id: 'alice' } }), { endUser: null, session: null }, 'metadata is the messages dialect');
  t.same(who('responses', { model: 'm' }, { 'session-id': CODEX, 'thread-id': CODEX }), { endUser: null, session: CODEX }, 'Codex: a session, no end user');
  t.same(who('responses', { model: 'm', user: 'u' }, { 'session-id': CODEX, 'x-sluice-session': 'conv-5' }), { endUser: 'u', session: 'conv-5' }, 'x-sluice-session still wins');
  t.same(who('responses', { model: 'm' }, { 'session-id': 'x'.repeat(300) }), { endUser: null, session: label('x'.repeat(300)) }, 'bounded like the other headers');
  t.same(who('chat', { model: 'm' }, { 'session-id': CODEX }), { endUser: null, session: null }, 'session-id means nothing on chat');
  t.same(who('responses', { model: 'm', user: 'u' }, { 'x-claude-code-session-id': OTHER }), { endUser: `cc:${OTHER}`, session: OTHER }, 'the Claude Code header wins on every dialect');
});

// ---------------------------------------------------------------------------------------------
// End to end: the rows carry end_user and session; the session headers (Codex's too) never go upstream.

t.test('e2e: rows carry end_user and session', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  let count = 0;
  async function send(path: string, body: Record<string, any>, headers: Record<string, string> = {}) {
    const res = await fetch(`${h.url}${path}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify(body),
    });
    t.equal(res.status, 200);
    await res.arrayBuffer();
    const rows = await h.rows(++count);
    const row = rows.find((r) => r.id === res.headers.get('x-sluice-request-id'));
    if (!row) throw new Error('no row for this request');
    return { row, sent: h.sim.received.filter((r) => r.method === 'POST').at(-1)! };
  }
  const msg = (userId?: string) => ({ model: 'sluice/fast', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }], ...(userId ? { metadata: { user_id: userId } } : {}) });
  const chat = (user?: string) => ({ model: 'sluice/fast', messages: [{ role: 'user', content: 'hi' }], ...(user ? { user } : {}) });
  const resp = (extra: Record<string, string> = {}) => ({ model: 'sluice/fast', input: 'hi', ...extra });
  const CODEX = '01a21037-d823-7521-b1bb-0db43948f683';

  const cases: Array<[string, string, Record<string, any>, Record<string, string>, string | null, string | null]> = [
    ['chat user', '/v1/chat/completions', chat('user-42'), {}, 'user-42', null],
    ['chat user and x-sluice-session', '/v1/chat/completions', chat('user-42'), { 'x-sluice-session': 'conv-1' }, 'user-42', 'conv-1'],
    ['chat without user', '/v1/chat/completions', chat(), {}, null, null],
    ['messages plain user_id', '/v1/messages', msg('alice'), {}, 'alice', null],
    ['messages JSON blob', '/v1/messages', msg(JSON_BLOB), {}, `cc:${SESSION}`, SESSION],
    ['messages legacy blob', '/v1/messages', msg(LEGACY_EMPTY), {}, `cc:${SESSION}`, SESSION],
    ['claude code header', '/v1/messages', msg(JSON_BLOB), { 'x-claude-code-session-id': OTHER }, `cc:${OTHER}`, OTHER],
    ['claude code header and x-sluice-session', '/v1/messages', msg('alice'), { 'x-claude-code-session-id': OTHER, 'x-sluice-session': 'conv-3' }, `cc:${OTHER}`, 'conv-3'],
    ['responses user', '/v1/responses', resp({ user: 'bob' }), {}, 'bob', null],
    ['responses safety_identifier', '/v1/responses', resp({ safety_identifier: 'h-77' }), {}, 'h-77', null],
    ['codex session-id', '/v1/responses', resp(), { 'session-id': CODEX, 'thread-id': CODEX, 'x-codex-turn-metadata': '{"installation_id":"i"}' }, null, CODEX],
    ['codex session-id and x-sluice-session', '/v1/responses', resp({ user: 'bob' }), { 'session-id': CODEX, 'x-sluice-session': 'conv-4' }, 'bob', 'conv-4'],
  ];
  for (const [name, path, body, headers, endUser, session] of cases) {
    const { row, sent } = await send(path, body, headers);
    t.equal(row.end_user, endUser, `${name}: end_user`);
    t.equal(row.session, session, `${name}: session`);
    t.notOk('x-claude-code-session-id' in sent.headers, `${name}: claude code header not forwarded`);
    t.notOk('x-sluice-session' in sent.headers, `${name}: x-sluice-session not forwarded`);
    for (const codex of ['session-id', 'thread-id', 'x-codex-turn-metadata']) t.notOk(codex in sent.headers, `${name}: ${codex} not forwarded`);
    if (path === '/v1/responses') t.equal(sent.json.user, body.user, `${name}: user forwarded unchanged`);
    if (body.metadata) t.same(sent.json.metadata, body.metadata, `${name}: metadata forwarded unchanged`);
  }
  t.equal(h.rowCount(), cases.length, 'one row per request');
});

t.test('every label is bounded: a long one keeps its start and a hash of the whole', async (t) => {
  t.equal(label('short'), 'short');
  t.equal(label('x'.repeat(MAX_LABEL)), 'x'.repeat(MAX_LABEL), 'up to the bound: unchanged');
  const a = label('x'.repeat(MAX_LABEL + 1));
  const b = label('x'.repeat(MAX_LABEL + 2));
  t.equal(a.length, MAX_LABEL);
  t.equal(b.length, MAX_LABEL);
  t.not(a, b, 'distinct long labels stay distinct');
  t.equal(label('x'.repeat(MAX_LABEL + 1)), a, 'and the same one groups');
  t.match(a, /^x+…#[0-9a-f]{32}$/);
  t.equal(label(`a\u0000${'b'.repeat(300)}`).includes('\u0000'), false, 'no NUL either way');

  // The session of a Claude Code blob came out whole: 8 MB of it reached the row and the rollups.
  const huge = 's'.repeat(8 * 1024 * 1024);
  const blob = JSON.stringify({ device_id: 'd', session_id: huge });
  const got = who('messages', { model: 'm', metadata: { user_id: blob } });
  t.equal(got.session!.length, MAX_LABEL, 'the session of a blob is bounded');
  t.equal(got.endUser!.length, MAX_LABEL, 'and so is the end user made of it');
  t.equal(got.session, label(huge));
  const other = who('messages', { model: 'm', metadata: { user_id: JSON.stringify({ device_id: 'd', session_id: `${huge}2` }) } });
  t.not(other.session, got.session, 'two long sessions sharing a start stay apart');
  for (const name of ['x-sluice-session', 'x-claude-code-session-id']) {
    t.equal(who('messages', { model: 'm' }, { [name]: huge }).session!.length, MAX_LABEL, name);
  }
});
