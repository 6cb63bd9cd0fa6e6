// Work per request grows no faster than the request: each shape a client controls (turns, a
// `models` list, members and entries, a label's length) is grown ×10 and the time of sluice's
// pass over it must grow less than ×30 (a linear pass grows ~×10; the quadratic ones this guards
// grew ×100). Each figure is the best of five runs, the two sizes timed in turns so a busy
// machine slows both alike, and a ratio spoiled by load is measured again (up to three rounds: a
// pass that really grows faster fails every one); a pass under a millisecond at ×10 passes.

import t, { type Test } from 'tap';
import type { ReadCtx } from '../../lib/context.ts';
import { label } from '../../lib/end-user.ts';
import { bodyFromScan, encodeBody } from '../../lib/request-body.ts';
import { scanBody } from '../../plugins/read-body.ts';
import { sanitize } from '../../plugins/sanitize.ts';
import { ctxOf, plugin as modelResolve } from '../helpers/model-resolve.ts';

const GROWTH = 30;

/** One timing of `run` on the input `make` builds (built outside the timing). */
function time<T>(make: () => T, run: (input: T) => unknown): number {
  const input = make();
  const t0 = performance.now();
  run(input);
  return performance.now() - t0;
}

function grows(t: Test, what: string, n: number, make: (n: number) => () => unknown, run: (input: any) => unknown): void {
  run(make(n)()); // warm the code paths first
  // A pass of under a millisecond is within the timer's and the scheduler's noise: it passes.
  const within = (small: number, large: number) => large < Math.max(small * GROWTH, 1);
  let small = Infinity;
  let large = Infinity;
  for (let round = 0; round < 3; round++) {
    small = Infinity;
    large = Infinity;
    for (let i = 0; i < 5; i++) {
      small = Math.min(small, time(make(n), run));
      large = Math.min(large, time(make(n * 10), run));
    }
    if (within(small, large)) break;
  }
  t.ok(within(small, large), `${what}: ×10 the size took ×${(large / small).toFixed(1)} the time (${small.toFixed(2)} → ${large.toFixed(2)} ms)`);
}

/** What read-body and the messages sanitizer do with a body, then its encoding upstream. */
function throughMessages(raw: Buffer): Buffer[] {
  const ctx = { dialect: 'messages', route: 'messages', body: bodyFromScan(raw, scanBody(raw)!), removed: [] } as unknown as ReadCtx;
  sanitize().run(ctx);
  return encodeBody(ctx.body!);
}

t.test('user turns merged after a system turn', async (t) => {
  grows(t, 'turns', 4_000, (n) => () => Buffer.from(JSON.stringify({
    model: 'm', max_tokens: 5, messages: [{ role: 'system', content: 's' }, ...Array.from({ length: n }, (_, i) => ({ role: 'user', content: `w${i}` }))],
  })), throughMessages);
});

t.test('a client models list', async (t) => {
  grows(t, 'models entries', 8_000, (n) => () => ctxOf('chat', {
    model: 'sluice/fast', messages: [], models: Array.from({ length: n }, (_, i) => `acme/m-${i}`),
  }), (ctx: ReadCtx) => modelResolve.run(ctx));
});

t.test('members and entries a body scan records', async (t) => {
  // Objects of 500 members each inside an indexed array: members, entries and values all grow.
  const object = `{${Array.from({ length: 500 }, (_, i) => `"k${i}":0`).join(',')},"role":"user"}`;
  grows(t, 'members', 20, (n) => () => Buffer.from(`{"model":"m","messages":[${Array(n).fill(object).join(',')}]}`),
    (raw: Buffer) => bodyFromScan(raw, scanBody(raw)!));
});

t.test('a label from the client', async (t) => {
  grows(t, 'label length', 100_000, (n) => () => 'x'.repeat(n) + Math.random(), label);
});
