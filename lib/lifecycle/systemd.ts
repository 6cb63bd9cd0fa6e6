// The two things sluice shares with systemd, both optional: the listening socket a socket unit
// passes (sd_listen_fds: `LISTEN_FDS` sockets from fd 3, meant for the process `LISTEN_PID`), so the
// socket outlives each process and two generations can share it during an upgrade; and the report
// that the service is ready, a file in the unit's runtime directory (systemd/sluice@.service waits
// for it). Without systemd both are no-ops.

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Logger } from 'pino';

/** The first fd systemd passes (SD_LISTEN_FDS_START). */
export const LISTEN_FDS_START = 3;

/**
 * The inherited listening socket's fd, or null when systemd passed none to this process. The
 * variables are removed once read, so a child this process starts does not take them as its own.
 * More than one socket is refused: sluice listens on one address.
 */
export function inheritedSocket(env: NodeJS.ProcessEnv, pid = process.pid): number | null {
  const fds = env.LISTEN_FDS;
  const forPid = env.LISTEN_PID;
  delete env.LISTEN_FDS;
  delete env.LISTEN_PID;
  delete env.LISTEN_FDNAMES;
  if (fds === undefined || forPid === undefined || Number(forPid) !== pid) return null;
  if (fds !== '1') throw new Error(`systemd passed ${fds} sockets (LISTEN_FDS); sluice listens on one: give the socket unit one ListenStream=`);
  return LISTEN_FDS_START;
}

/**
 * Says the service is ready: writes `ready` (this process's pid) into the unit's runtime
 * directory (`RUNTIME_DIRECTORY`, set by `RuntimeDirectory=`), which the unit's `ExecStartPost=`
 * waits for, so `systemctl start` returns only now. A file, not sd_notify: the notify datagram
 * would have to come from a child (`systemd-notify`), which needs `NotifyAccess=all`, a wider
 * opening of the sandbox than a file in a directory only this unit can write. A failure is
 * logged, never thrown: the service works on, and TimeoutStartSec says the rest.
 */
export function reportReady(env: NodeJS.ProcessEnv, log: Logger): void {
  const dir = env.RUNTIME_DIRECTORY?.split(':')[0];
  if (!dir) return;
  try {
    writeFileSync(join(dir, READY_FILE), `${process.pid}\n`, { mode: 0o600 });
  } catch (err) {
    log.error({ err }, 'the ready file could not be written: systemd is not told the service is ready');
  }
}

/** The file reportReady writes in the runtime directory. */
export const READY_FILE = 'ready';
