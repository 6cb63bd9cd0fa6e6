// Seeded fuzzing of the operator's surfaces after real traffic: random methods, paths near `/`,
// `/api/summary` and `/metrics`, query strings and headers (a valid client key among them).
// Property: every case is answered below 500, nothing that answers carries a secret, and the
// gateway still serves the three surfaces afterwards. The seed is in the test name: a failure replays.

import http from 'node:http';
import fc from 'fast-check';
import t from 'tap';
import { parseKey } from '../../lib/keys.ts';
import { boardTraffic, LIMITED } from '../helpers/board-traffic.ts';
import { startHarness, UPSTREAM_KEYS } from '../helpers/gateway.ts';

const SEED = 0xb0a2d;
const CASES = 400;

interface Case { method: string; path: string; headers: Record<string, string>; body?: string }

const printable = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 60 });
const SURFACES = ['/', '/api/summary', '/metrics'] as const;
// The three surfaces themselves half the time, their look-alikes the other half.
const paths = fc.oneof(
  fc.constantFrom(...SURFACES),
  fc.constantFrom(
    '//', '/api/summary/', '/metrics/', '/api', '/api/', '/api/summary.json', '/METRICS', '/Api/Summary',
    '/%2e', '/%2F', '/%2fmetrics', '/./metrics', '/api/../metrics', '/index.html', '/favicon.ico', '/metrics;x', '/api/summary%00', '/%00',
    '/api/summary/..', '/health', '/health?details', '/api/health', '/api/health/', '*',
  ),
);
const query = fc.oneof(
  fc.constant(''),
  fc.constantFrom('?', '?details', '?=&&=', '?%', '?%zz', '?a=%ff%fe', '?name[]=1&name[]=2', '?__proto__[x]=1', '?format=json', `?x=${'a'.repeat(8000)}`),
  fc.array(fc.tuple(printable, printable), { maxLength: 5 }).map((kv) => `?${kv.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join('&')}`),
);
const methods = fc.oneof(
  { arbitrary: fc.constantFrom('GET', 'HEAD'), weight: 2 },
  { arbitrary: fc.constantFrom('POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH', 'TRACE', 'PROPFIND', 'PURGE'), weight: 1 },
);
const headerNames = fc.constantFrom(
  'accept', 'accept-encoding', 'accept-language', 'if-none-match', 'if-modified-since', 'range', 'cookie', 'authorization', 'x-api-key',
  'x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'host', 'origin', 'referer', 'user-agent', 'x-sluice-run', 'anthropic-version',
  'content-type', 'x-http-method-override',
);
const headerValues = fc.oneof(
  printable,
  fc.constantFrom('$KEY', 'Bearer $KEY', 'text/html', 'application/json', '*/*', 'gzip, br', 'bytes=0-10', 'bytes=-1', '<script>alert(1)</script>', '127.0.0.1, 10.0.0.1', 'evil.example', ''),
);
const cases: fc.Arbitrary<Case> = fc.record({
  method: methods,
  path: fc.tuple(paths, query).map(([p, q]) => (p === '*' ? p : p + q)),
  headers: fc.dictionary(headerNames, headerValues, { maxKeys: 5 }),
  body: fc.option(fc.oneof(printable, fc.constant('{"model":"sluice/fast"}')), { nil: undefined }),
});

function send(port: number, c: Case, key: string): Promise<{ status: number; headers: string; body: string }> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(c.headers)) headers[k] = v.replaceAll('$KEY', key);
    const req = http.request({ host: '127.0.0.1', port, method: c.method, path: c.path, headers, agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (b: Buffer) => chunks.push(b));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: JSON.stringify(res.headers), body: Buffer.concat(chunks).toString('latin1') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`no answer within 15 s: ${c.method} ${c.path}`)));
    req.end(c.body);
  });
}

t.test(`board surfaces under fuzz (seed ${SEED}, ${CASES} cases)`, async (t) => {
  const h = await startHarness(t, LIMITED);
  const traffic = await boardTraffic(h);
  await h.rows(traffic.rows);
  const port = Number(new URL(h.url).port);
  const key = traffic.keys[0];
  const secrets = [...traffic.keys, ...traffic.keys.map((k) => parseKey(k)!.token), ...Object.values(UPSTREAM_KEYS)];
  const seen = new Map<number, number>();
  const served = new Map<string, number>();

  await fc.assert(
    fc.asyncProperty(cases, async (c) => {
      const r = await send(port, c, key);
      seen.set(r.status, (seen.get(r.status) ?? 0) + 1);
      const path = c.path.split('?')[0];
      if (r.status === 200 && (SURFACES as readonly string[]).includes(path)) served.set(path, (served.get(path) ?? 0) + 1);
      if (r.status >= 500) throw new Error(`${c.method} ${c.path} answered ${r.status}: ${r.body.slice(0, 200)}`);
      for (const s of secrets) if (r.body.includes(s) || r.headers.includes(s)) throw new Error(`${c.method} ${c.path} carries a secret`);
    }),
    { seed: SEED, numRuns: CASES },
  );
  t.ok((seen.get(200) ?? 0) > CASES / 10, `many cases were served (statuses: ${JSON.stringify(Object.fromEntries(seen))})`);
  for (const path of SURFACES) t.ok((served.get(path) ?? 0) >= 10, `${path} was served under fuzz (${served.get(path) ?? 0} times)`);
  t.notOk([...h.logs].some((l) => l.msg === 'request failed inside the gateway'), 'nothing failed inside the gateway');
  for (const path of ['/', '/api/summary', '/metrics']) t.equal((await fetch(h.url + path)).status, 200, `${path} still answers`);
});
