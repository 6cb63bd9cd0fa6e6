// Runs the Counters contract against MemoryCounters, the embedded default and the fallback a
// process counts on while Redis is away. Each test gets its own instance, closed at teardown.

import t from 'tap';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import { countersContract } from './counters.contract.ts';

countersContract(t, {
  kind: 'memory',
  async open(t) {
    const c = new MemoryCounters();
    t.teardown(() => c.close());
    return c;
  },
});
