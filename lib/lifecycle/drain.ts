// The soft drain's parts (lib/server.ts drainAndClose puts them in order): which kept-alive
// connection is told `connection: close` when, and the waits between the steps. A draining process
// does not tell every connection at once: its clients would all reconnect in the same few
// milliseconds, and the process taking over would meet them in one burst while the draining one
// still answers its last request on each. It spreads them over DRAIN_SPREAD_MS instead, one
// connection a step, the way Envoy's gradual drain does; then every response says it, and a
// connection left idle is closed after DRAIN_IDLE_MS.

import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Closes } from '../handler.ts';

/**
 * How long a draining process spreads the `connection: close` of the connections it had open: n
 * of them get n steps of it, and in each step the first connection to answer a request is told.
 * A second spreads a front proxy's hundred connections 10 ms apart; under 700 requests a second
 * over 32 connections the new process's first 20 requests took 0.9 to 1.3× the steady p50 in the
 * last runs on a quiet machine, against 7.7 to 19× told at once on a busier day (docs/benchmarks.md).
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
 * The spread over `count` connections (those open when the drain begins): `spreadMs` is cut into
 * `count` steps from `startMs`, by `now`'s clock, and in each step the first connection asked about
 * (the first to answer a request) is told; a step in which none is passes unused. A connection told
 * stays told. One a step, not one due per step: a client's pool sends its next request on its next
 * connection when the one told is reconnecting, and that one, due too, would be told in turn, and
 * the next: a whole pool moving at once, the burst the spread is there to avoid (bench:handover).
 * `lastStepMs` is when the last step begins (0 for a single connection or no spread).
 */
export function spreadSteps(count: number, startMs: number, spreadMs: number, now: () => number): { closes: Closes; lastStepMs: number } {
  if (count <= 1 || spreadMs <= 0) return { closes: closesAll, lastStepMs: 0 };
  const step = spreadMs / count;
  const told = new WeakSet<Socket>();
  let lastStep = -1;
  return {
    closes(socket) {
      if (told.has(socket)) return true;
      const current = Math.floor((now() - startMs) / step);
      if (current <= lastStep) return false;
      lastStep = current;
      told.add(socket);
      return true;
    },
    lastStepMs: step * (count - 1),
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
