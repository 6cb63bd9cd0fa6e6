// Holds the sim's faults on demand for the management and readout side: setFault(scope, fault)
// for 'keys', 'key' and 'generation' with each status, hang and delayMs, `times` counting down to
// clear, hang ended by the caller or by close(), bad faults refused; and the same endpoints
// obeying the x-sim status=/hang/delay-ms= directives. Scopes are independent and inference is
// never touched. Hangs are observed through the sim's events; nothing sleeps.

import { once } from 'node:events';
import t from 'tap';
import { startSimulatedRouter, type FaultScope, type SimRequest, type SimulatedRouter } from '../../lib/sim/index.ts';
import { call, chatBody, eventFor, type Call } from './client.ts';

const PROVISIONING = 'sk-or-v1-provisioning-faults';

const sim = await startSimulatedRouter({ provisioningKey: PROVISIONING, generationDelayMs: 0 });
t.teardown(() => sim.close());
const j = (await (await call(sim, '/api/v1/chat/completions', chatBody(), { key: 'sk-or-v1-faults' })).json()) as any;

/** One call in each scope that answers 200 when no fault is armed. */
const PROBES: Record<FaultScope, { path: string; c: Call }> = {
  keys: { path: '/api/v1/keys', c: { key: PROVISIONING } },
  key: { path: '/api/v1/key', c: { key: 'sk-or-v1-faults' } },
  generation: { path: `/api/v1/generation?id=${j.id}`, c: { key: 'sk-or-v1-faults' } },
};
const probe = (router: SimulatedRouter, scope: FaultScope, c: Call = {}): Promise<Response> => call(router, PROBES[scope].path, undefined, { ...PROBES[scope].c, ...c });
const SCOPES: FaultScope[] = ['keys', 'key', 'generation'];

t.test('each status in each scope, in the {error:{code,message}} envelope; 429 with retry-after', async (t) => {
  for (const scope of SCOPES) {
    t.equal((await probe(sim, scope)).status, 200, `${scope}: 200 without a fault`);
    for (const status of [401, 403, 429, 500, 502, 503] as const) {
      sim.setFault(scope, { status });
      const res = await probe(sim, scope);
      t.equal(res.status, status, `${scope} ${status}`);
      t.match(res.headers.get('content-type'), /^application\/json/);
      t.equal(res.headers.get('retry-after'), status === 429 || status === 503 ? '7' : null, `${scope} ${status} retry-after`);
      t.match(await res.json(), { error: { code: status, message: String } });
      t.equal((await probe(sim, scope)).status, status, 'without times it stays');
    }
    sim.setFault(scope, null);
    t.equal((await probe(sim, scope)).status, 200, `${scope}: cleared`);
  }
  sim.setFault('key', { status: 500 });
  t.equal((await call(sim, '/api/v1/auth/key', undefined, { key: 'sk-or-v1-faults' })).status, 500, 'the legacy readout path is in the key scope');
  sim.setFault('key', null);
  sim.setFault('keys', { status: 503 });
  t.equal((await call(sim, `/api/v1/keys/${'f'.repeat(64)}`, undefined, { key: PROVISIONING, method: 'DELETE' })).status, 503, 'every /api/v1/keys* call');
  sim.setFault('keys', null);
});

t.test('scopes are independent and inference is never faulted', async (t) => {
  sim.setFault('keys', { status: 500 });
  t.equal((await probe(sim, 'key')).status, 200);
  t.equal((await probe(sim, 'generation')).status, 200);
  t.equal((await call(sim, '/api/v1/chat/completions', chatBody(), { key: 'sk-or-v1-faults' })).status, 200);
  t.equal((await call(sim, '/api/v1/models', undefined)).status, 200);
  sim.setFault('keys', null);
});

t.test('times: only the next N calls, then the scope clears itself', async (t) => {
  for (const scope of SCOPES) {
    sim.setFault(scope, { status: 502, times: 2 });
    t.equal((await probe(sim, scope)).status, 502);
    t.equal((await probe(sim, scope)).status, 502);
    t.equal((await probe(sim, scope)).status, 200, `${scope}: the third call is served`);
    t.equal((await probe(sim, scope)).status, 200);
  }
  sim.setFault('key', { status: 429, times: 1 });
  sim.setFault('key', { status: 401, times: 1 });
  t.equal((await probe(sim, 'key')).status, 401, 'arming again replaces the fault');
  t.equal((await probe(sim, 'key')).status, 200);
});

