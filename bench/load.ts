// The benchmark's load generator. bench/run.ts forks it, so it never shares an event loop (or a
// CPU reading) with a server under test, and sends it one job at a time over IPC. Closed loop:
// N keep-alive connections, each sending its next request as soon as the previous response has
// ended (throughput). Open loop: requests leave on a fixed schedule whatever the responses do
// (latency, without coordinated omission). node:http with one Agent per job: the cheapest client.

import http from 'node:http';

export interface LoadJob {
  id: number;
  mode: 'closed' | 'open';
  /** http://host:port of the target. */
  origin: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** Closed loop: concurrent connections; open loop: the most sockets it may open. */
  connections: number;
  /** Open loop: requests per second. */
  rate?: number;
  durationMs: number;
  /** Return every response time (ms), so the caller can merge runs before taking percentiles. */
  keepSamples?: boolean;
}

export interface LoadResult {
  id: number;
  sent: number;
  ok: number;
  non2xx: number;
  errors: number;
  /** Status code (or error code) → count, for everything that was not 2xx. */
  failures: Record<string, number>;
  /** The first failing response body (cut), to tell what went wrong. */
  firstFailure: string | null;
  elapsedMs: number;
  rps: number;
  /** Response time percentiles in ms: from the request's start to the last byte of the response. */
  p50: number;
  p90: number;
  p99: number;
  max: number;
  mean: number;
  bytesIn: number;
  samples?: number[];
}

interface Sample {
  status: number;
  error?: string;
  ms: number;
  bytes: number;
  text?: string;
}

function percentile(sorted: Float64Array, p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

export function runJob(job: LoadJob): Promise<LoadResult> {
  const url = new URL(job.origin);
  const body = Buffer.from(job.body);
  const headers = { ...job.headers, 'content-length': String(body.length) };
  const agent = new http.Agent({ keepAlive: true, maxSockets: job.connections, maxFreeSockets: job.connections });
  const latencies: number[] = [];
  const failures: Record<string, number> = {};
  let firstFailure: string | null = null;
  let sent = 0;
  let ok = 0;
  let non2xx = 0;
  let errors = 0;
  let bytesIn = 0;
  let inFlight = 0;

  function send(done: (s: Sample) => void): void {
    sent++;
    inFlight++;
    const t0 = performance.now();
    let finished = false;
    const end = (s: Sample) => {
      if (finished) return;
      finished = true;
      inFlight--;
      done(s);
    };
    const req = http.request({ agent, host: url.hostname, port: url.port, method: 'POST', path: job.path, headers }, (res) => {
      const status = res.statusCode ?? 0;
      let bytes = 0;
      let text: string | undefined;
      res.on('data', (c: Buffer) => {
        bytes += c.length;
        if (status >= 300 && text === undefined) text = c.subarray(0, 300).toString();
      });
      res.on('end', () => end({ status, ms: performance.now() - t0, bytes, text }));
      res.on('error', (err) => end({ status: 0, error: (err as NodeJS.ErrnoException).code ?? err.message, ms: performance.now() - t0, bytes }));
    });
    req.setTimeout(30_000, () => req.destroy(new Error('timeout')));
    req.on('error', (err) => end({ status: 0, error: (err as NodeJS.ErrnoException).code ?? err.message, ms: performance.now() - t0, bytes: 0 }));
    req.end(body);
  }

  function count(s: Sample): void {
    bytesIn += s.bytes;
    if (s.error !== undefined) {
      errors++;
      failures[s.error] = (failures[s.error] ?? 0) + 1;
      firstFailure ??= s.error;
    } else if (s.status < 200 || s.status >= 300) {
      non2xx++;
      failures[String(s.status)] = (failures[String(s.status)] ?? 0) + 1;
      firstFailure ??= `${s.status} ${s.text ?? ''}`;
    } else {
      ok++;
    }
    latencies.push(s.ms);
  }

  return new Promise((resolve) => {
    const t0 = performance.now();
    const deadline = t0 + job.durationMs;
    let closed = false;

    function finish(): void {
      if (closed || inFlight > 0) return;
      closed = true;
      const elapsedMs = performance.now() - t0;
      agent.destroy();
      const sorted = Float64Array.from(latencies).sort();
      let sum = 0;
      for (const v of sorted) sum += v;
      resolve({
        id: job.id, sent, ok, non2xx, errors, failures, firstFailure, elapsedMs,
        rps: (ok + non2xx) / (elapsedMs / 1000),
        p50: percentile(sorted, 50), p90: percentile(sorted, 90), p99: percentile(sorted, 99),
        max: sorted.length ? sorted[sorted.length - 1]! : NaN, mean: sorted.length ? sum / sorted.length : NaN, bytesIn,
        samples: job.keepSamples ? latencies : undefined,
      });
    }

    if (job.mode === 'closed') {
      // Each lane is one connection's worth of back-to-back requests.
      const lane = (s: Sample) => {
        count(s);
        if (performance.now() < deadline) send(lane);
        else finish();
      };
      for (let i = 0; i < job.connections; i++) send(lane);
      return;
    }

    // Open loop: request i is due at t0 + i/rate. Timers fire late by up to a millisecond or so;
    // every request already due leaves at once, so the rate holds on average.
    const interval = 1000 / (job.rate ?? 200);
    let i = 0;
    let allSent = false;
    const onDone = (s: Sample) => {
      count(s);
      if (allSent) finish();
    };
    const tick = () => {
      const now = performance.now();
      while (t0 + i * interval <= now && t0 + i * interval < deadline) {
        send(onDone);
        i++;
      }
      const next = t0 + i * interval;
      if (next < deadline) setTimeout(tick, Math.max(0, next - performance.now()));
      else {
        allSent = true;
        finish();
      }
    };
    tick();
  });
}

// Run as a forked child: take jobs over IPC, answer each with its result; leave with the parent.
if (process.send) {
  process.on('message', (job: LoadJob) => {
    runJob(job).then((r) => process.send!(r), (err: Error) => process.send!({ id: job.id, fatal: err.message }));
  });
  process.on('disconnect', () => process.exit(0));
  process.send({ ready: true });
}
