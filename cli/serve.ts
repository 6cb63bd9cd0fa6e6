// `sluice serve`: reads the settings once (lib/settings.ts) and the configuration, builds the
// gateway from them, listens, and on SIGTERM or SIGINT stops accepting, lets open streams finish
// within a grace period, flushes every row and exits 0; a second signal ends the grace period at
// once (rows still flushed). Start-up problems with the configuration or the settings exit 78,
// every problem listed, each naming what is wrong.

import { resolve } from 'node:path';
import { loadConfig } from '../lib/config.ts';
import type { Counters } from '../lib/counters/counters.ts';
import { MemoryCounters } from '../lib/counters/memory.ts';
import { createLogger } from '../lib/log.ts';
import { createGateway, VERSION } from '../lib/server.ts';
import { hostPort, readSettings } from '../lib/settings.ts';
import { openStore } from '../lib/store/open.ts';
import { UsageError } from './errors.ts';

export function parseListen(value: string): { host: string; port: number } {
  const hp = hostPort(value);
  if (!hp) throw new UsageError(`--listen must be HOST:PORT (e.g. 127.0.0.1:8080 or [::1]:8080), got "${value}"`);
  return hp;
}

/** Redis counters when a URL is set (SLUICE_REDIS_URL), else counters in this process. */
export async function openCounters(redisUrl: string | undefined, log: ReturnType<typeof createLogger>): Promise<Counters> {
  if (redisUrl) {
    const { RedisCounters } = await import('../lib/counters/redis.ts');
    return new RedisCounters({ url: redisUrl, log });
  }
  return new MemoryCounters();
}

export async function serve(opts: { config?: string; listen?: string; env?: NodeJS.ProcessEnv; graceMs?: number }): Promise<void> {
  // Settings first, read once: every bad one is reported together (exit 78) before any store or
  // Redis connection is opened. --config and --listen win over SLUICE_CONFIG_DIR and SLUICE_LISTEN.
  const settings = readSettings(opts.env ?? process.env);
  const { host, port } = parseListen(opts.listen ?? settings.listen);
  const config = loadConfig(resolve(opts.config ?? settings.configDir));
  const log = createLogger(settings.logLevel);
  const dataDir = resolve(settings.dataDir);
  const store = await openStore({ databaseUrl: settings.databaseUrl, dataDir });
  const counters = await openCounters(settings.redisUrl, log);
  if (store.kind === 'postgres' && counters.kind === 'memory') {
    log.warn('Postgres without Redis: limits, budgets and the IP block are counted per process, so run a single instance only (set SLUICE_REDIS_URL to scale out)');
  }
  const gateway = await createGateway({ config, store, counters, log, settings, dataDir });
  const addr = await gateway.listen(host, port);
  log.info({ version: VERSION, listen: `${addr.address}:${addr.port}`, store: store.kind, counters: counters.kind, profiles: [...config.profiles.keys()] }, 'sluice listening');

  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
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
      await gateway.close(opts.graceMs ?? settings.shutdownGraceMs);
      await counters.close();
      await store.close();
    } catch (err) {
      // A stop that fails must still end the process, and say so: exit 1 instead of hanging on.
      log.error({ err }, 'shutdown failed');
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
