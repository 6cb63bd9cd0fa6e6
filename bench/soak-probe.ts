// Preloaded into the soak's sluice process only (`node --expose-gc --import bench/soak-probe.ts`),
// so the gateway itself exposes nothing new: on SIGUSR2 it runs a full GC and appends one JSON line
// { ts, heapUsed, rss } to $BENCH_PROBE_FILE. It never touches the gateway's own state.

import { appendFileSync } from 'node:fs';

const file = process.env.BENCH_PROBE_FILE;
const gc = (globalThis as { gc?: () => void }).gc;
if (file && gc) {
  process.on('SIGUSR2', () => {
    gc();
    const m = process.memoryUsage();
    appendFileSync(file, `${JSON.stringify({ ts: Date.now(), heapUsed: m.heapUsed, rss: m.rss })}\n`);
  });
}
