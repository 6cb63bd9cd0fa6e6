// Cost reconciliation (ring 1): a row recorded with an estimated cost that has a generation id is
// looked up at GET /api/v1/generation?id= with its profile's key, from a few seconds after its
// end, with backoff, for a bounded time. The router's figure replaces the estimate in the store,
// and only the process whose update changed the row (Store.applyReconciledCost) corrects the
// budget by the difference (Budget.correction), so it happens once across every gateway on one store.
// Store-driven, so restarts and other processes' rows are picked up; a lookup never throws into a request.

import type { Logger } from 'pino';
import type { Budget } from '../budget.ts';
import type { Config } from '../config.ts';
import type { PendingReconcile, Store } from '../store/store.ts';
import { OnceLog } from './loop.ts';
import { ManagementError, type ManagementClient } from './management.ts';

export const RECONCILE = {
  /** The router answers 404 for a few seconds after a generation: the first lookup waits this long after the row's end. */
  firstLookupMs: 3_000,
  /** Lookups answered "not found" stop this long after the row's end: the row keeps its estimate. */
  giveUpMs: 10 * 60_000,
  /** Rows older than this when first seen (say, from a 0.3.0 store) are abandoned without a lookup. */
  staleMs: 24 * 3_600_000,
  /** Rows looked up per pass. */
  batch: 50,
  /** Lookups in flight at once within a pass. */
  concurrency: 4,
};

/** The wait after a failed lookup: doubling from 2 s, at most 10 s for two minutes, then at most 60 s. */
export function retryDelayMs(attempts: number, ageMs: number): number {
  return Math.min(2_000 * 2 ** Math.min(attempts - 1, 10), ageMs < 120_000 ? 10_000 : 60_000);
}

export interface PassResult {
  reconciled: number;
  deferred: number;
  abandoned: number;
}

export class Reconciler {
  private readonly o: { config: Config; store: Store; client: ManagementClient; budget: Budget; upstreamKeys: Map<string, string>; log: Logger; now: () => number };
  private readonly problems: OnceLog;

  constructor(o: Reconciler['o']) {
    this.o = o;
    this.problems = new OnceLog(o.log);
  }

  /**
   * One pass over the rows due now. Throws when the router is away (unreachable, timing out,
   * 429/5xx): those rows are left as they were, to be looked up when it is back.
   */
  async pass(): Promise<PassResult> {
    const { store, now } = this.o;
    const t = now();
    const result: PassResult = { reconciled: 0, deferred: 0, abandoned: 0 };
    result.abandoned += await store.abandonReconcilesBefore(new Date(t - RECONCILE.staleMs).toISOString());
    const due = (await store.duePendingReconciles(new Date(t).toISOString(), RECONCILE.batch))
      .filter((r) => t >= Date.parse(r.ts) + RECONCILE.firstLookupMs);
    let outage: ManagementError | undefined;
    const queue = [...due];
    const worker = async () => {
      for (let row = queue.shift(); row && !outage; row = queue.shift()) {
        try {
          await this.one(row, t, result);
        } catch (err) {
          if (err instanceof ManagementError && err.outage) outage ??= err;
          else throw err;
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(RECONCILE.concurrency, due.length) }, worker));
    if (outage) throw outage;
    return result;
  }

  private async one(row: PendingReconcile, t: number, result: PassResult): Promise<void> {
    const { config, store, client, budget, upstreamKeys, log } = this.o;
    const profile = config.profiles.get(row.profile);
    const key = upstreamKeys.get(row.profile);
    let cost: number | undefined;
    if (!profile || !key) {
      this.problems.problem(`key:${row.profile}`, 'cost reconciliation: the profile has no upstream key here; its estimated rows keep their estimate', { profile: row.profile });
    } else {
      try {
        cost = await client.generationCost({ router: config.routers.get(profile.router)!.url, profile: row.profile, bearer: key }, row.generation_id);
        this.problems.ok(`lookup:${row.profile}`, 'cost reconciliation: lookups work again for this profile', { profile: row.profile });
      } catch (err) {
        if (!(err instanceof ManagementError) || err.outage) throw err;
        // Refused (401, 403, 400, a record without a cost): counted as a failed lookup.
        this.problems.problem(`lookup:${row.profile}`, 'cost reconciliation: the router refuses generation lookups for this profile', { profile: row.profile, err });
      }
    }
    if (cost === undefined) {
      const attempts = row.reconcile_attempts + 1;
      const age = t - Date.parse(row.ts);
      const giveUp = age >= RECONCILE.giveUpMs;
      await store.deferReconcile(row.id, attempts, giveUp ? null : new Date(t + retryDelayMs(attempts, age)).toISOString());
      if (giveUp) result.abandoned++;
      else result.deferred++;
      return;
    }
    // The budget's counters are looked at before the row changes (see Budget.correction): with
    // another process seeding a missing counter meanwhile, the difference is never counted twice.
    const correct = await budget.correction(row.profile, Date.parse(row.ts)).catch((err) => {
      log.warn({ profile: row.profile, err }, 'cost reconciliation: the budget correction could not be counted');
      return undefined;
    });
    const old = await store.applyReconciledCost(row.id, cost, new Date(t).toISOString());
    if (old === undefined) return; // another process got there first, and corrected the budget
    result.reconciled++;
    log.debug({ req: row.id, profile: row.profile, estimate_usd: old, upstream_usd: cost }, 'cost reconciled with the router');
    // The store holds the right cost now; a counter that misses this correction is raised to the
    // store's sum by the budget's own periodic reconcile (a lowered one stays high until the day ends).
    await correct?.(old, cost)
      .catch((err) => log.warn({ profile: row.profile, err }, 'cost reconciliation: the budget correction could not be counted'));
  }
}
