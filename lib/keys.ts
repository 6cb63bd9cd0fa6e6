// The client key format: `sluice_<profile>_<32 base62 chars>`, its sha256 and its display prefix,
// and a stored key's state (active, revoked, expired). This is the only module that sees a whole
// key besides `keys create` printing it; nothing here logs or stores a key, only its hash and
// prefix leave.

import { hash, randomBytes } from 'node:crypto';

export const KEY_RE = /^sluice_([a-z][a-z0-9-]{0,31})_([A-Za-z0-9]{32})$/;
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/** 32 characters from crypto.randomBytes, rejection-sampled so every character is equally likely. */
export function generateKey(profile: string): string {
  let token = '';
  while (token.length < 32) {
    for (const b of randomBytes(48)) {
      if (b < 248 && token.length < 32) token += ALPHABET[b % 62]; // 248 = 4 × 62: no modulo bias
    }
  }
  return `sluice_${profile}_${token}`;
}

export function hashKey(key: string): string {
  return hash('sha256', key, 'hex'); // one-shot: no Hash object per request
}

export function parseKey(key: string): { profile: string; token: string } | undefined {
  const m = KEY_RE.exec(key);
  return m ? { profile: m[1], token: m[2] } : undefined;
}

/** `sluice_<profile>_…<last 4>`: the only form of a key that logs, rows and the board show. */
export function displayPrefix(profile: string, token: string): string {
  return `sluice_${profile}_…${token.slice(-4)}`;
}

/** The states of a stored key (what `sluice keys list` shows). */
export type KeyState = 'active' | 'revoked' | 'expired';

/** Whether a key has expired at `now` (ms since the epoch): from its `expires_at` instant on. */
export function isExpired(key: { readonly expires_at: string | null }, now: number): boolean {
  return !!key.expires_at && Date.parse(key.expires_at) <= now;
}

/** A stored key's state at `now` (ms since the epoch): revoked wins over expired. */
export function keyState(key: { readonly revoked_at: string | null; readonly expires_at: string | null }, now: number): KeyState {
  if (key.revoked_at) return 'revoked';
  return isExpired(key, now) ? 'expired' : 'active';
}
