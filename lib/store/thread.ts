// The store as the gateway uses it: the SQLite Store (sqlite.ts) or the Postgres Store
// (postgres.ts) running in a worker thread (worker.ts), reached by messages. Each Store call
// becomes one message and one reply, so nothing of the store's (SQLite's synchronous inserts,
// board queries and checkpoint fsyncs; Postgres's row encoding, rollup aggregation and the
// batch's objects held across a transaction's round trips) runs or collects on the event loop
// that streams responses. The worker keeps the process alive only while a call is waiting. It
// never changes what a Store call means, only where it runs.

import v8 from 'node:v8';
import { Worker } from 'node:worker_threads';
import type { Call, Reply, Target } from './worker.ts';
import { KeyConflictError, type Store } from './store.ts';

function toError(e: Extract<Reply, { ok: false }>['error']): Error {
  // KeyConflictError is part of the Store's contract (keys create relies on it): rebuild it.
  const err = e.name === 'KeyConflictError' ? new KeyConflictError('', '') : new Error();
  err.message = e.message;
  if (e.name !== 'KeyConflictError') err.name = e.name;
  if (e.code !== undefined) (err as NodeJS.ErrnoException).code = e.code;
  return err;
}

/** How long close() waits for the worker to end: the Postgres driver's own end timeout (5 s) and a second. */
const CLOSE_MS = 6000;

/** The worker's young generation: its garbage is row batches, and V8's growth to 32 MiB and more would only add RSS. */
const WORKER_YOUNG_MB = 8;

export function openThreadStore(opened: Target): Store {
  // V8 sizes every isolate's semi-spaces from the process's --max-semi-space-size when it is set
  // (the systemd unit sets 16 MiB for the event loop's isolate) and only otherwise from a worker's
  // resourceLimits: under the unit the worker grew to 2 × 16 MiB like the main isolate. The main
  // isolate sized its heap at start-up, so clearing the flag now reaches only isolates created
  // from here on (this worker), which then take the limit below.
  v8.setFlagsFromString('--max-semi-space-size=0');
  const worker = new Worker(new URL('./worker.ts', import.meta.url), { workerData: opened, resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_MB } });
  worker.unref();
  const waiting = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  let next = 0;
  let dead: Error | undefined;

  function settleAll(err: Error): void {
    dead = err;
    for (const w of waiting.values()) w.reject(err);
    waiting.clear();
    worker.unref();
  }
  worker.on('message', (r: Reply) => {
    const w = waiting.get(r.id);
    if (!w) return;
    waiting.delete(r.id);
    if (waiting.size === 0) worker.unref();
    if (r.ok) w.resolve(r.value);
    else w.reject(toError(r.error));
  });
  // Opening the file failed (or the worker crashed): every call, waiting or later, fails with it.
  worker.on('error', (err) => settleAll(err));
  worker.on('exit', () => settleAll(dead ?? new Error('the SQLite store is closed')));

  function call(method: string, args: unknown[]): Promise<unknown> {
    if (dead) return Promise.reject(dead);
    return new Promise((resolve, reject) => {
      const id = ++next;
      if (waiting.size === 0) worker.ref();
      waiting.set(id, { resolve, reject });
      worker.postMessage({ id, method, args } satisfies Call);
    });
  }

  let closing: Promise<void> | undefined;
  const target = {
    kind: opened.kind,
    /** The worker's V8 heap figures, once it runs (its heap_size_limit shows the young generation it was given). */
    async workerHeap(): Promise<v8.HeapInfo> {
      worker.ref(); // an idle worker is unref'd: the answer must keep the process waiting for it
      try {
        return await worker.getHeapStatistics();
      } finally {
        if (waiting.size === 0) worker.unref();
      }
    },
    close(): Promise<void> {
      // The worker closes its port after closing the store, and so ends on its own; a worker that
      // does not end in time is stopped.
      closing ??= dead ? Promise.resolve() : new Promise<void>((resolve) => {
        const timer = setTimeout(() => void worker.terminate(), CLOSE_MS);
        worker.once('exit', () => {
          clearTimeout(timer);
          resolve();
        });
        call('close', []).catch(() => {});
      });
      return closing;
    },
  };
  // Every other Store method is forwarded by name: the interface has one shape on both sides.
  return new Proxy(target, {
    get(t, prop, receiver) {
      if (prop in t || typeof prop === 'symbol') return Reflect.get(t, prop, receiver);
      if (prop === 'then') return undefined; // not a thenable: `await openStore()` must return the store
      return (...args: unknown[]) => call(prop, args);
    },
  }) as unknown as Store;
}
