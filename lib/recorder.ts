// The recorder: request rows are queued off the request path and written to the store in
// batches, within a second of the response's end. When the store fails, rows wait in memory and
// then in a spool file under the data directory (JSON lines), and are written when the store is
// back. Row ids make every write idempotent, so a replay never writes a row twice. A spool left by
// an earlier process is replayed by the first flush, which the constructor schedules at once.
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
  private readonly closeWaitMs: number;
  private timer?: NodeJS.Timeout;
  private running?: Promise<void>;
  /** The round a flush() called during a running one waits for. */
  private following?: Promise<void>;
  private failing = false;
  private spooled = 0;
  /** A spool file may hold rows: left by an earlier process (unknown until looked at) or by this one. */
  private spoolDirty = true;
  /** Rows written to the store since start (for /health and tests). */
  written = 0;
  /** Emits 'row' (RequestRow) as each row is queued: tests wait on it instead of sleeping. */
  readonly events = new EventEmitter();

  constructor(opts: { store: Store; log: Logger; dataDir: string; flushMs?: number; batch?: number; memoryLimit?: number; closeWaitMs?: number }) {
    this.store = opts.store;
    this.log = opts.log;
    this.dir = opts.dataDir;
    // Half a second and up to 2,000 rows per write: at thousands of requests a second each
    // transaction (and its rollup upserts) carries a thousand rows or more, well inside the second
    // a row may take to reach the store.
    this.flushMs = opts.flushMs ?? 500;
    this.batch = opts.batch ?? 2_000;
    this.memoryLimit = opts.memoryLimit ?? 5_000;
    // How long the final flush may wait for a store that does not answer (a query queued behind a
    // reconnect during an outage) before the rows go to the spool.
    this.closeWaitMs = opts.closeWaitMs ?? 5_000;
  }

  /** Rows spooled by an earlier process come home at start-up, not only once traffic arrives. */
  start(): void {
    void this.flush();
  }

  /** Queues a row; the write happens later, off the request path. */
  add(row: RequestRow): void {
    this.queue.push(row);
    this.events.emit('row', row);
    if (this.queue.length >= this.batch && !this.running) void this.flush();
    else this.schedule();
  }

  /** The next flush: soon normally, every second while the store is failing. */
  private schedule(): void {
    this.timer ??= setTimeout(() => void this.flush(), this.failing ? Math.max(this.flushMs, 1000) : this.flushMs);
  }

  /** True while the last write to the store failed (rows are being held). */
  get storeDown(): boolean {
    return this.failing;
  }

  get pending(): number {
    return this.queue.length + this.spooled;
  }

  /**
   * Writes what is queued now (one round at a time); resolves when it is written. A round already
   * running took its rows before this call's: the call is answered by the round after it.
   */
  flush(): Promise<void> {
    if (this.running) return (this.following ??= this.running.then(() => {
      this.following = undefined;
      return this.flush();
    }));
    clearTimeout(this.timer);
    this.timer = undefined;
    this.running = this.round().finally(() => {
      this.running = undefined;
      // Under load the next round waits for the timer, so each write carries the rows of flushMs
      // (a full batch goes at once): written back to back, the rounds carried the few rows that
      // arrived during one write's round trip (~40 at 4,000 req/s), and every transaction, its
      // commit and its rollup upserts cost the store per row what they cost per batch.
      // Retry while anything is held, in memory or on disk (a failed replay included).
      if (this.queue.length >= this.batch && !this.failing && !this.following) void this.flush();
      else if (this.queue.length > 0 || this.spoolDirty) this.schedule();
    });
    return this.running;
  }

  private async round(): Promise<void> {
    if (!(await this.writeQueue())) return;
    if (this.spoolDirty) await this.replay();
  }

  /** Writes the rows queued when it starts, in batches; false when the store failed (the rest stays queued). */
  private async writeQueue(): Promise<boolean> {
    // Rows queued meanwhile wait for the next round.
    let left = this.queue.length;
    while (left > 0) {
      const rows = this.queue.slice(0, Math.min(left, this.batch));
      try {
        await this.store.insertRequests(rows);
      } catch (err) {
        if (!this.failing) this.log.error({ err, pending: this.queue.length }, 'store unreachable; request rows are held until it returns');
        this.failing = true;
        if (this.queue.length > this.memoryLimit) await this.spool();
        return false;
      }
      this.queue.splice(0, rows.length);
      left -= rows.length;
      this.written += rows.length;
      if (this.failing) this.log.info('store reachable again; writing held request rows');
      this.failing = false;
    }
    return true;
  }

  /** Moves every queued row to the spool file. */
  private async spool(): Promise<void> {
    if (this.queue.length === 0) return;
    const rows = this.queue;
    this.queue = [];
    try {
      await mkdir(this.dir, { recursive: true });
      // The leading newline ends a line torn by a crash mid-append, so it cannot swallow the first new row.
      await appendFile(join(this.dir, SPOOL), '\n' + rows.map((r) => JSON.stringify(r)).join('\n') + '\n', { mode: 0o600 });
      this.spooled += rows.length;
      this.spoolDirty = true;
      this.log.warn({ rows: rows.length, file: join(this.dir, SPOOL) }, 'request rows spooled to disk');
    } catch (err) {
      this.queue = rows.concat(this.queue);
      this.log.error({ err }, 'cannot write the spool file; rows stay in memory');
    }
  }

  /** Writes spooled rows (this process's and any left by an earlier one) to the store. */
  private async replay(): Promise<void> {
    // Spooling runs only inside a round or in close() after the last round, never during a replay.
    this.spoolDirty = false;
    let files: string[];
    try {
      files = (await readdir(this.dir)).filter((f) => f === SPOOL || (f.startsWith(`${SPOOL}.`) && f.endsWith('.replaying')));
    } catch {
      return; // no data directory: nothing was ever spooled
    }
    for (const f of files) {
      let file = join(this.dir, f);
      let rows: RequestRow[];
      try {
        if (f === SPOOL) file = await claimSpool(file);
        rows = await readSpool(file);
        // A replay cut short leaves the file; the next one writes it all again, and row ids skip
        // what already landed.
        for (let i = 0; i < rows.length; i += this.batch) await this.store.insertRequests(rows.slice(i, i + this.batch));
        await unlink(file);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue; // another process took this file
        if (!this.failing) this.log.error({ err }, 'spool replay failed; will retry');
        this.failing = true;
        this.spoolDirty = true;
        return;
      }
      this.written += rows.length;
      this.spooled = Math.max(0, this.spooled - rows.length);
      if (this.failing) this.log.info('store reachable again; writing held request rows');
      this.failing = false;
      this.log.info({ rows: rows.length }, 'spooled request rows written');
    }
  }

  /**
   * Final flush at shutdown: what cannot reach the store goes to the spool for the next start. A
   * store that has not answered within closeWaitMs does not hold the shutdown: the rows still
   * queued, those of the write in flight included, are spooled (their ids make a late landing of
   * that write harmless: the replay skips them).
   */
  async close(): Promise<void> {
    let waited: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (waited = setTimeout(resolve, this.closeWaitMs)));
    await Promise.race([this.flush(), late]);
    clearTimeout(waited);
    if (this.queue.length > 0) await this.spool();
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** Renames the live spool file for replay: rows spooled from now on go to a fresh file, never into this one. */
async function claimSpool(file: string): Promise<string> {
  const claimed = `${file}.${process.pid}.${Date.now()}.replaying`;
  await rename(file, claimed);
  return claimed;
}

/** The rows of a spool file; a line torn by a crash mid-append is skipped (that row was never acknowledged). */
async function readSpool(file: string): Promise<RequestRow[]> {
  return (await readFile(file, 'utf8')).split('\n').filter(Boolean).flatMap((line) => {
    try {
      return [JSON.parse(line) as RequestRow];
    } catch {
      return [];
    }
  });
}
