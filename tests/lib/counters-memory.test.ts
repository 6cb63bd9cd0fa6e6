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

t.test('check answers at once, without a promise: the embedded request path waits no tick for its counters', async (t) => {
  const c = new MemoryCounters();
  t.teardown(() => c.close());
  await c.incr('spend', 7, 60);
  const result = c.check([{ bucket: 'b', limit: 1, windowS: 60 }], ['spend', 'missing']);
  t.notOk(result instanceof Promise, 'a plain result');
  t.strictSame(result, { verdicts: [{ allowed: true, count: 1, msLeft: 60_000 }], values: [7, undefined] });
  const again = c.check([{ bucket: 'b', limit: 1, windowS: 60 }]);
  t.notOk(again instanceof Promise);
  t.equal(again.verdicts[0]!.allowed, false, 'and counts: the second point is over the limit of 1');
});
