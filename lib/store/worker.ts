// The worker thread that owns the embedded store's SQLite connection (lib/store/sqlite-thread.ts
// starts it). node:sqlite is synchronous: every statement, batch insert, rollup update and WAL
// checkpoint with its fsync runs here, never on the gateway's event loop. It answers one message
// per Store call, in order; it never holds state beyond the open store.

import { parentPort, workerData } from 'node:worker_threads';
import { openSqliteStore } from './sqlite.ts';
import type { Store } from './store.ts';

export interface Call { id: number; method: string; args: unknown[] }
export type Reply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: { name: string; message: string; code?: string } };

const port = parentPort!;
const store = openSqliteStore((workerData as { file: string }).file) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;

port.on('message', async (call: Call) => {
  let reply: Reply;
  try {
    const fn = store[call.method];
    if (typeof fn !== 'function') throw new TypeError(`the store has no method ${call.method}`);
    reply = { id: call.id, ok: true, value: await fn.apply(store, call.args) };
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    reply = { id: call.id, ok: false, error: { name: e.name ?? 'Error', message: e.message ?? String(err), code: e.code } };
  }
  port.postMessage(reply);
  if (call.method === 'close') port.close();
});

export type { Store };
