// The stream benchmark's load generator, forked by bench/streams.ts so its event loop and CPU are
// never the gateway's. Jobs over IPC: `streams` opens N streamed requests spread over rampMs (0: a
// burst, all in the same tick) and reports each stream's completeness, digest, time to first byte
// and the gaps between its deltas; `slow` opens N streams whose reader stops for holdMs after the
// first bytes (back-pressure) and then reads on to the end; `mixed` runs the soak's traffic
// (bench/soak-traffic.ts). One connection per request, no pool.

import { runMixed, type MixedOptions } from './soak-traffic.ts';
import { percentile, streamRequest, type StreamSpec } from './stream-client.ts';
import http from 'node:http';

export interface StreamsJob {
  id?: number;
  kind: 'streams';
  spec: Omit<StreamSpec, 'keepText'>;
  n: number;
  rampMs: number;
}

export interface SlowJob {
  id?: number;
  kind: 'slow';
  spec: Omit<StreamSpec, 'keepText'>;
  n: number;
  holdMs: number;
}

export interface MixedJob extends MixedOptions {
  id?: number;
  kind: 'mixed';
}

export interface StreamsResult {
  id: number;
  n: number;
  ok: number;
  /** status or error → count, for every stream that did not complete with 200. */
  failures: Record<string, number>;
  /** digest → streams, and bytes → streams (a byte-for-byte check needs one of each). */
  digests: Record<string, number>;
  bytes: Record<string, number>;
  deltas: Record<string, number>;
  ttfb: { p50: number; p99: number; max: number };
  gap: { p50: number; p99: number; max: number; n: number };
  elapsedMs: number;
}

export interface SlowResult {
  id: number;
  n: number;
  completed: number;
  bytes: number;
}

const count = (o: Record<string, number>, k: string) => (o[k] = (o[k] ?? 0) + 1);

async function streams(job: StreamsJob): Promise<StreamsResult> {
  const t0 = performance.now();
  const runs: Array<Promise<Awaited<ReturnType<typeof streamRequest>>>> = [];
  for (let i = 0; i < job.n; i++) {
    const at = job.rampMs > 0 ? (i * job.rampMs) / job.n : 0;
    runs.push(at === 0 ? streamRequest(job.spec) : new Promise((r) => setTimeout(() => r(streamRequest(job.spec)), at)));
  }
  const results = await Promise.all(runs);
  const failures: Record<string, number> = {};
  const digests: Record<string, number> = {};
  const bytes: Record<string, number> = {};
  const deltas: Record<string, number> = {};
  const ttfb: number[] = [];
  const gaps: number[] = [];
  let ok = 0;
  for (const r of results) {
    if (r.status !== 200 || r.error) count(failures, r.error ?? String(r.status));
    else ok++;
    count(digests, r.digest);
    count(bytes, String(r.bytes));
    count(deltas, String(r.deltas));
    ttfb.push(r.ttfb);
    for (const g of r.gaps) gaps.push(g);
  }
  const st = Float64Array.from(ttfb).sort();
  const sg = Float64Array.from(gaps).sort();
  return {
    id: job.id!, n: job.n, ok, failures, digests, bytes, deltas,
    ttfb: { p50: percentile(st, 50), p99: percentile(st, 99), max: st[st.length - 1] ?? NaN },
    gap: { p50: percentile(sg, 50), p99: percentile(sg, 99), max: sg[sg.length - 1] ?? NaN, n: sg.length },
    elapsedMs: performance.now() - t0,
  };
}

function slow(job: SlowJob): Promise<SlowResult> {
  const url = new URL(job.spec.origin);
  let completed = 0;
  let bytes = 0;
  const one = () => new Promise<void>((resolve) => {
    const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: job.spec.path, headers: job.spec.headers, agent: false }, (res) => {
      let held = false;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        if (held) return;
        held = true;
        res.pause();
        setTimeout(() => res.resume(), job.holdMs);
      });
      res.on('end', () => {
        if (res.statusCode === 200) completed++;
        resolve();
      });
      res.on('error', () => resolve());
    });
    req.on('error', () => resolve());
    req.end(job.spec.body);
  });
  return Promise.all(Array.from({ length: job.n }, one)).then(() => ({ id: job.id!, n: job.n, completed, bytes }));
}

if (process.send) {
  process.on('message', (job: StreamsJob | SlowJob | MixedJob) => {
    const p: Promise<object> = job.kind === 'streams' ? streams(job) : job.kind === 'slow' ? slow(job) : runMixed(job);
    p.then((r) => process.send!({ ...r, id: job.id }), (err: Error) => process.send!({ id: job.id, fatal: err.stack ?? err.message }));
  });
  process.on('disconnect', () => process.exit(0));
  process.send({ ready: true });
}
