// Mints a client key for a test through the code of `sluice keys create` (prepareKey, then
// insertKey: the same validation and the same row), and returns the key.

import { insertKey, prepareKey } from '../../cli/keys.ts';
import type { Config } from '../../lib/config.ts';
import type { Store } from '../../lib/store/store.ts';

export function createKey(store: Store, config: Config, opts: { profile: string; name: string; expires?: string; ip?: string[] }, now = Date.now()): Promise<string> {
  return insertKey(store, prepareKey(config, opts, now));
}
