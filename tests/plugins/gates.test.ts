// The gate plugins on their own, each on a hand-made context of the phase it needs, over the real
// admission unit (memory counters) and a real budget on a SQLite store: ip-block, allowlist,
// profile-check, the two rate limits and the budget step. What each refuses, with which catalogue
// error, and what each leaves in the context for the next.

import type { IncomingMessage } from 'node:http';
import t, { type Test } from 'tap';
import { Admission } from '../../lib/admission.ts';
import { Budget } from '../../lib/budget.ts';
import { compileIpList } from '../../lib/client-ip.ts';
import type { Config, Profile } from '../../lib/config.ts';
import type { AuthedKey, ReadCtx } from '../../lib/context.ts';
import { MemoryCounters } from '../../lib/counters/memory.ts';
import type { Route } from '../../lib/routes.ts';
import type { Deps } from '../../lib/deps.ts';
import { openStore } from '../../lib/store/open.ts';
import { allowlist } from '../../plugins/allowlist.ts';
import { budget } from '../../plugins/budget.ts';
import { ipBlock } from '../../plugins/ip-block.ts';
import { profileCheck } from '../../plugins/profile-check.ts';
import { endUserRateLimit, keyRateLimit } from '../../plugins/rate-limit.ts';

const PROFILE: Profile = {
  name: 'dev', default_tier: 'fast', router: 'sim', budget: { daily_usd: 1, monthly_usd: 10 }, l2_cache: false,
  rate_limits: { per_key_per_minute: 4, per_user_per_minute: 2 },
} as Profile;
const ROUTER = { name: 'sim', url: new URL('http://127.0.0.1:9/') };

function key(id: number, allow?: string[]): AuthedKey {
  return { row: { id, prefix: `sluice_dev_…${id}`, profile: 'dev' } as AuthedKey['row'], allow: allow && compileIpList(allow) };
}

/** A context at the read phase (every field the gates read), for `route` from `ip`. */
function ctx(o: { ip?: string; key?: AuthedKey; endUser?: string | null; route?: Route } = {}): ReadCtx {
  return {
    id: 'unit', req: { headers: {} } as IncomingMessage, res: {} as ReadCtx['res'], route: (o.route ?? 'chat') as ReadCtx['route'], dialect: 'chat', t0: 0,
    ip: o.ip ?? '192.0.2.1', key: o.key ?? key(1), profile: PROFILE, router: ROUTER, upstreamKey: 'sk', raw: Buffer.alloc(0), body: { model: 'm' },
    stream: false, endUser: o.endUser ?? null, session: null, run: null, requestedModel: 'm', tier: null, model: null,
    degradation: 'none', budget: null, removed: [], adjusted: [],
  };
}

async function setup(t: Test) {
  const counters = new MemoryCounters();
  t.teardown(() => counters.close());
  const store = await openStore({ dataDir: t.testdir() });
  t.teardown(() => store.close());
  const clock = { now: Date.parse('2026-03-10T12:00:00Z') };
  const spend = new Budget({ counters, store, now: () => clock.now });
  const admission = new Admission({ counters, budget: spend });
  const audits: string[] = [];
  const deps = {
    admission, budget: spend, counters,
    config: { profiles: new Map([['dev', PROFILE]]), routers: new Map([['sim', ROUTER]]) } as unknown as Config,
    upstreamKeys: new Map([['dev', 'sk-or-v1-dev']]),
    async authFailure(c: ReadCtx, outcome: string) {
      audits.push(outcome);
      await admission.countAuthFailure(c.ip);
    },
  } as unknown as Deps;
  return { deps, admission, spend, audits, store };
}

t.test('ip-block: an address this process saw blocked is refused first; /v1/models reads the window', async (t) => {
  const { deps, admission } = await setup(t);
  const plugin = ipBlock(deps);
  t.equal(await plugin.run(ctx()), undefined, 'a fresh address passes at once, without a promise');
  for (let i = 0; i < 20; i++) await admission.countAuthFailure('192.0.2.66');
  t.throws(() => plugin.run(ctx({ ip: '192.0.2.66' })), { code: 'ip_blocked', status: 429 });
  const models = plugin.run(ctx({ ip: '192.0.2.67', route: 'models' }));
  t.type(models, Promise, '/v1/models reads the window (no later counted step does)');
  await models;
  for (let i = 0; i < 19; i++) await admission.countAuthFailure('192.0.2.68');
  await plugin.run(ctx({ ip: '192.0.2.68', route: 'models' }));
  t.pass('19 failures: still served');
});

