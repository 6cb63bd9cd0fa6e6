// `sluice serve`: builds the gateway from configuration and environment (CONTRACT §2–3), listens,
// and on SIGTERM or SIGINT stops accepting, lets open streams finish within a grace period,
// flushes every row and exits 0; a second signal ends the grace period at once (rows still
// flushed). Start-up problems with the configuration or a setting exit 78, naming what is wrong.

import { resolve } from 'node:path';
import { loadConfig } from '../lib/config.ts';
import type { Counters } from '../lib/counters/counters.ts';
import { MemoryCounters } from '../lib/counters/memory.ts';
import { createLogger } from '../lib/log.ts';
import { CONNECTION_DEFAULTS, createGateway, VERSION, type ConnectionLimits } from '../lib/server.ts';
import { openStore } from '../lib/store/open.ts';
import { UsageError } from './errors.ts';

export function parseListen(value: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(value.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new UsageError(`--listen must be HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), got "${value}"`);
  return { host: m[1] ?? m[2], port };
}

/**
 * A numeric setting: unset or empty gives `fallback`; anything else must be a number passing `ok`,
 * or sluice exits 78 naming the variable and what it must be.
 */
export function numberSetting(env: NodeJS.ProcessEnv, name: string, fallback: number, ok: (n: number) => boolean, must: string): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || !ok(n)) throw new UsageError(`${name} must be ${must}, got "${raw}"`, 78);
  return n;
}

const whole = (n: number) => Number.isInteger(n) && n >= 0;

/** The connection bounds from SLUICE_MAX_CONNECTIONS, SLUICE_MAX_CONNECTIONS_PER_IP, SLUICE_HEADERS_TIMEOUT_S and SLUICE_KEEPALIVE_TIMEOUT_S. */
export function connectionLimits(env: NodeJS.ProcessEnv): ConnectionLimits {
  const d = CONNECTION_DEFAULTS;
  return {
    maxConnections: numberSetting(env, 'SLUICE_MAX_CONNECTIONS', d.maxConnections, whole, 'a whole number of connections (0: no cap)'),
    maxPerAddress: numberSetting(env, 'SLUICE_MAX_CONNECTIONS_PER_IP', d.maxPerAddress, whole, 'a whole number of connections (0: no cap)'),
    headersTimeoutMs: numberSetting(env, 'SLUICE_HEADERS_TIMEOUT_S', d.headersTimeoutMs / 1000, (n) => n > 0 && n <= 120, 'a number of seconds above 0, at most 120') * 1000,
    keepAliveTimeoutMs: numberSetting(env, 'SLUICE_KEEPALIVE_TIMEOUT_S', d.keepAliveTimeoutMs / 1000, (n) => n > 0 && n <= 3600, 'a number of seconds above 0, at most 3600') * 1000,
  };
}

export async function openCounters(env: NodeJS.ProcessEnv, log: ReturnType<typeof createLogger>): Promise<Counters> {
  if (env.SLUICE_REDIS_URL) {
    const { RedisCounters } = await import('../lib/counters/redis.ts');
    return new RedisCounters({ url: env.SLUICE_REDIS_URL, log });
  }
  return new MemoryCounters();
}

export async function serve(opts: { config: string; listen: string; env?: NodeJS.ProcessEnv; graceMs?: number }): Promise<void> {
  const env = opts.env ?? process.env;
  const { host, port } = parseListen(opts.listen);
  // Settings first: a bad one exits 78 before any store or Redis connection is opened.
  const timeoutS = numberSetting(env, 'SLUICE_UPSTREAM_TIMEOUT_S', 300, (n) => n > 0, 'a positive number of seconds');
  const cacheS = numberSetting(env, 'SLUICE_KEY_CACHE_TTL_S', 60, (n) => n >= 0 && n <= 60, 'between 0 and 60 seconds');
  const connections = connectionLimits(env);
  const config = loadConfig(resolve(opts.config));
  const log = createLogger(env.SLUICE_LOG_LEVEL);
  const dataDir = resolve(env.SLUICE_DATA_DIR ?? './data');
  const store = await openStore({ databaseUrl: env.SLUICE_DATABASE_URL, dataDir });
  const counters = await openCounters(env, log);
  if (store.kind === 'postgres' && counters.kind === 'memory') {
    log.warn('Postgres without Redis: limits, budgets and the IP block are counted per process, so run a single instance only (set SLUICE_REDIS_URL to scale out)');
  }
  const gateway = await createGateway({ config, store, counters, log, env, dataDir, upstreamTimeoutMs: timeoutS * 1000, keyCacheTtlMs: cacheS * 1000, connections });
  const addr = await gateway.listen(host, port);
  log.info({ version: VERSION, listen: `${addr.address}:${addr.port}`, store: store.kind, counters: counters.kind, profiles: [...config.profiles.keys()] }, 'sluice listening');

  process.on('unhandledRejection', (err) => log.error({ err: String(err) }, 'unhandled rejection'));
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second signal during the grace period: end the open streams now, but still flush every row.
      log.warn({ signal }, 'second signal: ending open streams now; rows are still flushed');
      gateway.hurry();
      return;
    }
    stopping = true;
    log.info({ signal }, 'shutting down: no new connections, open streams may finish');
    try {
      await gateway.close(opts.graceMs ?? Number(env.SLUICE_SHUTDOWN_GRACE_S ?? 10) * 1000);
      await counters.close();
      await store.close();
    } catch (err) {
      // A stop that fails must still end the process, and say so: exit 1 instead of hanging on.
      log.error({ err: (err as Error).message }, 'shutdown failed');
      process.exit(1);
    }
    log.info({ rows_written: gateway.deps.recorder.written, rows_spooled: gateway.deps.recorder.pending }, 'stopped; every row written or spooled for the next start');
    process.exit(0);
  };
  // `on`, not `once`: a second signal must reach stop() too (without a handler it would kill the
  // process and lose the rows still queued).
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}
