// Preloaded into the soak's sluice process only (`node --expose-gc --import bench/soak-probe.ts`),
// so the gateway itself exposes nothing new: on SIGUSR2 it runs a full GC and appends one JSON line
// { ts, heapUsed, heapTotal, newSpace } (the main isolate's heap in use and committed, and the
// young generation's committed part of it) to $BENCH_PROBE_FILE. It never touches the gateway's own state.

import { appendFileSync } from 'node:fs';
import { getHeapSpaceStatistics } from 'node:v8';

const file = process.env.BENCH_PROBE_FILE;
const gc = (globalThis as { gc?: () => void }).gc;
if (file && gc) {
  process.on('SIGUSR2', () => {
    gc();
    const m = process.memoryUsage();
    appendFileSync(file, `${JSON.stringify({ ts: Date.now(), heapUsed: m.heapUsed, heapTotal: m.heapTotal, newSpace: getHeapSpaceStatistics().find((x) => x.space_name === 'new_space')?.space_size ?? 0 })}\n`);
  });
}