t.test('hang: the body is read, nothing is answered; times counts hung calls', async (t) => {
  for (const scope of SCOPES) {
    sim.setFault(scope, { hang: true, times: 1 });
    const id = `hang-${scope}`;
    const ac = new AbortController();
    const requested = eventFor(sim, 'request', id);
    const closed = eventFor(sim, 'closed', id);
    const pending = probe(sim, scope, { id, signal: ac.signal });
    await requested;
    ac.abort();
    await t.rejects(pending, { name: 'AbortError' }, `${scope}: no headers ever came`);
    t.equal((await closed).aborted, true);
    t.equal((await probe(sim, scope)).status, 200, `${scope}: the next call is served`);
  }
});

t.test('hang: close() still closes the sim, and the hung call fails', async (t) => {
  const doomed = await startSimulatedRouter({ provisioningKey: PROVISIONING });
  t.teardown(() => doomed.close());
  doomed.setFault('keys', { hang: true });
  const requested = once(doomed.events, 'request');
  const pending = call(doomed, '/api/v1/keys', undefined, { key: PROVISIONING });
  await requested;
  const closed = once(doomed.events, 'closed');
  await doomed.close();
  const [r] = (await closed) as [SimRequest];
  t.equal(r.aborted, false, 'cut by close(), not a caller abort');
  await t.rejects(pending);
});

t.test('delayMs holds the answer back, then answers normally', async (t) => {
  for (const scope of SCOPES) {
    sim.setFault(scope, { delayMs: 60, times: 1 });
    const started = Date.now();
    const res = await probe(sim, scope);
    t.equal(res.status, 200);
    t.ok(Date.now() - started >= 55, `${scope}: answered after the delay (${Date.now() - started} ms)`);
  }
  sim.setFault('key', { delayMs: 0 });
  t.equal((await probe(sim, 'key')).status, 200);
  sim.setFault('key', null);
  // A caller that leaves during the delay ends the exchange without an answer.
  sim.setFault('generation', { delayMs: 60_000 });
  const ac = new AbortController();
  const requested = eventFor(sim, 'request', 'delayed');
  const closed = eventFor(sim, 'closed', 'delayed');
  const pending = probe(sim, 'generation', { id: 'delayed', signal: ac.signal });
  await requested;
  ac.abort();
  await t.rejects(pending);
  t.equal((await closed).aborted, true);
  sim.setFault('generation', null);
});

t.test('the x-sim header steers the same endpoints: status=, hang, delay-ms=', async (t) => {
  for (const scope of SCOPES) {
    const res = await probe(sim, scope, { sim: 'status=429' });
    t.equal(res.status, 429);
    t.equal(res.headers.get('retry-after'), '7');
    t.same(await res.json(), { error: { code: 429, message: 'Rate limit exceeded' } });
    const started = Date.now();
    t.equal((await probe(sim, scope, { sim: 'delay-ms=40' })).status, 200);
    t.ok(Date.now() - started >= 35, `${scope}: delay-ms held it back`);
    const id = `xsim-hang-${scope}`;
    const ac = new AbortController();
    const requested = eventFor(sim, 'request', id);
    const pending = probe(sim, scope, { id, signal: ac.signal, sim: 'hang' });
    await requested;
    ac.abort();
    await t.rejects(pending, { name: 'AbortError' });
  }
  const ac = new AbortController();
  const requested = eventFor(sim, 'request', 'models-hang');
  const pending = call(sim, '/api/v1/models', undefined, { id: 'models-hang', signal: ac.signal, sim: 'hang' });
  await requested;
  ac.abort();
  await t.rejects(pending, { name: 'AbortError' }, 'the catalog hangs too');
  const models = await call(sim, '/api/v1/models', undefined, { sim: 'status=500' });
  t.equal(models.status, 500);
  t.match(await models.json(), { error: { code: 500, message: String } });
});

t.test('bad faults are refused with a TypeError naming the problem', async (t) => {
  const bad: Array<[unknown, unknown, RegExp]> = [
    ['models', { status: 500 }, /scope/],
    ['keys', { status: 404 }, /status/],
    ['keys', { status: 500, times: 0 }, /times/],
    ['keys', { status: 500, times: 1.5 }, /times/],
    ['keys', { status: 500, hang: true }, /exactly one/],
    ['keys', {}, /exactly one/],
    ['keys', { hang: false }, /hang/],
    ['keys', { delayMs: -1 }, /delayMs/],
    ['keys', { delayMs: Number.POSITIVE_INFINITY }, /delayMs/],
    ['keys', 'status=500', /object/],
  ];
  for (const [scope, fault, message] of bad) {
    t.throws(() => sim.setFault(scope as FaultScope, fault as any), { name: 'TypeError', message }, JSON.stringify([scope, fault]));
  }
  t.equal((await probe(sim, 'keys')).status, 200, 'a refused fault arms nothing');
});
