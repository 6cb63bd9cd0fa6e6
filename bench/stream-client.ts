// One streamed request, timed the way a model's user feels it: time to first byte, the arrival
// time of every SSE event and the gaps between content deltas, and a digest of the bytes with the
// generation id and `created` stamp normalised (the only parts of a simulated answer that differ
// between two identical requests), so a stream through sluice compares byte for byte with the
// same request sent straight to the router. Used by the stream and soak benchmarks and their
// short CI versions; it never retries and never hides a failure.

import { createHash } from 'node:crypto';
import http from 'node:http';

export type Dialect = 'chat' | 'messages';

export interface StreamSpec {
  /** http://host:port */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** Keep the whole response text (tests); benchmarks keep only the digest. */
  keepText?: boolean;
  /** Stop reading after this many body bytes and close the connection (a client that leaves). */
  abortAfterBytes?: number;
  agent?: http.Agent | false;
  timeoutMs?: number;
  /** Called once the response's headers arrived (the stream is open), before its body. */
  onResponse?: (status: number) => void;
}

export interface StreamResult {
  status: number;
  /** Transport error code, if the exchange failed below HTTP. */
  error?: string;
  /** ms from the request's start to the response's first body byte. */
  ttfb: number;
  /** ms from the request's start to the response's end. */
  total: number;
  bytes: number;
  /** ms between consecutive content deltas (chat `delta.content`, messages `content_block_delta`). */
  gaps: number[];
  deltas: number;
  digest: string;
  generationId: string;
  /** sluice's `x-sluice-request-id` (the stored row's id); '' when absent. */
  requestId: string;
  text?: string;
  /** The client closed the connection itself (abortAfterBytes). */
  aborted: boolean;
}

const CONTENT_CHAT = '"delta":{"content":';
const CONTENT_MESSAGES = 'event: content_block_delta';

/** The digest of a response with the generation id and `created` stamps replaced. */
export function normalisedDigest(text: string, generationId: string): string {
  let t = generationId ? text.split(generationId).join('GEN') : text;
  t = t.replace(/"created":\d+/g, '"created":0');
  return createHash('sha256').update(t).digest('hex');
}

export function streamRequest(spec: StreamSpec): Promise<StreamResult> {
  const url = new URL(spec.origin);
  const body = Buffer.from(spec.body);
  return new Promise((resolve) => {
    const t0 = performance.now();
    let ttfb = NaN;
    let last = NaN;
    const gaps: number[] = [];
    let deltas = 0;
    let bytes = 0;
    let pending = '';
    const parts: string[] = [];
    let status = 0;
    let generationId = '';
    let requestId = '';
    let settled = false;
    let aborted = false;
    const done = (error?: string) => {
      if (settled) return;
      settled = true;
      const text = parts.join('') + pending;
      resolve({
        status, error, ttfb, total: performance.now() - t0, bytes, gaps, deltas,
        digest: normalisedDigest(text, generationId), generationId, requestId, text: spec.keepText ? text : undefined, aborted,
      });
    };
    const req = http.request({
      host: url.hostname, port: url.port, method: 'POST', path: spec.path, agent: spec.agent ?? false,
      headers: { ...spec.headers, 'content-length': String(body.length) },
    }, (res) => {
      status = res.statusCode ?? 0;
      generationId = String(res.headers['x-generation-id'] ?? '');
      requestId = String(res.headers['x-sluice-request-id'] ?? '');
      spec.onResponse?.(status);
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        const now = performance.now();
        if (bytes === 0) ttfb = now - t0;
        bytes += Buffer.byteLength(chunk);
        // Events end with a blank line; each complete event is stamped with this chunk's arrival.
        pending += chunk;
        let cut = pending.indexOf('\n\n');
        while (cut !== -1) {
          const event = pending.slice(0, cut + 2);
          pending = pending.slice(cut + 2);
          parts.push(event);
          if ((event.includes(CONTENT_CHAT) && !event.includes('"role"')) || event.startsWith(CONTENT_MESSAGES)) {
            if (deltas > 0) gaps.push(now - last);
            last = now;
            deltas++;
          }
          cut = pending.indexOf('\n\n');
        }
        if (spec.abortAfterBytes !== undefined && bytes >= spec.abortAfterBytes) {
          aborted = true;
          req.destroy();
          done();
        }
      });
      res.on('end', () => done());
      res.on('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
      res.on('close', () => done(res.complete ? undefined : 'closed before the end'));
    });
    req.setTimeout(spec.timeoutMs ?? 120_000, () => req.destroy(new Error('timeout')));
    req.on('error', (err: NodeJS.ErrnoException) => done(err.code ?? err.message));
    req.end(body);
  });
}

/** The SSE events of a response text: `event` (if named) and `data` of each. */
export function sseEvents(text: string): Array<{ event?: string; data: string }> {
  const out: Array<{ event?: string; data: string }> = [];
  for (const block of text.split('\n\n')) {
    let event: string | undefined;
    const data: string[] = [];
    for (const line of block.split('\n')) {
      if (line.startsWith('event: ')) event = line.slice(7);
      else if (line.startsWith('data: ')) data.push(line.slice(6));
    }
    if (data.length > 0) out.push({ event, data: data.join('\n') });
  }
  return out;
}

/** How a stream ended: complete, or with error events of its dialect (counted), or cut. */
export function streamEnding(dialect: Dialect, text: string): { complete: boolean; errorEvents: number; lastIsError: boolean } {
  const events = sseEvents(text);
  const isError = (e: { event?: string; data: string }) => dialect === 'messages'
    ? e.event === 'error'
    : e.data !== '[DONE]' && e.data.startsWith('{"error"');
  const errorEvents = events.filter(isError).length;
  const meaningful = dialect === 'chat' ? events.filter((e) => e.data !== '[DONE]') : events;
  const lastIsError = meaningful.length > 0 && isError(meaningful[meaningful.length - 1]!);
  const complete = errorEvents === 0 && (dialect === 'chat'
    ? events.at(-1)?.data === '[DONE]'
    : events.at(-1)?.event === 'message_stop');
  return { complete, errorEvents, lastIsError };
}

/** Request path, headers and body of a streamed request in `dialect`, for sluice (key) or the router directly. */
export function streamCall(dialect: Dialect, o: { key: string; direct: boolean; model: string; sim: string; run?: string; user?: string }): Pick<StreamSpec, 'path' | 'headers' | 'body'> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-sim': o.sim };
  if (o.run && !o.direct) headers['x-sluice-run'] = o.run;
  const prefix = o.direct ? '/api' : '';
  if (dialect === 'chat') {
    headers.authorization = `Bearer ${o.key}`;
    const body: Record<string, unknown> = { model: o.model, stream: true, max_tokens: 512, messages: [{ role: 'user', content: 'Write a few sentences.' }] };
    if (o.user) body.user = o.user;
    return { path: `${prefix}/v1/chat/completions`, headers, body: JSON.stringify(body) };
  }
  if (o.direct) headers.authorization = `Bearer ${o.key}`;
  else headers['x-api-key'] = o.key;
  headers['anthropic-version'] = '2023-06-01';
  const body: Record<string, unknown> = { model: o.model, stream: true, max_tokens: 512, messages: [{ role: 'user', content: 'Write a few sentences.' }] };
  if (o.user) body.metadata = { user_id: o.user };
  return { path: `${prefix}/v1/messages`, headers, body: JSON.stringify(body) };
}

/** Percentile of an ascending array (nearest rank). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}
