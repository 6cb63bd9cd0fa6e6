// Counters in Redis, shared by every sluice process of a deployment, so limits, budgets, the IP
// block and auto sessions hold jointly (CONTRACT §2 scale-out). While Redis is unreachable each
// process keeps going on its in-memory counters (rate-limiter-flexible's insurance limiter and
// MemoryCounters), says so once in the log and in /health, and returns to Redis when it is back.
// The client never queues commands offline: a request must not wait for a Redis that is away.

import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { RateLimiterRedis } from 'rate-limiter-flexible';
import type { Counters, Verdict } from './counters.ts';
import { MemoryCounters, peekVerdict, toVerdict } from './memory.ts';

const DEFAULT_PREFIX = 'sluice:';

export class RedisCounters implements Counters {
  readonly kind = 'redis' as const;
  readonly client: Redis;
  private readonly fallback = new MemoryCounters();
  private readonly limiters = new Map<string, RateLimiterRedis>();
  private readonly log: Logger;
  /** Namespace of every key this instance writes (tests give each run its own). */
  private readonly prefix: string;
  private down = false;

  constructor(opts: { url: string; log: Logger; prefix?: string; commandTimeoutMs?: number }) {
    this.log = opts.log;
    this.prefix = opts.prefix ?? DEFAULT_PREFIX;
    this.client = new Redis(opts.url, {
      enableOfflineQueue: false,
      // Commands issued in the same tick share one write and one round trip (a request's budget
      // reads, a batch's spend increments).
      enableAutoPipelining: true,
      maxRetriesPerRequest: 0,
      connectTimeout: 2000,
      commandTimeout: opts.commandTimeoutMs ?? 1000,
      retryStrategy: (times) => Math.min(100 * times, 2000),
    });
    this.client.on('error', (err) => this.markDown(err.message));
    this.client.on('close', () => this.markDown('connection closed'));
    this.client.on('ready', () => this.markUp());
  }

  /** Whether the last contact with Redis failed (shown in /health). */
  get degraded(): boolean {
    return this.down || this.client.status !== 'ready';
  }

  private markDown(reason: string): void {
    if (!this.down) this.log.error({ err: reason }, 'Redis unreachable: counting in process memory until it returns');
    this.down = true;
  }

  /** On 'ready', and on any command that succeeds: a timeout on a live connection ends with no reconnect. */
  private markUp(): void {
    if (this.down) this.log.info('Redis is back: counters are shared again');
    this.down = false;
  }

  private limiter(limit: number, windowS: number, blockS = 0): RateLimiterRedis {
    const id = `${limit}:${windowS}:${blockS}`;
    let l = this.limiters.get(id);
    if (!l) {
      l = new RateLimiterRedis({
        storeClient: this.client, keyPrefix: `${this.prefix}rl:${id}`, points: limit, duration: windowS, blockDuration: blockS,
        rejectIfRedisNotReady: true, insuranceLimiter: this.fallback.limiter(limit, windowS, blockS),
      });
      this.limiters.set(id, l);
    }
    return l;
  }

  consume(bucket: string, limit: number, windowS: number, opts: { points?: number; blockS?: number } = {}): Promise<Verdict> {
    return toVerdict(limit, this.limiter(limit, windowS, opts.blockS).consume(bucket, opts.points ?? 1));
  }

  async peek(bucket: string, limit: number, windowS: number, opts: { blockS?: number } = {}): Promise<Verdict> {
    return peekVerdict(limit, await this.limiter(limit, windowS, opts.blockS).get(bucket));
  }

  /** Runs a Redis operation, or the in-memory one while Redis is away. */
  private async either<T>(redis: () => Promise<T>, memory: () => Promise<T>): Promise<T> {
    if (this.client.status !== 'ready') return memory();
    try {
      const value = await redis();
      if (this.down) this.markUp();
      return value;
    } catch (err) {
      this.markDown((err as Error).message);
      return memory();
    }
  }

  incr(key: string, amount: number, ttlS: number): Promise<number> {
    return this.either(async () => {
      // One INCRBY (auto-pipelined with its neighbours); only the add that created the counter
      // gives it its lifetime, so the ttl runs from creation. A crash between the two leaves a
      // dated key without expiry: harmless, nothing reads an old window's key.
      const k = this.prefix + key;
      const total = await this.client.incrby(k, amount);
      if (total === amount) await this.client.expire(k, ttlS);
      return total;
    }, () => this.fallback.incr(key, amount, ttlS));
  }

  get(key: string): Promise<number | undefined> {
    return this.either(async () => {
      const v = await this.client.get(this.prefix + key);
      return v === null ? undefined : Number(v);
    }, () => this.fallback.get(key));
  }

  seed(key: string, value: number, ttlS: number): Promise<number> {
    return this.either(async () => {
      await this.client.set(this.prefix + key, value, 'EX', ttlS, 'NX');
      return Number(await this.client.get(this.prefix + key));
    }, () => this.fallback.seed(key, value, ttlS));
  }

  getText(key: string): Promise<string | undefined> {
    return this.either(async () => (await this.client.get(this.prefix + key)) ?? undefined, () => this.fallback.getText(key));
  }

  setText(key: string, value: string, ttlS: number): Promise<void> {
    return this.either(async () => void (await this.client.set(this.prefix + key, value, 'EX', ttlS)), () => this.fallback.setText(key, value, ttlS));
  }

  async close(): Promise<void> {
    await this.fallback.close();
    this.client.disconnect();
  }
}
