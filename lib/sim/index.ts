// The simulated upstream router: a plain node:http stand-in for OpenRouter's /api/v1 (chat
// completions, the Anthropic-shaped messages endpoint, the stateless Responses API, the models catalog, key management, the
// key readout and generation lookups), steerable per request through the `x-sim` header and from
// tests through setFault / setGenerationDelay. This file starts the server, reads bodies and
// dispatches; each route lives in its own file. It must never log per request or reach the network.

import { EventEmitter } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveCatalog } from './catalog.ts';
import { METHOD_NOT_ALLOWED, NOT_FOUND, sendJson } from './errors.ts';
import { fail, type Exchange, type SimRequest } from './exchange.ts';
import { Faults, type FaultScope, type SimFault } from './faults.ts';
import { Generations, type GenerationData } from './generation-log.ts';
import { serveGeneration } from './generations.ts';
import { inference } from './inference.ts';
import { Keyring } from './keyring.ts';
import { serveCurrentKey, serveKeys } from './management.ts';
import type { SimState } from './state.ts';
import { Ledger } from './usage.ts';

export { SIM_CATALOG, type CatalogModel } from './catalog.ts';
export { SIM_TOOL_INPUT } from './content.ts';
export type { SimRequest } from './exchange.ts';
export type { FaultScope, SimFault } from './faults.ts';
export type { GenerationData } from './generation-log.ts';

export interface SimulatedRouter {
  /** http://host:port, no trailing slash. */
  url: string;
  port: number;
  received: SimRequest[];
  /** 'request'(SimRequest) once the body is read; 'closed'(SimRequest) when the response finished or the connection closed. */
  events: EventEmitter;
  /** All-time cost (USD) the sim charged to this bearer key. */
  usageByKey(key: string): number;
  /** The generation record (the lookup's `data`) whether or not its delay has passed; undefined if unknown. */
  generation(id: string): GenerationData | undefined;
  /** How long after a generation ended GET /api/v1/generation keeps answering 404 (ms, on the sim's clock). */
  setGenerationDelay(ms: number): void;
  /** Arms a fault for every call of `scope` (or the next `times`), or clears it with null. */
  setFault(scope: FaultScope, fault: SimFault | null): void;
  close(): Promise<void>;
}

export interface SimOptions {
  host?: string;
  /** 0 (default) picks a free port. */
  port?: number;
  /** Bearer that the management API (/api/v1/keys) accepts; without it that API answers 401. */
  provisioningKey?: string;
  /** Keep every request in `received` (default true; the benchmark turns it off). */
  record?: boolean;
  /** Clock in epoch milliseconds (ids, `created`, usage periods, generation delays); defaults to Date.now. */
  now?: () => number;
  /** Milliseconds after a generation ended before its lookup answers 200 (default 1500). */
  generationDelayMs?: number;
}

/** Routes a request by path; the query string goes only to the routes that read one. */
function dispatch(x: Exchange, state: SimState): void | Promise<void> {
  const path = x.sim.path;
  const q = path.indexOf('?');
  const pathname = q < 0 ? path : path.slice(0, q);
  const query = q < 0 ? '' : path.slice(q + 1);
  const method = x.sim.method;
  switch (pathname) {
    case '/api/v1/chat/completions':
      return method === 'POST' ? inference(x, state, 'chat') : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'POST' });
    case '/api/v1/messages':
      return method === 'POST' ? inference(x, state, 'messages') : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'POST' });
    case '/api/v1/responses':
      return method === 'POST' ? inference(x, state, 'responses') : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'POST' });
    case '/api/v1/models':
      return method === 'GET' ? serveCatalog(x) : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'GET' });
    case '/api/v1/key':
    case '/api/v1/auth/key':
      return method === 'GET' ? serveCurrentKey(x, state) : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'GET' });
    case '/api/v1/generation':
      return method === 'GET' ? serveGeneration(x, state, query) : sendJson(x.res, 405, METHOD_NOT_ALLOWED, { allow: 'GET' });
    case '/api/v1/keys':
      return serveKeys(x, state, pathname, query);
    default:
      if (pathname.startsWith('/api/v1/keys/') && pathname.indexOf('/', 13) < 0) return serveKeys(x, state, pathname, '');
      return sendJson(x.res, 404, NOT_FOUND);
  }
}

export async function startSimulatedRouter(opts: SimOptions = {}): Promise<SimulatedRouter> {
  const host = opts.host ?? '127.0.0.1';
  const record = opts.record ?? true;
  const now = opts.now ?? Date.now;
  const state: SimState = {
    now,
    provisioningKey: opts.provisioningKey,
    keys: new Keyring(),
    ledger: new Ledger(now),
    generations: new Generations(now, opts.generationDelayMs ?? 1500),
    faults: new Faults(),
  };
  const events = new EventEmitter();
  events.setMaxListeners(0);
  const received: SimRequest[] = [];
  /** Set by close(): exchanges it cuts were not aborted by their callers. */
  let closing = false;

  const server = createServer((req, res) => {
    const sim: SimRequest = { method: req.method ?? 'GET', path: req.url ?? '/', headers: req.headers, body: '', json: undefined, aborted: false };
    const x: Exchange = { sim, req, res, done: false, droppedBySim: false, abort: undefined, bodyBytes: 0, onEnd: undefined };
    res.once('close', () => {
      x.done = true;
      if (!res.writableFinished && !x.droppedBySim && !closing) sim.aborted = true;
      x.abort?.abort();
      // Settle before 'closed', so a test that saw 'closed' finds the charge and the record.
      x.onEnd?.();
      events.emit('closed', sim);
    });
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      parts.push(c);
      x.bodyBytes += c.length;
    });
    req.on('error', () => {}); // a caller vanishing mid-body surfaces as res 'close'
    req.on('end', () => {
      if (x.bodyBytes > 0) {
        sim.body = parts.length === 1 ? parts[0]!.toString('utf8') : Buffer.concat(parts, x.bodyBytes).toString('utf8');
        const c = sim.body.charCodeAt(0);
        if (c === 123 /* { */ || c === 91 /* [ */ || c === 32 || c === 10 || c === 13 || c === 9) {
          try {
            sim.json = JSON.parse(sim.body);
          } catch {
            sim.json = undefined;
          }
        }
      }
      if (record) received.push(sim);
      events.emit('request', sim);
      let p: void | Promise<void>;
      try {
        p = dispatch(x, state);
      } catch (err) {
        fail(x, err);
        return;
      }
      if (p !== undefined) p.catch((err: unknown) => fail(x, err));
    });
  });
  server.on('clientError', (_err, socket) => socket.destroy());

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ port: opts.port ?? 0, host, backlog: 4096 }, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  return {
    url: `http://${urlHost}:${port}`,
    port,
    received,
    events,
    usageByKey: (key) => state.ledger.total(key),
    generation: (id) => state.generations.data(id),
    setGenerationDelay: (ms) => state.generations.setDelay(ms),
    setFault: (scope, fault) => state.faults.set(scope, fault),
    close: () =>
      new Promise<void>((resolve) => {
        closing = true;
        server.close(() => resolve());
        // Hung and silent exchanges would otherwise hold the server open forever.
        server.closeAllConnections();
      }),
  };
}
