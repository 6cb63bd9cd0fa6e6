// What plugins and the proxy core are built from: configuration, the store, the counters and
// the services around them. Built once by the server at start-up (lib/server.ts); plugins take
// the parts they need when they are constructed, never per request.

import type { Logger } from 'pino';
import type { Admission } from './admission.ts';
import type { AutoRouter } from './auto.ts';
import type { Budget } from './budget.ts';
import type { Catalog } from './catalog.ts';
import type { Config } from './config.ts';
import type { Ctx } from './context.ts';
import type { Counters } from './counters/counters.ts';
import type { KeyCache } from './key-cache.ts';
import type { Recorder } from './recorder.ts';
import type { AuditOutcome } from './store/store.ts';

export interface Deps {
  config: Config;
  counters: Counters;
  /** The IP block, the rate-limit windows, the room for bodies and the spend read (lib/admission.ts). */
  admission: Admission;
  log: Logger;
  /** The clock (ms since the epoch); tests set it to cross midnights and month ends. */
  now: () => number;
  /** Profile name → its upstream key, read from the environment once at start-up. */
  upstreamKeys: Map<string, string>;
  keyCache: KeyCache;
  catalog: Catalog;
  auto: AutoRouter;
  recorder: Recorder;
  budget: Budget;
  /** Records an auth failure (steps 2–5): an audit row and one count toward the IP block. */
  authFailure(ctx: Ctx, outcome: AuditOutcome, prefix: string): Promise<void>;
}
