// Counters in Redis, shared by every sluice process of a deployment, so limits, budgets, the IP
// block and auto sessions hold jointly (CONTRACT §2 scale-out). While Redis is unreachable each
// process keeps going on its in-memory counters (MemoryCounters, the same fixed windows), says so
// once in the log and in /health, and returns to Redis when it is back.
// The client never queues commands offline: a request must not wait for a Redis that is away.

import type { Socket } from 'node:net';
import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import { RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import type { Check, CheckResult, Counters, Verdict } from './counters.ts';
import { MemoryCounters } from './memory.ts';
import { Refusals } from './refusals.ts';

const DEFAULT_PREFIX = 'sluice:';

/**
 * `incr` in one command: the add that creates the counter also gives it its lifetime (the ttl runs
 * from creation), atomically. Each add answers with its own total, in the order the adds were sent.
 */
const INCR_LUA = `
local total = redis.call('incrby', KEYS[1], ARGV[1])
if total == tonumber(ARGV[1]) then redis.call('expire', KEYS[1], ARGV[2]) end
return total
`;

/**
 * `check` in one round trip. KEYS: the windows (rate-limiter-flexible's keys, so consume, peek
 * and check count in the same windows), then the plain counters to read. ARGV: per window, 1 to
 * peek or 0 to consume, its length in seconds and its limit. A consume counts as
 * rate-limiter-flexible's own does (a window starts with its first point and lasts its length
 * from there), in two calls where that library's script makes three: the add that creates the key
 * gives it its lifetime, any other reads the time left. A peek reads count and ttl. After the
 * first refusal nothing is counted. Returns count and ttl per window (-1, -1 for one not
 * checked), then each counter's value ('' when missing), read in one MGET. Each redis.call costs
 * Redis about a microsecond, so they are few: Redis shares the gateway's CPUs.
 */
const CHECK_LUA = `
local out = {}
local open = true
local windows = #ARGV / 3
for i = 1, windows do
  local key = KEYS[i]
  local peek = ARGV[3 * i - 2] == '1'
  local window = tonumber(ARGV[3 * i - 1])
  local limit = tonumber(ARGV[3 * i])
  if not open then
    out[#out + 1] = -1
    out[#out + 1] = -1
  elseif peek then
    local v = redis.call('get', key)
    local count = v and tonumber(v) or 0
    out[#out + 1] = count
    out[#out + 1] = v and redis.call('pttl', key) or 0
    if count > limit then open = false end
  else
    local count = redis.call('incrby', key, 1)
    local ttl
    if count == 1 then
      redis.call('expire', key, window)
      ttl = 1000 * window
    else
      ttl = redis.call('pttl', key)
      if ttl == -1 then
        redis.call('expire', key, window)
        ttl = 1000 * window
      end
    end
    out[#out + 1] = count
    out[#out + 1] = ttl
    if count > limit then open = false end
  end
end
if #KEYS > windows then
  local values = redis.call('mget', unpack(KEYS, windows + 1))
  for i = 1, #values do
    out[#out + 1] = values[i] or ''
  end
end
return out
`;

export class RedisCounters implements Counters {
  readonly kind = 'redis' as const;
  readonly client: Redis;
  private readonly fallback = new MemoryCounters();
  private readonly limiters = new Map<string, RateLimiterRedis>();
  private readonly log: Logger;
  /** Namespace of every key this instance writes (tests give each run its own). */
  private readonly prefix: string;
  private down = false;
  private readonly refusals = new Refusals();

  constructor(opts: { url: string; log: Logger; prefix?: string; commandTimeoutMs?: number }) {
    this.log = opts.log;
    this.prefix = opts.prefix ?? DEFAULT_PREFIX;
    this.client = new Redis(opts.url, {
      enableOfflineQueue: false,
      // Each command is written as it is issued (still pipelined: none waits for another's reply).
      // Auto-pipelining keeps its pipelines in a Map and a Set with one add and one delete per
      // tick, and under load about 450 KB more of each young generation then survived to be
      // promoted (853 against 388–413 KB per scavenge, `npm run bench -- --store postgres`); the
      // added p99 at 200 req/s fell from 3.0–3.5 to 1.1–1.4 ms, at the same CPU per request.
      enableAutoPipelining: false,
      maxRetriesPerRequest: 0,
      // INCRBY is not idempotent: a command whose answer was lost with a connection (it may have
      // run, and its caller already fell back to memory) must never be sent a second time.
      autoResendUnfulfilledCommands: false,
      connectTimeout: 2000,
      commandTimeout: opts.commandTimeoutMs ?? 1000,
      retryStrategy: (times) => Math.min(100 * times, 2000),
    });
    this.client.defineCommand('sluiceCheck', { lua: CHECK_LUA });
    this.client.defineCommand('sluiceIncr', { lua: INCR_LUA, numberOfKeys: 1 });
    this.client.on('error', (err) => this.markDown(err.message));
    this.client.on('close', () => this.markDown('connection closed'));
    this.client.on('ready', () => this.markUp());
  }

  private closing = false;

  /** Whether the last contact with Redis failed (shown in /health). */
  get degraded(): boolean {
    return this.down || this.client.status !== 'ready';
  }

  private markDown(reason: string): void {
    if (this.closing) return; // our own disconnect at shutdown is not an outage
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
        // No insurance limiter: while Redis is away, consume and peek count in the fallback's
        // windows (either()), the same ones its check reads.
        rejectIfRedisNotReady: true,
      });
      this.limiters.set(id, l);
    }
    return l;
  }

  async consume(bucket: string, limit: number, windowS: number, opts: { points?: number; blockS?: number } = {}): Promise<Verdict> {
    const v = await this.either(
      () => toVerdict(limit, this.limiter(limit, windowS, opts.blockS).consume(bucket, opts.points ?? 1)),
      () => this.fallback.consume(bucket, limit, windowS, opts),
    );
    return this.remember(bucket, limit, windowS, opts.blockS, v);
  }

  async peek(bucket: string, limit: number, windowS: number, opts: { blockS?: number } = {}): Promise<Verdict> {
    const v = await this.either(
      async () => peekVerdict(limit, await this.limiter(limit, windowS, opts.blockS).get(bucket)),
      () => this.fallback.peek(bucket, limit, windowS, opts),
    );
    return this.remember(bucket, limit, windowS, opts.blockS, v);
  }

  check(checks: readonly Check[], reads: readonly string[] = []): CheckResult | Promise<CheckResult> {
    // Hot path (every proxied request): one array for the script's arguments, loops, and no async
    // wrapper; while Redis is away the memory windows answer at once.
    const n = checks.length;
    const argv: Array<string | number> = [n + reads.length];
    for (let i = 0; i < n; i++) {
      const c = checks[i]!;
      // A consume that crosses a block's threshold needs rate-limiter-flexible's second step: use consume().
      if (!c.peek && c.blockS) return Promise.reject(new Error('check() consumes only windows without a block'));
      argv.push(`${this.limiter(c.limit, c.windowS, c.blockS).keyPrefix}:${c.bucket}`);
    }
    for (let i = 0; i < reads.length; i++) argv.push(this.prefix + reads[i]);
    for (let i = 0; i < n; i++) argv.push(checks[i]!.peek ? 1 : 0, checks[i]!.windowS, checks[i]!.limit);
    return this.either(
      () => (this.client as unknown as { sluiceCheck(...a: Array<string | number>): Promise<Array<number | string>> })
        .sluiceCheck(...argv).then((raw) => this.checked(checks, parseCheck(checks, reads, raw))),
      () => this.checked(checks, this.fallback.check(checks, reads)),
    );
  }

  /** Remembers the windows of a check at their limit and passes the result on. */
  private checked(checks: readonly Check[], result: CheckResult): CheckResult {
    for (let i = 0; i < checks.length; i++) {
      const c = checks[i]!;
      const v = result.verdicts[i];
      if (v) this.remember(c.bucket, c.limit, c.windowS, c.blockS, v);
    }
    return result;
  }

  /** Notes a verdict with Refusals; its id is built only for a window worth keeping. */
  private remember(bucket: string, limit: number, windowS: number, blockS: number | undefined, v: Verdict): Verdict {
    return Refusals.keeps(limit, v) ? this.refusals.note(Refusals.id(bucket, limit, windowS, blockS), limit, v) : v;
  }

  refused(bucket: string, limit: number, windowS: number, opts: { blockS?: number; next?: boolean } = {}): boolean {
    return this.refusals.refused(bucket, limit, windowS, opts.blockS, opts.next) || this.fallback.refused(bucket, limit, windowS, opts);
  }

  /** The socket corked in this turn of the event loop, uncorked at the turn's end. */
  private corked: Socket | null = null;
  private readonly uncork = (): void => {
    const s = this.corked;
    this.corked = null;
    s?.uncork();
  };

  /**
   * The commands of one turn of the event loop leave in one write: the socket is corked at the
   * first and uncorked when the turn ends (setImmediate runs after the turn's I/O callbacks).
   * Without it each command was its own write syscall; ioredis's auto-pipelining does the same
   * with a Map and a Set per tick, which cost promotion (see the constructor).
   */
  private corkTurn(): void {
    if (this.corked) return;
    const stream = (this.client as unknown as { stream?: Socket }).stream;
    if (!stream || stream.destroyed) return;
    stream.cork();
    this.corked = stream;
    setImmediate(this.uncork);
  }

  /**
   * Runs a Redis operation, or the in-memory one while Redis is away or when the operation fails.
   * One promise over the operation's own, no async wrapper; the memory answer is passed on as it
   * comes (check's answers at once).
   */
  private either<T>(redis: () => Promise<T>, memory: () => Promise<T>): Promise<T>;
  private either<T>(redis: () => Promise<T>, memory: () => T): T | Promise<T>;
  private either<T>(redis: () => Promise<T>, memory: () => T | Promise<T>): T | Promise<T> {
    if (this.client.status !== 'ready') return memory();
    this.corkTurn();
    // A synchronous throw becomes a rejection too, and so falls back like any failure.
    return new Promise<T>((resolve) => resolve(redis())).then(
      (value) => {
        if (this.down) this.markUp();
        return value;
      },
      (err: Error) => {
        this.markDown(err.message);
        return memory();
      },
    );
  }

  incr(key: string, amount: number, ttlS: number): Promise<number> {
    return this.either(async () => {
      // One script: INCRBY, and EXPIRE on the add that created the counter. As two commands, the
      // first add answered only after its EXPIRE, so a later add could answer first.
      const incr = (this.client as unknown as { sluiceIncr(k: string, amount: number, ttlS: number): Promise<number> }).sluiceIncr;
      return incr.call(this.client, this.prefix + key, amount, ttlS);
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
    this.closing = true;
    await this.fallback.close();
    this.client.disconnect();
  }
}

/** A window read without counting (rate-limiter-flexible's `get`): null means nothing counted yet. */
function peekVerdict(limit: number, res: RateLimiterRes | null): Verdict {
  return res ? { allowed: res.consumedPoints <= limit, count: res.consumedPoints, msLeft: res.msBeforeNext } : { allowed: true, count: 0, msLeft: 0 };
}

/** rate-limiter-flexible resolves within the limit and rejects with a RateLimiterRes beyond it. */
async function toVerdict(limit: number, p: Promise<RateLimiterRes>): Promise<Verdict> {
  try {
    const res = await p;
    return { allowed: true, count: res.consumedPoints, msLeft: res.msBeforeNext };
  } catch (err) {
    if (err instanceof RateLimiterRes) return { allowed: false, count: Math.max(err.consumedPoints, limit + 1), msLeft: err.msBeforeNext };
    throw err;
  }
}

/** The check script's answer: per window count and ttl (-1 when not checked), then each read ('' when missing). */
function parseCheck(checks: readonly Check[], reads: readonly string[], raw: Array<number | string>): CheckResult {
  const n = checks.length;
  const verdicts: Array<Verdict | undefined> = new Array(n);
  for (let i = 0; i < n; i++) {
    const count = raw[2 * i] as number;
    verdicts[i] = count === -1 ? undefined : { allowed: count <= checks[i]!.limit, count, msLeft: Math.max(0, raw[2 * i + 1] as number) };
  }
  const values: Array<number | undefined> = new Array(reads.length);
  for (let i = 0; i < reads.length; i++) {
    const v = raw[2 * n + i];
    values[i] = v === '' ? undefined : Number(v);
  }
  return { verdicts, values };
}
