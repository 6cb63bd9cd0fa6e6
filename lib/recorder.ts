// The recorder: request rows are queued off the request path and written to the store in
// batches, within a second of the response's end. When the store fails, rows wait in memory and
// then in a spool file under the data directory (JSON lines), and are written when the store is
// back. Row ids make every write idempotent, so a replay never writes a row twice.
// It never throws into a request and never drops a row while it can still hold it somewhere.

import { EventEmitter } from 'node:events';
import { appendFile, readdir, readFile, rename, unlink, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from 'pino';
import type { RequestRow, Store } from './store/store.ts';

const SPOOL = 'requests-spool.jsonl';

export class Recorder {
  private queue: RequestRow[] = [];
  private readonly store: Store;
  private readonly log: Logger;
  private readonly dir: string;
  private readonly flushMs: number;
  private readonly batch: number;
  private readonly memoryLimit: number;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  private failing = false;
  private spooled = 0;
  /** Rows written to the store since start (for /health and tests). */
  written = 0;
  /** Emits 'row' (RequestRow) as each row is queued: tests wait on it instead of sleeping. */
  readonly events = new EventEmitter();

  constructor(opts: { store: Store; log: Logger; dataDir: string; flushMs?: number; batch?: number; memoryLimit?: number }) {
    this.store = opts.store;
    this.log = opts.log;
    this.dir = opts.dataDir;
    this.flushMs = opts.flushMs ?? 250;
    this.batch = opts.batch ?? 500;
    this.memoryLimit = opts.memoryLimit ?? 5_000;
  }

  /** Queues a row; the write happens later, off the request path. */
  add(row: RequestRow): void {
    this.queue.push(row);
    this.events.emit('row', row);
    if (this.queue.length >= this.batch) void this.flush();
    else this.timer ??= setTimeout(() => void this.flush(), this.failing ? Math.max(this.flushMs, 1000) : this.flushMs);
  }

  get pending(): number {
    return this.queue.length + this.spooled;
  }

  /** Writes what is queued (one flush at a time); resolves when this round is done. */
  flush(): Promise<void> {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.running ??= this.round().finally(() => {
      this.running = undefined;
      if (this.queue.length > 0) this.timer ??= setTimeout(() => void this.flush(), this.failing ? 1000 : this.flushMs);
    });
    return this.running;
  }

  private async round(): Promise<void> {
    while (this.queue.length > 0) {
      const rows = this.queue.slice(0, this.batch);
      try {
        await this.store.insertRequests(rows);
      } catch (err) {
        if (!this.failing) this.log.error({ err: (err as Error).message, pending: this.queue.length }, 'store unreachable; request rows are held until it returns');
        this.failing = true;
        if (this.queue.length > this.memoryLimit) await this.spool();
        return;
      }
      this.queue.splice(0, rows.length);
      this.written += rows.length;
      if (this.failing) this.log.info('store reachable again; writing held request rows');
      this.failing = false;
    }
    if (this.spooled > 0 || !this.checkedSpool) await this.replay();
  }

  private checkedSpool = false;

  /** Moves every queued row to the spool file. */
  private async spool(): Promise<void> {
    if (this.queue.length === 0) return;
    const rows = this.queue;
    this.queue = [];
    try {
      await mkdir(this.dir, { recursive: true });
      await appendFile(join(this.dir, SPOOL), rows.map((r) => JSON.stringify(r)).join('\n') + '\n', { mode: 0o600 });
      this.spooled += rows.length;
      this.log.warn({ rows: rows.length, file: join(this.dir, SPOOL) }, 'request rows spooled to disk');
    } catch (err) {
      this.queue = rows.concat(this.queue);
      this.log.error({ err: (err as Error).message }, 'cannot write the spool file; rows stay in memory');
    }
  }

  /** Writes spooled rows (this process's and any left by an earlier one) to the store. */
  private async replay(): Promise<void> {
    this.checkedSpool = true;
    let files: string[];
    try {
      files = (await readdir(this.dir)).filter((f) => f === SPOOL || (f.startsWith(`${SPOOL}.`) && f.endsWith('.replaying')));
    } catch {
      return; // no data directory: nothing was ever spooled
    }
    for (const f of files) {
      let file = join(this.dir, f);
      if (f === SPOOL) {
        // Rename first: rows spooled from now on go to a fresh file, never into the one being replayed.
        const claimed = `${file}.${process.pid}.${Date.now()}.replaying`;
        try {
          await rename(file, claimed);
        } catch {
          continue;
        }
        file = claimed;
      }
      const rows = (await readFile(file, 'utf8')).split('\n').filter(Boolean).flatMap((line) => {
        try {
          return [JSON.parse(line) as RequestRow];
        } catch {
          return []; // a torn last line from a crash: that row was never acknowledged
        }
      });
      try {
        for (let i = 0; i < rows.length; i += this.batch) await this.store.insertRequests(rows.slice(i, i + this.batch));
      } catch (err) {
        this.log.error({ err: (err as Error).message }, 'spool replay failed; will retry');
        this.failing = true;
        return;
      }
      await unlink(file);
      this.written += rows.length;
      this.spooled = Math.max(0, this.spooled - rows.length);
      this.log.info({ rows: rows.length }, 'spooled request rows written');
    }
  }

  /** Final flush at shutdown: what cannot reach the store goes to the spool for the next start. */
  async close(): Promise<void> {
    await this.flush();
    if (this.queue.length > 0) await this.spool();
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
