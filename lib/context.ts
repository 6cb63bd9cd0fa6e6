// The per-request context that plugins read and fill in, and the Plugin contract.
// A plugin decides: it sets fields here or throws a GatewayError; it never writes to the response.
// The context carries no secrets beyond `upstreamKey`, which only the proxy core reads.

import { randomFillSync } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { BlockList } from 'node:net';
import type { Profile, Router } from './config.ts';
import type { Dialect } from './errors.ts';
import type { Degradation, KeyRow } from './store/store.ts';

export type Route = 'chat' | 'messages' | 'responses' | 'count_tokens' | 'models';

export interface AuthedKey {
  row: KeyRow;
  /** ip_allow compiled once per key lookup; undefined = any address. */
  allow: BlockList | undefined;
}

export interface Ctx {
  readonly id: string;
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly route: Route;
  readonly dialect: Dialect;
  /** performance.now() when the request arrived. */
  readonly t0: number;
  ip: string;
  key?: AuthedKey;
  profile?: Profile;
  router?: Router;
  upstreamKey?: string;
  /** The body as received, and parsed; `changed` says whether it must be re-serialised. */
  raw?: Buffer;
  body?: Record<string, any>;
  changed: boolean;
  stream: boolean;
  endUser: string | null;
  session: string | null;
  run: string | null;
  requestedModel: string | null;
  tier: string | null;
  model: string | null;
  degradation: Degradation;
  /** What the sanitizer removed, for the request's log line. */
  removed: string[];
  /** What model resolution changed to keep the request valid and in budget (docs/rewrites.md), for the same line. */
  adjusted: string[];
}

export interface Plugin {
  readonly name: string;
  /** The routes the plugin runs on; resolved per route at start-up so the hot path skips the rest. */
  readonly routes: readonly Route[];
  run(ctx: Ctx): void | Promise<void>;
}

export const PROXIED: readonly Route[] = ['chat', 'messages', 'responses', 'count_tokens'];
export const ALL_V1: readonly Route[] = ['chat', 'messages', 'responses', 'count_tokens', 'models'];

// Request ids are UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then randomness, with a
// counter in rand_a so ids of one millisecond still sort by arrival. Time-ordered ids make the
// row inserts append to the end of the primary-key index instead of landing on a random page.
const pool = Buffer.alloc(16 * 256);
let poolAt = pool.length;
let lastMs = 0;
let seq = 0;

export function newRequestId(now = Date.now()): string {
  if (poolAt === pool.length) {
    randomFillSync(pool);
    poolAt = 0;
  }
  const b = pool.subarray(poolAt, (poolAt += 16));
  seq = now === lastMs ? (seq + 1) & 0xfff : b[6] & 0x7f; // start low, so a busy millisecond rarely wraps
  lastMs = now;
  b.writeUIntBE(now, 0, 6);
  b[6] = 0x70 | (seq >> 8);
  b[7] = seq & 0xff;
  b[8] = 0x80 | (b[8] & 0x3f);
  const h = b.toString('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}
