// One request/response pair as the sim handles it, and the few ways to write to it: a paced wait
// that ends when the exchange does, one SSE event per write with backpressure respected, and a
// cut of the socket after what was written reached it. Handlers go through these; none of them
// may buffer a stream or keep writing once the exchange is done.

import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { chatErrorBody, sendJson } from './errors.ts';

export interface SimRequest {
  method: string;
  /** Path including the query string. */
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  /** The parsed body, or undefined when it is empty or not JSON. */
  json: any;
  /** True when the caller closed the connection before the response finished. */
  aborted: boolean;
}

export interface Exchange {
  sim: SimRequest;
  req: IncomingMessage;
  res: ServerResponse;
  /** Set when the response finished or the connection closed: generation loops stop. */
  done: boolean;
  /** The sim cut the connection itself (drop-after): not a caller abort. */
  droppedBySim: boolean;
  abort: AbortController | undefined;
  bodyBytes: number;
  /** Runs once when the exchange ends, before the 'closed' event: a generation settles what it produced. */
  onEnd: (() => void) | undefined;
}

function signal(x: Exchange): AbortSignal {
  if (x.abort === undefined) x.abort = new AbortController();
  return x.abort.signal;
}

/** Sleeps unless the exchange ends first; false when it ended. */
export async function pause(x: Exchange, ms: number): Promise<boolean> {
  if (ms > 0) {
    try {
      await sleep(ms, undefined, { signal: signal(x) });
    } catch {
      return false;
    }
  }
  return !x.done;
}

/** Resolves once the response can take more, or is gone. */
export function waitDrain(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/** One SSE event per write; waits for drain when the socket pushes back. False once the exchange ended. */
export async function send(x: Exchange, event: string): Promise<boolean> {
  if (x.done) return false;
  if (!x.res.write(event)) await waitDrain(x.res);
  return !x.done;
}

const EMPTY = Buffer.alloc(0);

/** Destroys the socket once what was written so far has reached it. */
export function drop(x: Exchange): Promise<void> {
  x.droppedBySim = true;
  const sock = x.req.socket as Socket;
  return new Promise((resolve) => {
    if (sock.destroyed) return resolve();
    sock.write(EMPTY, () => {
      sock.destroy();
      resolve();
    });
  });
}

/** A bug in the sim itself: answer 500 if nothing was sent yet, else cut the connection. */
export function fail(x: Exchange, err: unknown): void {
  if (!x.res.headersSent) sendJson(x.res, 500, chatErrorBody(500, `simulated router bug: ${(err as Error)?.message ?? String(err)}`));
  else x.res.destroy();
}

/** The bearer token of `authorization: Bearer …`, or undefined when there is none. */
export function bearerOf(headers: IncomingHttpHeaders): string | undefined {
  const auth = headers.authorization;
  if (typeof auth !== 'string' || auth.length <= 7 || auth.slice(0, 7).toLowerCase() !== 'bearer ') return undefined;
  const k = auth.slice(7).trim();
  return k === '' ? undefined : k;
}

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
export function randomId(n: number): string {
  const bytes = randomBytes(n);
  let s = '';
  for (let i = 0; i < n; i++) s += ALNUM[bytes[i]! % 62];
  return s;
}
