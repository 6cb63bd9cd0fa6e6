// The worker thread that owns the gateway's store connection (lib/store/thread.ts starts it): the
// SQLite file or the Postgres pool. Every statement, batch insert, rollup aggregation and upsert,
// WAL checkpoint and driver round trip runs here, never on the event loop that streams responses,
// and the objects a write keeps alive across its round trips live and die in this thread's heap.
// It answers one message per Store call (SQLite's in order; Postgres's as each completes) and
// holds no state beyond the open store.

import { parentPort, workerData } from 'node:worker_threads';
import { openPostgresStore } from './postgres.ts';
import { openSqliteStore } from './sqlite.ts';
import type { Store } from './store.ts';

/** What the thread opens: the embedded file or a Postgres URL. */
export type Target = { kind: 'sqlite'; file: string } | { kind: 'postgres'; url: string };
export interface Call { id: number; method: string; args: unknown[] }
export type Reply =
  | { id: number; ok: true; value: unknown }
  | { id: number; ok: false; error: { name: string; message: string; code?: string } };

const port = parentPort!;
const target = workerData as Target;
const store = (target.kind === 'postgres' ? openPostgresStore(target.url) : openSqliteStore(target.file)) as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>;

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
