// Key lookups by sha256 through a short in-memory cache (spec step 4): a hit costs a Map read,
// a miss one store query plus a fire-and-forget `last_used_at` update. Unknown hashes are cached
// too, so a flood of made-up keys cannot reach the store; the cache is bounded (oldest evicted).
// A revocation or expiry therefore takes effect within `ttlMs` in every running process.
// Lookups of one hash in flight at once share one query: when a busy key's entry expires, the
// requests arriving during its lookup's round trip (a burst: hundreds) wait for that one.

import { compileIpList } from './client-ip.ts';
import type { AuthedKey } from './context.ts';
import type { KeyRow, Store } from './store/store.ts';

interface Entry { key: AuthedKey | null; until: number }

export class KeyCache {
  private readonly entries = new Map<string, Entry>();
  /** Lookups on their way to the store, by hash. */
  private readonly inflight = new Map<string, Promise<AuthedKey | null>>();
  private readonly store: Store;
  private readonly ttlMs: number;
  private readonly max: number;
  private readonly now: () => number;
  private readonly onTouchError: (err: unknown) => void;

  constructor(opts: { store: Store; now: () => number; ttlMs?: number; max?: number; onTouchError: (err: unknown) => void }) {
    this.store = opts.store;
    this.now = opts.now;
    this.ttlMs = opts.ttlMs ?? 60_000;
    this.max = opts.max ?? 50_000;
    this.onTouchError = opts.onTouchError;
  }

  /** Hashes held (known keys and unknown ones), for the board's health section. */
  get size(): number {
    return this.entries.size;
  }

  /**
   * Caches the keys of `rows` used at or after `usedSince` (ms), as a lookup would: a new process's
   * first requests then find their key here, not in the store. At most the cache's bound; returns
   * how many were cached. Nothing is touched (`last_used_at` moves on the next miss, a TTL later).
   */
  prime(rows: readonly KeyRow[], usedSince: number): number {
    const now = this.now();
    let n = 0;
    for (const row of rows) {
      if (n >= this.max) break;
      if (row.last_used_at === null || Date.parse(row.last_used_at) < usedSince) continue;
      this.entries.set(row.key_hash, { key: { row, allow: row.ip_allow ? compileIpList(row.ip_allow.split(',')) : undefined }, until: now + this.ttlMs });
      n++;
    }
    return n;
  }

  /** The cached answer for this hash while it is fresh (null: known unknown), else undefined: no promise on a hit. */
  peek(hash: string): AuthedKey | null | undefined {
    const hit = this.entries.get(hash);
    return hit && hit.until > this.now() ? hit.key : undefined;
  }

  /** The key for this hash, or null when the store has none. Throws only when the store fails. */
  async lookup(hash: string): Promise<AuthedKey | null> {
    const now = this.now();
    const hit = this.entries.get(hash);
    if (hit && hit.until > now) return hit.key;
    let pending = this.inflight.get(hash);
    if (!pending) {
      pending = this.load(hash, now, hit).finally(() => this.inflight.delete(hash));
      this.inflight.set(hash, pending);
    }
    return pending;
  }

  /** One store query for the hash (and one touch of a known key); caches the answer. */
  private async load(hash: string, now: number, hit: Entry | undefined): Promise<AuthedKey | null> {
    let key: AuthedKey | null;
    try {
      const row = await this.store.keyByHash(hash);
      key = row ? { row, allow: row.ip_allow ? compileIpList(row.ip_allow.split(',')) : undefined } : null;
    } catch (err) {
      // The store is away: a key seen before keeps working on its last known state (docs/operation.md, faults).
      if (hit) return hit.key;
      throw err;
    }
    if (key) {
      const at = new Date(now).toISOString();
      key.row.last_used_at = at;
      this.store.touchKey(key.row.id, at).catch(this.onTouchError);
    }
    if (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    this.entries.delete(hash);
    this.entries.set(hash, { key, until: now + this.ttlMs });
    return key;
  }
}
