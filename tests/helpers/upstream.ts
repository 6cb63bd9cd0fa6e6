// Helpers the end-to-end tests share: what reached the simulated router (the inference requests,
// their headers, no client key anywhere) and what the same request gets from the router directly;
// the client's side of that comparison (a recording fetch for the SDKs, a reply read as JSON when
// it is JSON); a wait for the audit rows sluice writes off the request path; and a harness with a
// profile roomy enough for many requests in a row. Checks here assert; nothing here changes a test.

import type { IncomingHttpHeaders } from 'node:http';
import type { Test } from 'tap';
import type { SimRequest, SimulatedRouter } from '../../lib/sim/index.ts';
import type { AuditRow, Store } from '../../lib/store/store.ts';
import { startHarness, UPSTREAM_KEYS, type Harness, type HarnessOptions } from './gateway.ts';

// ---------------------------------------------------------------------------------------------
// The upstream side

/** The inference requests the sim received (the catalog fetch at start-up is not one). */
export function inference(sim: SimulatedRouter): SimRequest[] {
  return sim.received.filter((r) => r.path.startsWith('/api/v1/chat/') || r.path.startsWith('/api/v1/messages'));
}

/** Sends what the sim received from sluice straight to the sim again: the sim's own answer to it. */
export async function replay(sim: SimulatedRouter, r: SimRequest): Promise<{ id: string; bytes: Buffer }> {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(r.headers)) {
    if (typeof v === 'string' && !['host', 'content-length', 'connection', 'transfer-encoding'].includes(k)) headers[k] = v;
  }
  const res = await fetch(sim.url + r.path, { method: r.method, headers, body: r.body });
  return { id: res.headers.get('x-generation-id') ?? '', bytes: Buffer.from(await res.arrayBuffer()) };
}

/** What every upstream request must look like: the profile's key, none of the client's or sluice's own headers. */
export function checkUpstreamHeaders(t: Test, headers: IncomingHttpHeaders, profile: string): void {
  t.equal(headers.authorization, `Bearer ${UPSTREAM_KEYS[profile]}`, 'upstream gets the profile key');
  for (const name of ['x-api-key', 'x-sluice-session', 'x-claude-code-session-id', 'x-forwarded-for']) {
    t.notOk(name in headers, `${name} is not forwarded`);
  }
  t.equal(headers['accept-encoding'], 'identity');
}

/** The client key appears nowhere upstream (no header, no body) and nowhere in the logs. */
export function checkNoClientKey(t: Test, h: Harness, key: string): void {
  const token = key.slice(key.lastIndexOf('_') + 1);
  const leaks: string[] = [];
  for (const r of h.sim.received) {
    for (const [name, v] of Object.entries(r.headers)) if ([v ?? ''].flat().some((x) => x.includes(token))) leaks.push(`${r.path} header ${name}`);
    if (r.body.includes(token)) leaks.push(`${r.path} body`);
  }
  t.ok(h.sim.received.length > 1, 'requests went upstream');
  t.strictSame(leaks, [], 'the client key went nowhere upstream');
  t.notOk(h.logText().includes(token), 'the logs carry no client key');
}

// ---------------------------------------------------------------------------------------------
// The client side

export interface Call {
  url: string;
  /** The request body and headers exactly as the client sent them. */
  body: string;
  sent: Headers;
  /** The response headers and body exactly as the client received them from sluice. */
  headers: Headers;
  bytes: Promise<Buffer>;
}

/** A fetch for an SDK that keeps what it sent and a copy of the raw bytes it got back. */
export function recordingFetch() {
  const calls: Call[] = [];
  const f = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const res = await fetch(input, init);
    const [mine, theirs] = res.body ? res.body.tee() : [null, null];
    const bytes = mine ? new Response(mine).arrayBuffer().then((b) => Buffer.from(b)) : Promise.resolve(Buffer.alloc(0));
    bytes.catch(() => {}); // a stream that fails mid-way is the SDK's to report
    calls.push({
      url: String(input instanceof Request ? input.url : input),
      body: typeof init?.body === 'string' ? init.body : '',
      sent: new Headers(init?.headers),
      headers: res.headers,
      bytes,
    });
    return new Response(theirs, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
  return { fetch: f, calls };
}

/** A finished response: its text, and that text parsed when it is JSON (undefined when not). */
export interface Reply { status: number; headers: Headers; text: string; json: any }

export async function readReply(res: Response): Promise<Reply> {
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

// ---------------------------------------------------------------------------------------------
// The gateway side

/** Wraps `store.insertAudit` and returns a wait for every audit write started so far. */
export function trackAudits(store: Store): () => Promise<void> {
  const pending: Promise<unknown>[] = [];
  const insertAudit = store.insertAudit.bind(store);
  store.insertAudit = (rows: AuditRow[]) => {
    const p = insertAudit(rows);
    pending.push(p);
    return p;
  };
  return async () => {
    await Promise.all(pending);
  };
}

/** A profile whose rate limits and budget never get in the way of many requests in a row. */
const ROOMY = `  roomy:
    default_tier: fast
    router: sim
    budget: { daily_usd: 100000, monthly_usd: 1000000 }
    rate_limits: { per_key_per_minute: 1000000, per_user_per_minute: 1000000 }
`;

/** A harness with the roomy profile added, a key of it, and the gateway's port. */
export async function roomyHarness(t: Test, opts: HarnessOptions = {}): Promise<{ h: Harness; key: string; port: number }> {
  const h = await startHarness(t, { extraProfiles: ROOMY, ...opts, env: { SLUICE_UPSTREAM_KEY_ROOMY: 'sk-or-v1-roomyroomyroomyroomyroomyroomyroomyroomyroomyroomyroomy03', ...opts.env } });
  return { h, key: await h.key('roomy'), port: Number(new URL(h.url).port) };
}
