// The soft drain's parts (lib/server.ts drainAndClose puts them in order): which kept-alive
// connection is told `connection: close` when, and the waits between the steps. A draining process
// does not tell every connection at once: its clients would all reconnect in the same few
// milliseconds, and the process taking over would meet them in one burst while the draining one
// still answers its last request on each. It spreads them over DRAIN_SPREAD_MS instead, oldest
// connection first, the way Envoy's gradual drain does; then every response says it, and a
// connection left idle is closed after DRAIN_IDLE_MS.

import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Closes } from '../handler.ts';

/**
 * How long a draining process spreads the `connection: close` of the connections it had open: the
 * i-th of n (oldest first) is told from i/n of it on. A second spreads a front proxy's hundred
 * connections 10 ms apart; under 700 requests a second over 32 connections the new process's
 * first 20 requests took a median 2.8× the steady p50 instead of 14× (docs/benchmarks.md).
 */
export const DRAIN_SPREAD_MS = 1_000;

/**
 * How long a draining process keeps an idle connection open once every connection has been told:
 * long enough that a busy client or front proxy sends its next request on it and is told
 * `connection: close`, short enough that a draining process lets go of idle connections quickly.
 * 2 s gave no transport error in any run of a handover under 700 requests a second; closing idle
 * connections at once gave 2 to 10 per handover.
 */
export const DRAIN_IDLE_MS = 2_000;

/** A socket of the server, with the response Node is writing on it (node:http's own field, read by clientError too). */
export type HttpSocket = Socket & { _httpMessage?: ServerResponse | null };

/** Once the spread is over: every connection is told. */
export const closesAll: Closes = () => true;

/**
 * The spread's schedule over the connections open when the drain begins (a Set keeps them in the
 * order they were accepted): the i-th of n is due at `startMs + spreadMs * i / n`, by `now`'s clock.
 * `lastDueMs` is how long after the start the last one is due (0 for a single connection). A
 * connection not in the schedule (none can be accepted once the listening handle is gone) is due.
 */
export function spreadSchedule(sockets: Iterable<Socket>, startMs: number, spreadMs: number, now: () => number): { closes: Closes; lastDueMs: number } {
  const dueAt = new WeakMap<Socket, number>();
  const all = [...sockets];
  const step = all.length > 0 ? spreadMs / all.length : 0;
  all.forEach((socket, i) => dueAt.set(socket, startMs + step * i));
  return {
    closes: (socket) => now() >= (dueAt.get(socket) ?? -Infinity),
    lastDueMs: step * Math.max(0, all.length - 1),
  };
}

/**
 * The drain's word to the responses already being answered: each whose head is still to be written
 * on a connection `closes` names says `connection: close`, so a client or front proxy never sends
 * another request on a connection this process is about to close. The connections are known per
 * connection, not per request: a Set of the responses in flight (an add and a delete per request)
 * cost 2 KB chat 37 µs of CPU per request under load (bench, e8ddbb8), most of it in V8's collector.
 */
export function closeAfterResponse(sockets: Iterable<HttpSocket>, closes: Closes): void {
  for (const socket of sockets) {
    const res = socket._httpMessage;
    if (res && !res.headersSent && closes(socket)) res.setHeader('connection', 'close');
  }
}

/** Waits `ms`, or less when `cutShort` resolves first; the timer never outlives the wait. */
export async function pause(ms: number, cutShort: Promise<void>): Promise<void> {
  if (ms <= 0) return;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))), cutShort]);
  clearTimeout(timer);
}

/** Waits until no request is in flight, `ms` pass, or `cutShort` resolves (a second signal). */
export async function untilIdle(handler: { inFlight: number; idle(): Promise<void> }, ms: number, cutShort: Promise<void> = new Promise(() => {})): Promise<void> {
  if (handler.inFlight === 0) return;
  await pause(ms, Promise.race([handler.idle(), cutShort]));
}
