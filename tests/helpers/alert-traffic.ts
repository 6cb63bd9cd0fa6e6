// Traffic for the alerting tests (tests/alerts/): a profile `alerting` with a budget of 0.01 USD a
// day, moved through its budget stages by requests whose cost the simulated router fixes (each
// reasoning token adds 2.5 µUSD at the fast tier's price), and the rest of what the alerting rules
// read: a router 5xx, a stream the router cuts, auth failures until an address is blocked, a
// refusal of that address, and a usage snapshot (the drift gauge). All of it through a real
// gateway (tests/helpers/gateway.ts); the harness must be started with ALERTING.

import type { Harness, HarnessOptions } from './gateway.ts';
import { generateKey } from '../../lib/keys.ts';

export const ALERTING: Pick<HarnessOptions, 'extraProfiles' | 'env'> = {
  extraProfiles: `  alerting:
    default_tier: fast
    router: sim
    budget: { daily_usd: 0.01, monthly_usd: 1 }
`,
  env: {
    SLUICE_UPSTREAM_KEY_ALERTING: 'sk-or-v1-alertalertalertalertalertalertalertalertalertalertalertalert00',
    // Addresses arrive as X-Forwarded-For from the loopback peer (an IP block needs its own address).
    SLUICE_TRUSTED_PROXIES: '127.0.0.1',
    // The usage refresh on, hourly: ruleTraffic runs a round itself (the loop's own first round
    // comes 5 s after the start).
    SLUICE_USAGE_REFRESH_S: '3600',
  },
};

/** Reasoning tokens that take `alerting` to about 75 % of its day, then 80 %, then 88 % (with the request's own few µUSD). */
export const TO_STAGE_70 = 2990;
export const WITHIN_STAGE_70 = 200;
export const TO_STAGE_85 = 300;

async function chat(h: Harness, key: string | undefined, o: { xsim?: string; stream?: boolean; xff?: string } = {}): Promise<number> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (key) headers.authorization = `Bearer ${key}`;
  if (o.xsim) headers['x-sim'] = o.xsim;
  if (o.xff) headers['x-forwarded-for'] = o.xff;
  const res = await fetch(`${h.url}/v1/chat/completions`, {
    method: 'POST', headers,
    body: JSON.stringify({ model: 'sluice/fast', stream: o.stream ?? false, messages: [{ role: 'user', content: 'spend' }] }),
  });
  await res.arrayBuffer().catch(() => {}); // a cut stream ends in an error here
  return res.status;
}

/** One request of `alerting` costing a few µUSD plus `reasoning` tokens; resolves once its row is recorded. */
export async function spend(h: Harness, key: string, reasoning: number): Promise<number> {
  const before = h.rowCount();
  const status = await chat(h, key, { xsim: `reasoning=${reasoning}` });
  await h.rows(before + 1);
  return status;
}

/** The stage and day ratio `alerting` shows on /metrics now. */
export async function budgetGauges(h: Harness, profile = 'alerting'): Promise<{ stage: number; dayRatio: number }> {
  const text = await (await fetch(`${h.url}/metrics`)).text();
  const value = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  return {
    stage: value(new RegExp(`^sluice_budget_degradation_stage\\{profile="${profile}"\\} (\\S+)$`, 'm')),
    dayRatio: value(new RegExp(`^sluice_budget_spend_ratio\\{profile="${profile}",window="day"\\} (\\S+)$`, 'm')),
  };
}

/** Everything the rules read, besides `alerting` past 70 % (which the caller does with spend()). */
export async function ruleTraffic(h: Harness): Promise<void> {
  const dev = await h.key('dev');
  let rows = h.rowCount();
  if (await chat(h, dev) !== 200) throw new Error('a plain request was not served');
  // The router answers 500: outcome upstream_error, status class 5xx.
  await chat(h, dev, { xsim: 'status=500' });
  // The router cuts a stream after three chunks: outcome upstream_error, status class 2xx.
  await chat(h, dev, { xsim: 'drop-after=3', stream: true });
  await h.rows((rows += 3));
  // Twenty auth failures from one address block it; its next request is refused with ip_blocked.
  for (let i = 0; i < 20; i++) await chat(h, i % 2 ? generateKey('dev') : undefined, { xff: '203.0.113.7' });
  if (await chat(h, dev, { xff: '203.0.113.7' }) !== 429) throw new Error('the address was not blocked');
  // A usage snapshot of every profile with an upstream key: the drift gauge.
  if (!(await h.gateway.upstream.usageLoop!.runOnce())) throw new Error('the usage refresh failed');
}

/** A ratio as the rules' descriptions show it: Prometheus's humanizePercentage, Go's %.4g of the percentage. */
export function percentage(ratio: number): string {
  return `${Number((ratio * 100).toPrecision(4))}%`;
}
