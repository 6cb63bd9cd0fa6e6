// The state one simulated router holds across requests, handed to every route: its clock, the
// provisioning key, the managed keys, the per-key usage ledger, the generation records and the
// armed faults. Only index.ts builds it; routes read and change it, never replace its parts.

import type { Faults } from './faults.ts';
import type { Generations } from './generation-log.ts';
import type { Keyring } from './keyring.ts';
import type { Ledger } from './usage.ts';

export interface SimState {
  /** Epoch milliseconds: ids, `created`, usage periods, key expiry, generation delays. */
  now: () => number;
  /** The bearer the management API accepts; undefined: that API always answers 401. */
  provisioningKey: string | undefined;
  keys: Keyring;
  ledger: Ledger;
  generations: Generations;
  faults: Faults;
}
