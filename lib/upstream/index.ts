// Ring 1 inside the server: the usage refresh loop (GET /api/v1/key per profile into
// usage_snapshots, drift logged once per day and profile) and the cost reconciliation loop, both
// on the shared Loop scheduler, off the request path, timed by the settings passed in
// (lib/settings.ts). Also keeps what the board's /api/health shows about them (cached: it never
// waits on them).

import type { Logger } from 'pino';
import type { Budget } from '../budget.ts';
import type { Config } from '../config.ts';
import type { Settings } from '../settings.ts';
import type { ReconcileCounts, Store } from '../store/store.ts';
import { Loop, OnceLog, type Timers } from './loop.ts';
import { ManagementClient, ManagementError } from './management.ts';
import { Reconciler } from './reconcile.ts';
import { DriftLog, snapshotProfile } from './usage.ts';

/** Ring 1's settings: the two loops' periods (0 turns a loop off), the management timeout and the drift threshold. */
export type UpstreamSettings = Pick<Settings, 'usageRefreshMs' | 'reconcilePollMs' | 'managementTimeoutMs' | 'driftPct' | 'driftUsd'>;

/** The first usage refresh runs this soon after start (or after one period, when that is shorter). */
const FIRST_REFRESH_MS = 5_000;
/** /health's reconcile counts are re-read after a pass that changed rows, else at most this often. */
const COUNTS_EVERY_MS = 30_000;

export interface UpstreamLoopsOptions {
  config: Config;
  store: Store;
  budget: Budget;
  log: Logger;
  settings: UpstreamSettings;
  now: () => number;
  upstreamKeys: Map<string, string>;
  timers?: Timers;
}

export function createUpstreamLoops(o: UpstreamLoopsOptions) {
  const { settings } = o;
  const client = new ManagementClient({ timeoutMs: settings.managementTimeoutMs });
  const usageCtx = { config: o.config, store: o.store, client, upstreamKeys: o.upstreamKeys, drift: { pct: settings.driftPct, usd: settings.driftUsd }, now: o.now };
  const drift = new DriftLog(o.log);
  const profileTrouble = new OnceLog(o.log);
  const lastSnapshotAt = new Map<string, string>();
  let counts: ReconcileCounts = { pending: 0, reconciled: 0, abandoned: 0 };
  let countsAt = -Infinity;

  /** Every profile with a key, each on its own: one failing profile never holds up the others. */
  async function refreshUsage(): Promise<void> {
    const profiles = [...o.upstreamKeys.keys()];
    const outages: ManagementError[] = [];
    await Promise.all(profiles.map(async (profile) => {
      try {
        const s = await snapshotProfile(usageCtx, profile);
        lastSnapshotAt.set(profile, s.ts);
        profileTrouble.ok(profile, 'usage refresh: works again for this profile', { profile });
        drift.note(s);
      } catch (err) {
        if (err instanceof ManagementError && err.outage) outages.push(err);
        else profileTrouble.problem(profile, 'usage refresh: failed for this profile', { profile, err });
      }
    }));
    // The router away for every profile is an outage of the loop: logged once by it, with backoff.
    if (outages.length > 0 && outages.length === profiles.length) throw outages[0];
    for (const e of outages) profileTrouble.problem(e.profile, 'usage refresh: failed for this profile', { profile: e.profile, err: e.message });
  }

  const reconciler = new Reconciler({ config: o.config, store: o.store, client, budget: o.budget, upstreamKeys: o.upstreamKeys, log: o.log, now: o.now });
  async function reconcile(): Promise<void> {
    let changed = false;
    try {
      const r = await reconciler.pass();
      changed = r.reconciled + r.abandoned > 0;
    } finally {
      const t = o.now();
      if (changed || t - countsAt >= COUNTS_EVERY_MS) {
        countsAt = t;
        counts = await o.store.reconcileCounts();
      }
    }
  }

  const usageLoop = settings.usageRefreshMs > 0 && o.upstreamKeys.size > 0
    ? new Loop({ name: 'usage refresh', log: o.log, everyMs: settings.usageRefreshMs, firstMs: Math.min(FIRST_REFRESH_MS, settings.usageRefreshMs), run: refreshUsage, timers: o.timers })
    : undefined;
  const reconcileLoop = settings.reconcilePollMs > 0
    ? new Loop({ name: 'cost reconciliation', log: o.log, everyMs: settings.reconcilePollMs, firstMs: settings.reconcilePollMs, run: reconcile, timers: o.timers })
    : undefined;

  return {
    usageLoop,
    reconcileLoop,
    reconciler,
    async start(): Promise<void> {
      // What the board and /health show before the first refresh: the newest stored snapshot per profile.
      try {
        for (const s of await o.store.latestUsageSnapshots()) lastSnapshotAt.set(s.profile, s.ts);
        counts = await o.store.reconcileCounts();
        countsAt = o.now();
      } catch (err) {
        o.log.warn({ err }, 'ring 1: the store could not be read at start-up; the loops read it later');
      }
      usageLoop?.start();
      reconcileLoop?.start();
    },
    /** For the board's /api/health. */
    health() {
      return {
        reconcile: { ...counts },
        usage: { refresh_s: settings.usageRefreshMs / 1000, last_snapshot_at: Object.fromEntries([...o.config.profiles.keys()].map((p) => [p, lastSnapshotAt.get(p) ?? null])) },
      };
    },
    async stop(): Promise<void> {
      await Promise.all([usageLoop?.stop(), reconcileLoop?.stop()]);
    },
  };
}

export type UpstreamLoops = ReturnType<typeof createUpstreamLoops>;
