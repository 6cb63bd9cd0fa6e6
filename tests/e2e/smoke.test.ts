// The shortest path through sluice on both dialects: a stream answered, a row recorded.
import t from 'tap';
import { startHarness } from '../helpers/gateway.ts';

t.test('chat and messages stream through and leave rows', async (t) => {
  const h = await startHarness(t);
  const key = await h.key('dev');
  const chat = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'sluice/fast', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(chat.status, 200);
  t.match(await chat.text(), /data: \[DONE\]/);
  const msg = await fetch(`${h.url}/v1/messages?beta=true`, {
    method: 'POST', headers: { 'x-api-key': key, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
  });
  t.equal(msg.status, 200);
  t.match(await msg.text(), /event: message_stop/);
  const rows = await h.rows(2);
  t.equal(rows.length, 2);
  t.same(rows.map((r) => r.endpoint).sort(), ['chat', 'messages']);
  for (const r of rows) {
    t.equal(r.outcome, 'ok');
    t.ok(r.cost_usd > 0);
    t.equal(r.cost_source, 'upstream');
  }
});
