// The client key format (CONTRACT §1): `sluice_<profile>_<32 base62 chars>`, its sha256 and its
// display prefix. This is the only module that sees a whole key besides `keys create` printing it;
// nothing here logs or stores a key, only its hash and prefix leave.

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
