// Usage readouts (ring 1): GET /api/v1/key with each profile's own upstream key, stored in
// usage_snapshots beside sluice's ledger for the same UTC day (the sum of its recorded cost) and
// the drift between them. Used by `sluice usage snapshot` and by the server's refresh loop, which
// logs a drift once per UTC day and profile. Never sees the provisioning key; never logs a key.

import type { Logger } from 'pino';
import { windows } from '../budget.ts';
import type { Config } from '../config.ts';
import type { Store, UsageSnapshot } from '../store/store.ts';
import { ManagementError, type ManagementClient } from './management.ts';
import { usd } from './provision.ts';

export interface DriftThreshold {
  /** Percent of the router's figure. */
  pct: number;
  usd: number;
}

/** A drift counts when it exceeds both the percentage of the router's figure and the absolute amount. */
export function isDrift(ledger: number, router: number, t: DriftThreshold): boolean {
  const drift = Math.abs(ledger - router);
  return drift > (Math.abs(router) * t.pct) / 100 && drift > t.usd;
}

export interface UsageContext {
  config: Config;
  store: Store;
  client: ManagementClient;
  /** Profile → its upstream key (the environment's SLUICE_UPSTREAM_KEY_<PROFILE>). */
  upstreamKeys: Map<string, string>;
  drift: DriftThreshold;
  now: () => number;
}

/** Reads one profile's usage at the router and stores it with the ledger beside it. */
export async function snapshotProfile(ctx: UsageContext, profile: string): Promise<UsageSnapshot> {
  const key = ctx.upstreamKeys.get(profile);
  if (!key) throw new ManagementError(profile, 'bad_response', 'no upstream key is set for it');
  const p = ctx.config.profiles.get(profile)!;
  const r = await ctx.client.currentKey({ router: ctx.config.routers.get(p.router)!.url, profile, bearer: key });
  const now = ctx.now();
  const w = windows(now);
  const ledger = await ctx.store.spendSince(profile, new Date(w.dayStart).toISOString());
  const snapshot: UsageSnapshot = {
    profile, ts: new Date(now).toISOString(), day: w.day, label: r.label, limit_usd: r.limit, limit_remaining: r.limit_remaining,
    limit_reset: r.limit_reset, usage: r.usage, usage_daily: r.usage_daily, usage_weekly: r.usage_weekly, usage_monthly: r.usage_monthly,
    ledger_day_usd: round6(ledger), drift_usd: round6(ledger - r.usage_daily), drifted: isDrift(ledger, r.usage_daily, ctx.drift),
  };
  await ctx.store.insertUsageSnapshot(snapshot);
  return snapshot;
}

function round6(n: number): number {
  return Math.round(n * 1e6) / 1e6;
}

/** One line for a snapshot, as `sluice usage snapshot` prints it. */
export function describeSnapshot(s: UsageSnapshot): string {
  const sign = s.drift_usd >= 0 ? '+' : '-';
  return `${s.profile}: today ${usd(s.usage_daily)} at the router, ${usd(s.ledger_day_usd)} in the ledger, drift ${sign}${usd(Math.abs(s.drift_usd))}`
    + ` ${s.drifted ? '(DRIFT)' : '(ok)'}; limit ${usd(s.limit_usd)}, remaining ${usd(s.limit_remaining)}`;
}

/** Logs each drifted snapshot once per UTC day and profile (the server's refresh loop). */
export class DriftLog {
  private readonly seen = new Set<string>();
  private readonly log: Logger;

  constructor(log: Logger) {
    this.log = log;
  }

  note(s: UsageSnapshot): void {
    if (!s.drifted) return;
    const k = `${s.day}\n${s.profile}`;
    if (this.seen.has(k)) return;
    // Yesterday's entries are of no further use.
    for (const old of this.seen) if (!old.startsWith(`${s.day}\n`)) this.seen.delete(old);
    this.seen.add(k);
    this.log.warn({ profile: s.profile, day: s.day, ledger_usd: s.ledger_day_usd, router_usd: s.usage_daily, drift_usd: s.drift_usd },
      "ledger and router disagree on today's spend (logged once per day and profile)");
  }
}
