// Counters in Redis, shared by every sluice process of a deployment, so limits, budgets, the IP
// block and auto sessions hold jointly. The windows are sluice's own, kept by one Lua script for
// consume, peek and check alike. While Redis is unreachable each process counts in memory
// (MemoryCounters, the same fixed windows), says so once, and returns to Redis when it is back; no
// command is ever queued offline. ioredis is used through its public API only.

import { Redis, type Result } from 'ioredis';
import type { Logger } from 'pino';
import type { Check, CheckResult, Counters, Verdict } from './counters.ts';
import { MemoryCounters } from './memory.ts';
import { Refusals } from './refusals.ts';

const DEFAULT_PREFIX = 'sluice:';

// The two scripts, typed as ioredis's documented way to declare a defineCommand() command.
declare module 'ioredis' {
  interface RedisCommander<Context> {
    /** WINDOW_LUA: the number of keys (windows, then counters to read), the keys, then four values per window. */
    sluiceWindows(numKeys: number, ...keysAndArgs: Array<string | number>): Result<Array<number | string>, Context>;
    /** INCR_LUA. */
    sluiceIncr(key: string, amount: number, ttlS: number): Result<number, Context>;
  }
}

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
 * Every window operation: consume, peek and check are calls of this one script, and the operations
 * of one turn of the event loop share one call (see Turn). A window is a key holding its count,
 * expiring when the window (or its block) ends. KEYS: the windows, then the plain counters to read.
 * ARGV: per operation the number of its windows, then four values per window: 'peek' or the points
 * to count, the window's length and the block's in seconds (0: no block), the limit.
 * A consume adds its points; the add that creates the key gives it the window's length (a window
 * starts with its first point and lasts its length), any other reads the time left; the consume
 * that first goes over the limit of a window with a block makes the key live for the block from
 * now. A peek reads count and time left. Within an operation, nothing is counted after its first
 * refusal. Returns count and ms left per window (-1, -1 for one not reached), then each counter's
 * value ('' when missing), read in one MGET. Each redis.call costs Redis about a microsecond and
 * Redis shares the gateway's CPUs, so a consume makes two calls (three only when it starts a block).
 * Why not rate-limiter-flexible: through its public API a request's check (the IP block read, the
 * key's and the end user's windows, nothing counted after a refusal) is three round trips in a row
 * and 13 commands, 20–23 µs of Redis CPU per check against 6–9 µs for this script (20,000 checks
 * each way, 32 at a time, Redis's INFO cpu); its script's keys, read from outside, are not its API.
 */
const WINDOW_LUA = `
local out = {}
local k = 0
local j = 1
while j <= #ARGV do
  local windows = tonumber(ARGV[j])
  local open = true
  j = j + 1
  for _ = 1, windows do
    k = k + 1
    if not open then
      out[#out + 1] = -1
      out[#out + 1] = -1
    else
      local key = KEYS[k]
      local op = ARGV[j]
      local limit = tonumber(ARGV[j + 3])
      local count, ttl
      if op == 'peek' then
        local v = redis.call('get', key)
        count = v and tonumber(v) or 0
        ttl = v and redis.call('pttl', key) or 0
      else
        local points = tonumber(op)
        count = redis.call('incrby', key, points)
        ttl = -1
        if count ~= points then ttl = redis.call('pttl', key) end
        if ttl < 0 then
          ttl = math.ceil(1000 * tonumber(ARGV[j + 1]))
          redis.call('pexpire', key, ttl)
        end
        local block = tonumber(ARGV[j + 2])
        if block > 0 and count > limit and count - points <= limit then
          ttl = math.ceil(1000 * block)
          redis.call('pexpire', key, ttl)
        end
      end
      out[#out + 1] = count
      out[#out + 1] = ttl
      if count > limit then open = false end
    end
    j = j + 4
  end
end
if #KEYS > k then
  local values = redis.call('mget', unpack(KEYS, k + 1))
  for i = 1, #values do
    out[#out + 1] = values[i] or ''
  end
end
return out
`;

/** A turn's call stops taking operations at this many keys (Lua's unpack of the reads stays far within its stack). */
const TURN_MAX_KEYS = 1024;

/** One operation's part of its turn's reply: its windows from `at`, its counters from `readAt`. */
interface Slice { raw: Array<number | string>; at: number; readAt: number }

/**
 * The window operations of one turn of the event loop, sent as one call of WINDOW_LUA when the turn
 * ends (setImmediate): one write and one script run for all of them. Writes on the Redis socket per
 * request (perf counting write and writev on its fd, `npm run bench -- --store postgres --only
 * chat-2k`): one command per operation 1.08; an ioredis pipeline per turn 0.24–0.30; this
 * 0.25–0.28; corking ioredis's private socket (before) 0.24–0.32. What sets this apart is the
 * work per check (32 checkers, each awaiting a tick between checks): client CPU 6.6–9.3 µs against
 * 12.8–15.7 for a pipeline and 10.1–13.6 for the cork, Redis CPU 5.7–7.3 µs against 8.0–8.8 for
 * one script call per check (one EVALSHA parsed and one Lua call set up per turn, not per check).
 */
class Turn {
  readonly keys: string[] = [];
  readonly reads: string[] = [];
  readonly argv: Array<string | number> = [];
  private readonly parts: Array<{ at: number; readAt: number; resolve(s: Slice): void; reject(e: Error): void }> = [];

  /** The operation just queued (its `windows` keys, `reads` reads and arguments pushed): its part of the reply. */
  add(windows: number, reads: number): Promise<Slice> {
    const at = 2 * (this.keys.length - windows);
    const readAt = this.reads.length - reads;
    return new Promise((resolve, reject) => this.parts.push({ at, readAt, resolve, reject }));
  }

  settle(raw: Array<number | string>): void {
    const readsFrom = 2 * this.keys.length;
    for (const p of this.parts) p.resolve({ raw, at: p.at, readAt: readsFrom + p.readAt });
  }

  fail(err: Error): void {
    for (const p of this.parts) p.reject(err);
  }
}

export class RedisCounters implements Counters {
  readonly kind = 'redis' as const;
  readonly client: Redis;
  private readonly fallback = new MemoryCounters();
  private readonly log: Logger;
  /** Namespace of every key this instance writes (tests give each run its own). */
  private readonly prefix: string;
  /** The windows' namespace: a window's key is this and its Refusals.id (limit, length, block, bucket). */
  private readonly windowPrefix: string;
  private down = false;
  private closing = false;
  private readonly refusals = new Refusals();

  constructor(opts: { url: string; log: Logger; prefix?: string; commandTimeoutMs?: number }) {
    this.log = opts.log;
    this.prefix = opts.prefix ?? DEFAULT_PREFIX;
    this.windowPrefix = `${this.prefix}rl:`;
    this.client = new Redis(opts.url, {
      enableOfflineQueue: false,
      // Each command is written as it is issued (still pipelined: none waits for another's reply);
      // the window operations of a turn are one command already (Turn). Auto-pipelining keeps its
      // pipelines in a Map and a Set with one add and one delete per tick, and under load about
      // 450 KB more of each young generation then survived to be promoted (853 against 388–413 KB
      // per scavenge, `npm run bench -- --store postgres`); the added p99 at 200 req/s fell from
      // 3.0–3.5 to 1.1–1.4 ms, at the same CPU per request.
      enableAutoPipelining: false,
      maxRetriesPerRequest: 0,
      // INCRBY is not idempotent: a command whose answer was lost with a connection (it may have
      // run, and its caller already fell back to memory) must never be sent a second time.
      autoResendUnfulfilledCommands: false,
      connectTimeout: 2000,
      commandTimeout: opts.commandTimeoutMs ?? 1000,
      retryStrategy: (times) => Math.min(100 * times, 2000),
    });
    this.client.defineCommand('sluiceWindows', { lua: WINDOW_LUA });
    this.client.defineCommand('sluiceIncr', { lua: INCR_LUA, numberOfKeys: 1 });
    this.client.on('error', (err) => this.markDown(err.message));
    this.client.on('close', () => this.markDown('connection closed'));
    this.client.on('ready', () => this.markUp());
  }

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

  private windowKey(bucket: string, limit: number, windowS: number, blockS = 0): string {
    return this.windowPrefix + Refusals.id(bucket, limit, windowS, blockS);
  }

  /** The turn now taking window operations, sent when the turn ends (or when full). */
  private turn: Turn | null = null;
  private readonly send = (): void => {
    const turn = this.turn;
    if (turn === null) return;
    this.turn = null;
    this.client.sluiceWindows(turn.keys.length + turn.reads.length, ...turn.keys, ...turn.reads, ...turn.argv).then(
      (raw) => turn.settle(raw),
      (err: Error) => turn.fail(err),
    );
  };

  /** The turn to queue an operation of `keys` keys into: this turn's, unless it is full. */
  private turnFor(keys: number): Turn {
    let turn = this.turn;
    if (turn !== null && turn.keys.length + turn.reads.length + keys > TURN_MAX_KEYS) {
      this.send();
      turn = null;
    }
    if (turn === null) {
      // setImmediate runs once the turn's I/O callbacks are done: every request read in this turn is in.
      this.turn = turn = new Turn();
      setImmediate(this.send);
    }
    return turn;
  }

  /** One window, counted (`points`) or read ('peek'), in this turn's call. */
  private one(op: 'peek' | number, bucket: string, limit: number, windowS: number, blockS: number): Promise<Verdict> {
    const turn = this.turnFor(1);
    turn.keys.push(this.windowKey(bucket, limit, windowS, blockS));
    turn.argv.push(1, op, windowS, blockS, limit);
    return turn.add(1, 0).then((s) => verdictOf(s.raw, s.at, limit));
  }

  consume(bucket: string, limit: number, windowS: number, opts: { points?: number; blockS?: number } = {}): Promise<Verdict> {
    const blockS = opts.blockS ?? 0;
    return this.either(
      () => this.one(opts.points ?? 1, bucket, limit, windowS, blockS),
      () => this.fallback.consume(bucket, limit, windowS, opts),
    ).then((v) => this.remember(bucket, limit, windowS, blockS, v));
  }

  peek(bucket: string, limit: number, windowS: number, opts: { blockS?: number } = {}): Promise<Verdict> {
    const blockS = opts.blockS ?? 0;
    return this.either(
      () => this.one('peek', bucket, limit, windowS, blockS),
      () => this.fallback.peek(bucket, limit, windowS, opts),
    ).then((v) => this.remember(bucket, limit, windowS, blockS, v));
  }

  check(checks: readonly Check[], reads: readonly string[] = []): CheckResult | Promise<CheckResult> {
    // Hot path (every proxied request): pushes into the turn's arrays, loops, and no async
    // wrapper; while Redis is away the memory windows answer at once.
    return this.either(
      () => {
        const n = checks.length;
        const turn = this.turnFor(n + reads.length);
        turn.argv.push(n);
        for (let i = 0; i < n; i++) {
          const c = checks[i]!;
          const blockS = c.blockS ?? 0;
          turn.keys.push(this.windowKey(c.bucket, c.limit, c.windowS, blockS));
          turn.argv.push(c.peek ? 'peek' : 1, c.windowS, blockS, c.limit);
        }
        for (let i = 0; i < reads.length; i++) turn.reads.push(this.prefix + reads[i]);
        return turn.add(n, reads.length).then((s) => this.checked(checks, parseCheck(checks, reads, s)));
      },
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

  /**
   * Runs a Redis operation, or the in-memory one while Redis is away or when the operation fails.
   * One promise over the operation's own, no async wrapper; the memory answer is passed on as it
   * comes (check's answers at once).
   */
  private either<T>(redis: () => Promise<T>, memory: () => Promise<T>): Promise<T>;
  private either<T>(redis: () => Promise<T>, memory: () => T): T | Promise<T>;
  private either<T>(redis: () => Promise<T>, memory: () => T | Promise<T>): T | Promise<T> {
    if (this.client.status !== 'ready') return memory();
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
    // One script: INCRBY, and EXPIRE on the add that created the counter. As two commands, the
    // first add answered only after its EXPIRE, so a later add could answer first.
    return this.either(() => this.client.sluiceIncr(this.prefix + key, amount, ttlS), () => this.fallback.incr(key, amount, ttlS));
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

/** One window's verdict from the script's answer: its count and ms left at `at` and `at + 1`. */
function verdictOf(raw: Array<number | string>, at: number, limit: number): Verdict {
  const count = Number(raw[at]);
  return { allowed: count <= limit, count, msLeft: Math.max(0, Number(raw[at + 1])) };
}

/** A check's part of the script's answer: per window count and ms left (-1 when not reached), then each read ('' when missing). */
function parseCheck(checks: readonly Check[], reads: readonly string[], { raw, at, readAt }: Slice): CheckResult {
  const n = checks.length;
  const verdicts: Array<Verdict | undefined> = new Array(n);
  for (let i = 0; i < n; i++) verdicts[i] = raw[at + 2 * i] === -1 ? undefined : verdictOf(raw, at + 2 * i, checks[i]!.limit);
  const values: Array<number | undefined> = new Array(reads.length);
  for (let i = 0; i < reads.length; i++) {
    const v = raw[readAt + i];
    values[i] = v === '' ? undefined : Number(v);
  }
  return { verdicts, values };
}
