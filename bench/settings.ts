// The benchmark's settings (bench/run.ts and its parts): command-line options, BENCH_* variables and
// the constants every part shares. Reading them has no side effect beyond parsing argv and env.

import { execFileSync } from 'node:child_process';
import { resolve } from 'node:path';

// The checkout, the bench's upstream key and its log line: the same ones bench/streams.ts and bench/soak.ts use.
export { log, ROOT } from './children.ts';
export { UPSTREAM_KEY } from './procs.ts';
export const PG_ADMIN_URL = process.env.BENCH_PG_URL ?? 'postgres://root@127.0.0.1:5432/postgres';
export const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
export const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
/** Long enough for V8 to optimise the hot path (the first seconds after a start run ~2× slower). */
export const WARMUP_SECONDS = Number(option('warmup') ?? process.env.BENCH_WARMUP_SECONDS ?? 5);
/** Each measurement is cut into this many slices, taken in turn across the targets. */
export const ROUNDS = Math.max(1, Number(process.env.BENCH_ROUNDS ?? 5));
/** Open-loop rates of the latency measurement (req/s). */
export const LATENCY_RATES = [200, 1000] as const;
export const LATENCY_RATE = LATENCY_RATES[0];
export const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

export type StoreKind = 'sqlite' | 'postgres';

export function option(name: string): string | undefined {
  const eq = process.argv.find((a) => a.startsWith(`--${name}=`));
  if (eq) return eq.slice(name.length + 3);
  const i = process.argv.indexOf(`--${name}`);
  return i === -1 ? undefined : process.argv[i + 1];
}

/** `--name N`: a number of at least `min`, `dflt` when absent; anything else stops the run with a message. */
export function numberOption(name: string, dflt: number, min = 0): number {
  const v = option(name);
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n < min) throw new Error(`--${name} must be a number ≥ ${min}, got "${v}"`);
  return n;
}

/** `--profile DIR`: sluice and the floors run under `node --cpu-prof`, one .cpuprofile per process in DIR. */
export const PROFILE_DIR = ((d) => (d ? resolve(d) : undefined))(option('profile') ?? process.env.BENCH_PROFILE_DIR);
/**
 * `--pin` (BENCH_PIN=1): the server being measured gets the last CPU to itself and every other
 * process (sim, load generator, idle servers) shares the rest, re-pinned before each slice with
 * `taskset -a`. Steadier figures on a small shared machine; off by default.
 */
export const PIN = process.argv.includes('--pin') || process.env.BENCH_PIN === '1';
/** `--trace`: one more sluice, on the first store, with traces on at ratio 1 to a local OTLP sink (bench/otlp-sink.ts). */
export const TRACE = process.argv.includes('--trace') || process.env.BENCH_TRACE === '1';
/** `--caps`: one more sluice whose key has caps and whose profile caps sessions (the team budget's extra counters). */
export const CAPS = process.argv.includes('--caps') || process.env.BENCH_CAPS === '1';
/** `--only chat-2k,stream-20`: a subset of the scenarios (for profiling one of them). */
export const ONLY = (option('only') ?? process.env.BENCH_ONLY)?.split(',').filter(Boolean);

export function parseStores(): StoreKind[] {
  const v = option('store') ?? process.env.BENCH_STORE ?? 'sqlite';
  if (v === 'sqlite' || v === 'embedded') return ['sqlite'];
  if (v === 'postgres') return ['postgres'];
  if (v === 'both') return ['sqlite', 'postgres'];
  process.stderr.write(`--store must be sqlite (embedded), postgres or both, got "${v}"\n`);
  process.exit(2);
}

