// `sluice serve`: reads the settings once (lib/settings.ts) and the configuration, builds the
// gateway from them, warms it up (lib/lifecycle/warmup.ts), takes over the embedded counters of the process
// before it (lib/counters/carry.ts), then listens (on systemd's socket when one is passed,
// lib/lifecycle/systemd.ts) and reports ready. On SIGTERM or SIGINT it drains (lib/server.ts close): no new
// connections, open streams run to their end within SLUICE_SHUTDOWN_GRACE_S, every row flushed,
// exit 0; a second signal ends the drain at once (rows still flushed). Start-up problems with the
// configuration or the settings exit 78, every problem listed, each naming what is wrong.

import { resolve } from 'node:path';
import { loadConfig } from '../lib/config.ts';
import type { Counters } from '../lib/counters/counters.ts';
import { MemoryCounters } from '../lib/counters/memory.ts';
import { CounterCarry } from '../lib/counters/carry.ts';
import { createLogger } from '../lib/log.ts';
import { createGateway, VERSION } from '../lib/server.ts';
import { inheritedSocket, reportReady } from '../lib/lifecycle/systemd.ts';
import { warmUp } from '../lib/lifecycle/warmup.ts';
import { readTraceSettings } from '../lib/trace/settings.ts';
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
  const env = opts.env ?? process.env;
  // Settings first, read once: every bad one is reported together (exit 78) before any store or
  // Redis connection is opened. --config and --listen win over SLUICE_CONFIG_DIR and SLUICE_LISTEN.
  const settings = readSettings(env);
  // The OTEL_* variables (lib/trace/settings.ts): null unless an OTLP endpoint is set; a bad one exits 78 too.
  const trace = readTraceSettings(env);
  const { host, port } = parseListen(opts.listen ?? settings.listen);
  const config = loadConfig(resolve(opts.config ?? settings.configDir));
  const log = createLogger(settings.logLevel);
  // A socket passed by systemd (sluice.socket) wins over --listen: it outlives this process.
  const fd = inheritedSocket(env);
  const dataDir = resolve(settings.dataDir);
  const store = await openStore({ databaseUrl: settings.databaseUrl, dataDir });
  const counters = await openCounters(settings.redisUrl, log);
  if (store.kind === 'postgres' && counters.kind === 'memory') {
    log.warn('Postgres without Redis: limits, budgets and the IP block are counted per process, so run a single instance only (set SLUICE_REDIS_URL to scale out)');
  }
  const gateway = await createGateway({ config, store, counters, log, settings, dataDir, trace });

  // Ready means warm: the hot path runs ~1,000 times before the first client's request does.
  if (settings.warmupRequests > 0) {
    try {
      log.info({ ...(await warmUp(settings.warmupRequests, settings)) }, 'warmed up');
    } catch (err) {
      log.warn({ err }, 'warm-up failed: taking traffic cold');
    }
  }
  // And connections to the routers open in the upstream pool: no handshake on a client's request.
  log.info({ ...(await gateway.preconnect()) }, 'upstream connections opened');
  // The first requests after a start find their key and their profile's spend in memory, not in
  // the store: the keys used in the last day, and each profile's windows read once.
  gateway.deps.keyCache.prime(await store.listKeys(), Date.now() - 86_400_000);
  await Promise.all([...config.profiles.values()].map((p) => gateway.deps.budget.state(p)));
  // Embedded counters carry over: the previous process's windows, IP block and sessions, and
  // later the counts of a process still draining beside this one (lib/counters/carry.ts).
  const carry = counters instanceof MemoryCounters ? new CounterCarry({ counters, dataDir, log }) : null;
  carry?.load();
  carry?.watch();
  const addr = fd === null ? await gateway.listen(host, port) : await gateway.listenFd(fd);
  log.info({
    version: VERSION, listen: `${addr.address}:${addr.port}`, socket: fd === null ? 'own' : 'systemd',
    store: store.kind, counters: counters.kind, profiles: [...config.profiles.keys()],
  }, 'sluice ready');
  reportReady(env, log);

  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second signal during the drain: end the open streams now, but still flush every row.
      log.warn({ signal }, 'second signal: ending open streams now; rows are still flushed');
      gateway.hurry();
      return;
    }
    stopping = true;
    try {
      // The listening handle goes at once, inside close(); the rest of the drain runs on.
      // The counts so far go to a process already running beside this one (or the next to start)
      // as the drain begins, again once it has told every connection to close, and at the end.
      const drained = gateway.close(opts.graceMs ?? settings.shutdownGraceMs, () => void carry?.write());
      log.info({ signal }, 'draining: no new connections; open streams may finish');
      void carry?.write();
      await drained;
      // And what the drain counted after (once the writes before it are on disk too).
      await carry?.write();
      carry?.close();
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
