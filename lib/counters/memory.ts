// Counters in process memory: the embedded default, and what one process falls back to while
// Redis is away. Limits are rate-limiter-flexible's RateLimiterMemory (the same fixed windows as
// the Redis backing); plain counters live in a Map with lazy expiry and an unref'd sweep.

import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { Check, CheckResult, Counters, Verdict } from './counters.ts';
import { Refusals } from './refusals.ts';

interface Entry { value: number | string; expiresAt: number }

export class MemoryCounters implements Counters {
  readonly kind = 'memory' as const;
  readonly degraded = false;
  private readonly limiters = new Map<string, RateLimiterMemory>();
  private readonly entries = new Map<string, Entry>();
  private readonly sweep: NodeJS.Timeout;
  private readonly refusals = new Refusals();

  constructor() {
    this.sweep = setInterval(() => {
      const now = Date.now();
      for (const [k, e] of this.entries) if (e.expiresAt <= now) this.entries.delete(k);
    }, 60_000).unref();
  }

  limiter(limit: number, windowS: number, blockS = 0): RateLimiterMemory {
    const id = `${limit}:${windowS}:${blockS}`;
    let l = this.limiters.get(id);
    if (!l) this.limiters.set(id, (l = new RateLimiterMemory({ keyPrefix: id, points: limit, duration: windowS, blockDuration: blockS })));
    return l;
  }

  async consume(bucket: string, limit: number, windowS: number, opts: { points?: number; blockS?: number } = {}): Promise<Verdict> {
    const v = await toVerdict(limit, this.limiter(limit, windowS, opts.blockS).consume(bucket, opts.points ?? 1));
    return this.refusals.note(Refusals.id(bucket, limit, windowS, opts.blockS), limit, v);
  }

  async peek(bucket: string, limit: number, windowS: number, opts: { blockS?: number } = {}): Promise<Verdict> {
    const v = peekVerdict(limit, await this.limiter(limit, windowS, opts.blockS).get(bucket));
    return this.refusals.note(Refusals.id(bucket, limit, windowS, opts.blockS), limit, v);
  }

  async check(checks: readonly Check[], reads: readonly string[] = []): Promise<CheckResult> {
    const verdicts: Array<Verdict | undefined> = [];
    let open = true;
    for (const c of checks) {
      const v = !open ? undefined : c.peek ? await this.peek(c.bucket, c.limit, c.windowS, c) : await this.consume(c.bucket, c.limit, c.windowS, { blockS: c.blockS });
      if (v && !v.allowed) open = false;
      verdicts.push(v);
    }
    return { verdicts, values: await Promise.all(reads.map((k) => this.get(k))) };
  }

  refused(bucket: string, limit: number, windowS: number, opts: { blockS?: number; next?: boolean } = {}): boolean {
    return this.refusals.refused(Refusals.id(bucket, limit, windowS, opts.blockS), limit, opts.next);
  }

  private live(key: string): Entry | undefined {
    const e = this.entries.get(key);
    if (e && e.expiresAt <= Date.now()) {
      this.entries.delete(key);
      return undefined;
    }
    return e;
  }

  async incr(key: string, amount: number, ttlS: number): Promise<number> {
    const e = this.live(key);
    if (e) return (e.value = Number(e.value) + amount);
    this.entries.set(key, { value: amount, expiresAt: Date.now() + ttlS * 1000 });
    return amount;
  }

  async get(key: string): Promise<number | undefined> {
    const e = this.live(key);
    return e === undefined ? undefined : Number(e.value);
  }

  async seed(key: string, value: number, ttlS: number): Promise<number> {
    const e = this.live(key);
    if (e) return Number(e.value);
    this.entries.set(key, { value, expiresAt: Date.now() + ttlS * 1000 });
    return value;
  }

  async getText(key: string): Promise<string | undefined> {
    const e = this.live(key);
    return e === undefined ? undefined : String(e.value);
  }

  async setText(key: string, value: string, ttlS: number): Promise<void> {
    this.entries.set(key, { value, expiresAt: Date.now() + ttlS * 1000 });
  }

  async close(): Promise<void> {
    clearInterval(this.sweep);
  }
}

/** A window read without counting (rate-limiter-flexible's `get`): null means nothing counted yet. */
export function peekVerdict(limit: number, res: RateLimiterRes | null): Verdict {
  return res ? { allowed: res.consumedPoints <= limit, count: res.consumedPoints, msLeft: res.msBeforeNext } : { allowed: true, count: 0, msLeft: 0 };
}

/** rate-limiter-flexible resolves within the limit and rejects with a RateLimiterRes beyond it. */
export async function toVerdict(limit: number, p: Promise<RateLimiterRes>): Promise<Verdict> {
  try {
    const res = await p;
    return { allowed: true, count: res.consumedPoints, msLeft: res.msBeforeNext };
  } catch (err) {
    if (err instanceof RateLimiterRes) return { allowed: false, count: Math.max(err.consumedPoints, limit + 1), msLeft: err.msBeforeNext };
    throw err;
  }
}
