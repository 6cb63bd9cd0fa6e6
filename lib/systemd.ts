// The two things sluice takes from systemd, both optional: the listening socket a socket unit
// passes (sd_listen_fds: `LISTEN_FDS` sockets from fd 3, meant for the process `LISTEN_PID`), so the
// socket outlives each process and two generations can share it during an upgrade; and the
// readiness report of a `Type=notify` unit. Node cannot send the notify datagram itself (node:dgram
// has no unix sockets), so the report goes through `systemd-notify --ready`, which the unit must
// accept from a child (`NotifyAccess=all`). Without systemd both are no-ops.

import { spawn } from 'node:child_process';
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
 * Tells systemd the service is ready (a `Type=notify` unit's start job ends here). Resolves once
 * `systemd-notify` has run; a failure is logged, never thrown: the service works on, and systemd's
 * TimeoutStartSec says the rest.
 */
export function notifyReady(env: NodeJS.ProcessEnv, log: Logger): Promise<void> {
  if (!env.NOTIFY_SOCKET) return Promise.resolve();
  return new Promise((resolve) => {
    const child = spawn('systemd-notify', ['--ready'], { stdio: 'ignore', env });
    child.once('error', (err) => {
      log.error({ err }, 'systemd-notify could not be run: systemd is not told the service is ready');
      resolve();
    });
    child.once('exit', (code) => {
      if (code !== 0) log.error({ code }, 'systemd-notify --ready failed: is NotifyAccess=all set in the unit?');
      resolve();
    });
  });
}
