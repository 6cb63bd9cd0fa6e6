// Preloaded into the measured servers by bench/run.ts (`node --import ./bench/eld-probe.ts …`), so
// the gateway itself exposes nothing new: it keeps a monitorEventLoopDelay histogram and watches
// the main thread's garbage collections; on SIGUSR2 it appends { p99_ms, max_ms, n,
// gc_max_ms, gc_major_ms, heap_mib } for the time since the last signal to $BENCH_ELD_FILE and
// starts over. A loop stall can then be laid against the longest GC pause in the same slice.
// It never touches the server's own state.

import { appendFileSync } from 'node:fs';
import { constants, monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';

const file = process.env.BENCH_ELD_FILE;
if (file) {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  let gcMax = 0;
  let majorMax = 0;
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      if (e.duration > gcMax) gcMax = e.duration;
      const kind = ((e as unknown as { detail?: { kind?: number } }).detail)?.kind;
      if (kind === constants.NODE_PERFORMANCE_GC_MAJOR && e.duration > majorMax) majorMax = e.duration;
    }
  }).observe({ entryTypes: ['gc'] });
  process.on('SIGUSR2', () => {
    const heap = getHeapStatistics();
    appendFileSync(file, `${JSON.stringify({
      p99_ms: h.percentile(99) / 1e6, max_ms: h.max / 1e6, n: h.count,
      gc_max_ms: gcMax, gc_major_ms: majorMax, heap_mib: heap.total_heap_size / 2 ** 20,
    })}\n`);
    h.reset();
    gcMax = 0;
    majorMax = 0;
  });
}
