// Preloaded into the measured servers by bench/run.ts (`node --import ./bench/eld-probe.ts …`), so
// the gateway itself exposes nothing new: it keeps a monitorEventLoopDelay histogram and, on
// SIGUSR2, appends { p99_ms, max_ms, n } of the delays since the last signal to $BENCH_ELD_FILE
// and starts over. It never touches the server's own state.

import { appendFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const file = process.env.BENCH_ELD_FILE;
if (file) {
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  process.on('SIGUSR2', () => {
    appendFileSync(file, `${JSON.stringify({ p99_ms: h.percentile(99) / 1e6, max_ms: h.max / 1e6, n: h.count })}\n`);
    h.reset();
  });
}
