// The simulated router's managed keys: by hash and by secret, and the secrets of deleted keys,
// which are refused from then on. Only state: the management routes (management.ts) read and
// change it; this file answers nothing and imports no route.

import type { LimitReset } from './usage.ts';

export interface ManagedKey {
  secret: string;
  hash: string;
  name: string;
  label: string;
  disabled: boolean;
  limit: number | null;
  limit_reset: LimitReset;
  include_byok_in_limit: boolean;
  created_at: string;
  updated_at: string | null;
  expires_at: string | null;
}

/** The managed keys, by hash and by secret, and the secrets of deleted keys (refused from then on). */
export class Keyring {
  byHash = new Map<string, ManagedKey>();
  bySecret = new Map<string, ManagedKey>();
  #deleted = new Set<string>();

  add(k: ManagedKey): void {
    this.byHash.set(k.hash, k);
    this.bySecret.set(k.secret, k);
  }

  remove(k: ManagedKey): void {
    this.byHash.delete(k.hash);
    this.bySecret.delete(k.secret);
    this.#deleted.add(k.secret);
  }

  isDeleted(secret: string): boolean {
    return this.#deleted.has(secret);
  }
}
