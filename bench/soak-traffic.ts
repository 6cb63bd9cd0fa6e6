// The soak's mixed traffic, at a fixed rate (open loop: requests leave on schedule whatever the
// answers do): both dialects, streamed and not, clients that leave mid-stream, upstream errors
// before and inside a stream (x-sim status= and fail-after=), and bad keys. Each kind has one
// expected answer; anything else is counted as unexpected. A request that reached the upstream
// leaves a row, a bad key does not: `proxied` is the row count the gateway must end up with.

import { streamCall, streamEnding, streamRequest, type Dialect } from './stream-client.ts';

export interface MixedOptions {
  origin: string;
  key: string;
  /** A well-formed key the gateway does not know (401, no row). */
  badKey: string;
  /** Requests per second. */
  rate: number;
  durationMs: number;
  run: string;
}

export interface MixedResult {
  sent: number;
  /** Requests that reached the upstream: one row each. */
  proxied: number;
  byKind: Record<string, number>;
  /** kind → answers that were not the expected one (with the first few described). */
  unexpected: number;
  examples: string[];
}

interface Kind {
  name: string;
  dialect: Dialect;
  stream: boolean;
  sim: string;
  bad?: boolean;
  abortAfterBytes?: number;
  /** The expected answer: a status, and for streams how the stream ends. */
  status: number;
  ending?: 'complete' | 'error-event' | 'aborted';
}

const KINDS: Kind[] = [
  { name: 'chat', dialect: 'chat', stream: false, sim: 'chunks=8', status: 200 },
  { name: 'chat-stream', dialect: 'chat', stream: true, sim: 'chunks=16;chunk-delay-ms=5', status: 200, ending: 'complete' },
  { name: 'messages', dialect: 'messages', stream: false, sim: 'chunks=8', status: 200 },
  { name: 'messages-stream', dialect: 'messages', stream: true, sim: 'chunks=16;chunk-delay-ms=5;tool=get_weather', status: 200, ending: 'complete' },
  { name: 'chat-disconnect', dialect: 'chat', stream: true, sim: 'chunks=50;chunk-delay-ms=20', status: 200, ending: 'aborted', abortAfterBytes: 1 },
  { name: 'chat-upstream-500', dialect: 'chat', stream: false, sim: 'status=500', status: 500 },
  { name: 'messages-fail-mid-stream', dialect: 'messages', stream: true, sim: 'chunks=8;fail-after=3', status: 200, ending: 'error-event' },
  { name: 'bad-key', dialect: 'chat', stream: false, sim: 'chunks=2', status: 401, bad: true },
  { name: 'chat-stream-usage', dialect: 'chat', stream: true, sim: 'chunks=8;usage=choice;reasoning=5', status: 200, ending: 'complete' },
  { name: 'messages-upstream-429', dialect: 'messages', stream: false, sim: 'status=429', status: 429 },
];

async function one(o: MixedOptions, k: Kind, i: number): Promise<string | undefined> {
  const call = streamCall(k.dialect, { key: k.bad ? o.badKey : o.key, direct: false, model: i % 3 ? 'sluice/fast' : 'sluice/agent', sim: k.sim, run: o.run, user: `user-${i % 7}` });
  // Bad keys come from ever new addresses (as the front proxy reports them), as scanners do: one
  // address failing all day would be blocked after 20, and then its good requests too.
  if (k.bad) call.headers['x-forwarded-for'] = `198.18.${(i >> 8) & 255}.${i & 255}`;
  const body = k.stream ? call.body : JSON.stringify({ ...JSON.parse(call.body), stream: false });
  const r = await streamRequest({ origin: o.origin, path: call.path, headers: call.headers, body, keepText: true, abortAfterBytes: k.abortAfterBytes, timeoutMs: 30_000 });
  if (r.status !== k.status) return `${k.name}: status ${r.status} ${r.error ?? ''} ${r.text?.slice(0, 200) ?? ''}`;
  if (k.ending === 'aborted') return r.aborted ? undefined : `${k.name}: not aborted`;
  if (r.error) return `${k.name}: ${r.error}`;
  if (k.ending) {
    const how = streamEnding(k.dialect, r.text!);
    const got = how.complete ? 'complete' : how.errorEvents === 1 && how.lastIsError ? 'error-event' : 'other';
    if (got !== k.ending) return `${k.name}: ended ${got}`;
  }
  return undefined;
}

export function runMixed(o: MixedOptions): Promise<MixedResult> {
  const result: MixedResult = { sent: 0, proxied: 0, byKind: {}, unexpected: 0, examples: [] };
  const pending: Array<Promise<void>> = [];
  const t0 = performance.now();
  const interval = 1000 / o.rate;
  return new Promise((resolve) => {
    let i = 0;
    const tick = () => {
      const now = performance.now();
      // Every request already due leaves now: the rate holds on average even when timers run late.
      while (t0 + i * interval <= now && i * interval < o.durationMs) {
        const k = KINDS[i % KINDS.length]!;
        result.sent++;
        if (!k.bad) result.proxied++;
        result.byKind[k.name] = (result.byKind[k.name] ?? 0) + 1;
        pending.push(one(o, k, i).then((why) => {
          if (why === undefined) return;
          result.unexpected++;
          if (result.examples.length < 5) result.examples.push(why);
        }));
        i++;
      }
      if (i * interval < o.durationMs) setTimeout(tick, Math.max(0, t0 + i * interval - performance.now()));
      else void Promise.all(pending).then(() => resolve(result));
    };
    tick();
  });
}
