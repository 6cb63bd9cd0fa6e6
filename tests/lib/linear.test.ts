// Work per request grows no faster than the request: each shape a client controls (turns, a
// `models` list, members and entries, a label's length) is grown ×10 and the time of sluice's
// pass over it must grow less than ×30 (a linear pass grows ~×10; the quadratic ones this guards
// grew ×100). Each figure is the best of five runs, so a busy machine slows both sizes alike;
// a pass that stays under a millisecond at ×10 passes whatever its ratio.

import t, { type Test } from 'tap';
import type { Ctx } from '../../lib/context.ts';
import { label } from '../../lib/end-user.ts';
import { scanJson } from '../../lib/json-scan.ts';
import { bodyFromScan, encodeBody } from '../../lib/request-body.ts';
import { BODY_LIMITS, MAX_DEPTH } from '../../plugins/read-body.ts';
import { sanitize } from '../../plugins/sanitize.ts';
import { ctxOf, plugin as modelResolve } from '../helpers/model-resolve.ts';

const GROWTH = 30;
const WATCH = new Set(['messages', 'tools', 'input']);
const ENTRY_KEYS = ['role', 'type', 'strict', 'defer_loading'];

/** The best of five timings of `run` on the input `make` builds (built outside the timing). */
function best<T>(make: () => T, run: (input: T) => unknown): number {
  let fastest = Infinity;
  for (let i = 0; i < 5; i++) {
    const input = make();
    const t0 = performance.now();
    run(input);
    fastest = Math.min(fastest, performance.now() - t0);
  }
  return fastest;
}

function grows(t: Test, what: string, n: number, make: (n: number) => () => unknown, run: (input: any) => unknown): void {
  run(make(n)()); // warm the code paths first
  const small = best(make(n), run);
  const large = best(make(n * 10), run);
  // A pass of under a millisecond is within the timer's and the scheduler's noise: it passes.
  t.ok(large < Math.max(small * GROWTH, 1), `${what}: ×10 the size took ×${(large / small).toFixed(1)} the time (${small.toFixed(2)} → ${large.toFixed(2)} ms)`);
}

/** What read-body and the messages sanitizer do with a body, then its encoding upstream. */
function throughMessages(raw: Buffer): Buffer[] {
  const scan = scanJson(raw, { maxDepth: MAX_DEPTH, watch: WATCH, entryKeys: ENTRY_KEYS, limits: BODY_LIMITS })!;
  const ctx = { dialect: 'messages', route: 'messages', body: bodyFromScan(raw, scan), changed: false, removed: [] } as unknown as Ctx;
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
  }), (ctx: Ctx) => modelResolve.run(ctx));
});

t.test('members and entries a body scan records', async (t) => {
  // Objects of 500 members each inside an indexed array: members, entries and values all grow.
  const object = `{${Array.from({ length: 500 }, (_, i) => `"k${i}":0`).join(',')},"role":"user"}`;
  grows(t, 'members', 20, (n) => () => Buffer.from(`{"model":"m","messages":[${Array(n).fill(object).join(',')}]}`),
    (raw: Buffer) => bodyFromScan(raw, scanJson(raw, { maxDepth: MAX_DEPTH, watch: WATCH, entryKeys: ENTRY_KEYS, limits: BODY_LIMITS })!));
});

t.test('a label from the client', async (t) => {
  grows(t, 'label length', 100_000, (n) => () => 'x'.repeat(n) + Math.random(), label);
});
