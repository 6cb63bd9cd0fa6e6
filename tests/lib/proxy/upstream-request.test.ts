// The body that goes upstream (lib/proxy/upstream-request.ts): a long spliced body is written as
// views of the bytes received, never copied into a second buffer, and still arrives byte for byte
// over a real HTTP request with its content-length; a short one goes in one write; an untouched one
// is the received buffer itself.

import http from 'node:http';
import { once } from 'node:events';
import t from 'tap';
import { scanJson } from '../../../lib/json-scan.ts';
import { OneWrite } from '../../../lib/proxy/upstream-request.ts';
import { bodyFromScan, encodeBody } from '../../../lib/request-body.ts';

function scanned(text: string) {
  const raw = Buffer.from(text);
  return { raw, body: bodyFromScan(raw, scanJson(raw, { maxDepth: 512, watch: new Set(['messages']), entryKeys: ['role'] })!) };
}

/** POSTs `write` to a real server and answers the bytes it received and the content-length it read. */
async function send(write: OneWrite): Promise<{ bytes: Buffer; declared: number }> {
  let got: { bytes: Buffer; declared: number } | undefined;
  const server = http.createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    got = { bytes: Buffer.concat(chunks), declared: Number(req.headers['content-length']) };
    res.end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  const req = http.request({ port, host: '127.0.0.1', method: 'POST', headers: { 'content-length': String(write.length) } });
  write.pipe(req);
  const [res] = (await once(req, 'response')) as [http.IncomingMessage];
  res.resume();
  await once(res, 'end');
  server.close();
  return got!;
}

const turn = (i: number) => ({ role: i % 2 ? 'assistant' : 'user', content: `turn ${i}: ${'x'.repeat(1000)} "quoted" \\ é` });

t.test('a long spliced body goes as views of the received bytes and arrives byte for byte', async (t) => {
  const text = JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64000, messages: Array.from({ length: 300 }, (_, i) => turn(i)) });
  const { raw, body } = scanned(text);
  body.model = 'anthropic/claude-sonnet-4.5';
  const write = new OneWrite(encodeBody(body));
  t.ok(write.parts.length > 1, 'written in parts');
  t.ok(write.parts.some((p) => p.buffer === raw.buffer && p.length > 250_000), 'the messages are a view of the received bytes, not a copy');
  const expected = Buffer.concat(write.parts);
  t.equal(write.length, expected.length, 'length is the parts\' sum');
  const { bytes, declared } = await send(write);
  t.equal(declared, bytes.length, 'content-length matches what was sent');
  t.ok(bytes.equals(expected), 'the router receives the spliced text exactly');
  t.same(JSON.parse(bytes.toString()), { ...JSON.parse(text), model: 'anthropic/claude-sonnet-4.5' });
});

t.test('a short spliced body is joined into one write; an untouched one is the received buffer', async (t) => {
  const { body } = scanned(JSON.stringify({ model: 'sluice/fast', messages: [turn(0)] }));
  body.model = 'google/gemini-2.5-flash';
  const short = new OneWrite(encodeBody(body));
  t.equal(short.parts.length, 1, 'one part');
  const { bytes } = await send(short);
  t.same(JSON.parse(bytes.toString()), { model: 'google/gemini-2.5-flash', messages: [turn(0)] });

  const raw = Buffer.from(JSON.stringify({ model: 'x/y', messages: Array.from({ length: 40 }, (_, i) => turn(i)) }));
  const whole = new OneWrite([raw]);
  t.equal(whole.parts[0], raw, 'the buffer received, as it is');
  t.ok((await send(whole)).bytes.equals(raw));
});