t.test('allowlist: an address outside the key\'s list is refused, audited and counted', async (t) => {
  const { deps, audits, admission } = await setup(t);
  const plugin = allowlist(deps);
  t.equal(plugin.run(ctx({ key: key(2, ['198.51.100.0/24']), ip: '198.51.100.9' })), undefined, 'inside: passes without a promise');
  t.equal(plugin.run(ctx({ key: key(2) })), undefined, 'no list: any address');
  await t.rejects(Promise.resolve(plugin.run(ctx({ key: key(2, ['198.51.100.0/24']), ip: '203.0.113.5' }))), { code: 'ip_not_allowed', status: 403 });
  t.same(audits, ['ip_not_allowed']);
  t.equal((await admission.failures('203.0.113.5')).count, 1, 'one failure toward the IP block');
});

t.test('profile-check: a removed profile is 403, a missing upstream key 503; otherwise the profile is filled in', async (t) => {
  const { deps } = await setup(t);
  const c = ctx();
  c.profile = null as unknown as Profile;
  profileCheck(deps).run(c);
  t.equal(c.profile, PROFILE);
  t.equal(c.router, ROUTER);
  t.equal(c.upstreamKey, 'sk-or-v1-dev');
  const gone = ctx({ key: { ...key(3), row: { ...key(3).row, profile: 'gone' } } });
  t.throws(() => profileCheck(deps).run(gone), { code: 'profile_removed', status: 403 });
  t.throws(() => profileCheck({ ...deps, upstreamKeys: new Map() }).run(ctx()), { code: 'upstream_key_missing', status: 503 });
});

t.test('rate limits: the key window counted after the body, refused from memory before the next body; end users apart', async (t) => {
  const { deps } = await setup(t);
  const before = keyRateLimit(deps);
  const after = endUserRateLimit(deps);
  for (let i = 0; i < 4; i++) {
    t.equal(before.run(ctx({ key: key(4) })), undefined);
    t.equal(after.run(ctx({ key: key(4) })), undefined, `request ${i + 1} of 4`);
  }
  t.throws(() => after.run(ctx({ key: key(4) })), { code: 'rate_limit_exceeded', status: 429 }, 'the fifth is over the key\'s 4');
  t.throws(() => before.run(ctx({ key: key(4) })), { code: 'rate_limit_exceeded' }, 'and the next is refused before its body');
  t.equal(before.run(ctx({ key: key(5) })), undefined, 'another key is its own window');
  t.equal(after.run(ctx({ key: key(5), endUser: 'u1' })), undefined);
  t.equal(after.run(ctx({ key: key(5), endUser: 'u1' })), undefined);
  t.throws(() => after.run(ctx({ key: key(5), endUser: 'u1' })), { code: 'rate_limit_exceeded' }, 'an end user over its 2');
  t.equal(after.run(ctx({ key: key(5), endUser: 'u2' })), undefined, 'another end user of the key goes on');
});

t.test('rate limit after the body: a blocked address is refused there too (a block counted elsewhere)', async (t) => {
  const { deps, admission } = await setup(t);
  for (let i = 0; i < 20; i++) await admission.countAuthFailure('192.0.2.99');
  t.throws(() => endUserRateLimit(deps).run(ctx({ ip: '192.0.2.99' })), { code: 'ip_blocked' });
});

t.test('budget: normal, then the stages from the spend, then 429 with the reset', async (t) => {
  const { deps, spend } = await setup(t);
  const plugin = budget(deps);
  const at = async (usd: number) => {
    await spend.add('dev', usd, Date.parse('2026-03-10T12:00:00Z'));
    const c = ctx();
    await plugin.run(c);
    return c.degradation;
  };
  t.equal(await at(0), 'none');
  t.equal(await at(0.7), 'fast-only', '70 % of the day');
  t.equal(await at(0.15), 'max-tokens', '85 %');
  await spend.add('dev', 0.15, Date.parse('2026-03-10T12:00:00Z'));
  const refused = await (async () => plugin.run(ctx()))().then(() => undefined, (e) => e);
  t.match(refused, { code: 'budget_exhausted', status: 429 });
  t.equal(refused.headers['retry-after'], String(12 * 3600), 'until midnight UTC');
});
