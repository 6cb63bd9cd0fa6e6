// Faults on demand for the management and readout side: a test arms one per scope ('keys' for
// /api/v1/keys*, 'key' for the /api/v1/key readout, 'generation' for /api/v1/generation), for
// every call or only the next `times`. gate() applies the armed fault and then the request's own
// `x-sim` status=/hang/delay-ms= directives before a route answers. A hang never answers; only
// the caller or sim.close() ends it. Inference routes do not pass through here.

import { parseDirectives } from './directives.ts';
import { managementErrorBody, retryHeaders, sendJson } from './errors.ts';
import { pause, type Exchange } from './exchange.ts';

export type FaultScope = 'keys' | 'key' | 'generation';

export type SimFault =
  | { status: 401 | 403 | 429 | 500 | 502 | 503; times?: number }
  | { hang: true; times?: number }
  | { delayMs: number; times?: number };

const SCOPES: ReadonlySet<string> = new Set(['keys', 'key', 'generation']);
const STATUSES: ReadonlySet<number> = new Set([401, 403, 429, 500, 502, 503]);

interface Armed { status: number; hang: boolean; delayMs: number; left: number }

/** Checks a fault given from outside; throws a TypeError naming what is wrong. */
function armed(fault: SimFault): Armed {
  if (fault === null || typeof fault !== 'object') throw new TypeError('setFault: the fault must be an object or null');
  const f = fault as Record<string, unknown>;
  const times = f.times;
  if (times !== undefined && !(Number.isInteger(times) && (times as number) >= 1)) throw new TypeError('setFault: times must be a positive integer');
  const left = times === undefined ? Infinity : (times as number);
  const kinds = ['status', 'hang', 'delayMs'].filter((k) => f[k] !== undefined);
  if (kinds.length !== 1) throw new TypeError('setFault: give exactly one of status, hang or delayMs');
  if (f.status !== undefined) {
    if (!STATUSES.has(f.status as number)) throw new TypeError('setFault: status must be one of 401, 403, 429, 500, 502, 503');
    return { status: f.status as number, hang: false, delayMs: 0, left };
  }
  if (f.hang !== undefined) {
    if (f.hang !== true) throw new TypeError('setFault: hang must be true');
    return { status: 0, hang: true, delayMs: 0, left };
  }
  const ms = f.delayMs;
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) throw new TypeError('setFault: delayMs must be a non-negative number');
  return { status: 0, hang: false, delayMs: ms, left };
}

export class Faults {
  #armed = new Map<FaultScope, Armed>();

  set(scope: FaultScope, fault: SimFault | null): void {
    if (!SCOPES.has(scope)) throw new TypeError(`setFault: unknown scope ${JSON.stringify(scope)} (keys, key or generation)`);
    if (fault === null) this.#armed.delete(scope);
    else this.#armed.set(scope, armed(fault));
  }

  /** The fault for this call, if any; counts it against `times` and clears the scope after the last. */
  take(scope: FaultScope): Armed | undefined {
    const f = this.#armed.get(scope);
    if (f === undefined) return undefined;
    if (--f.left <= 0) this.#armed.delete(scope);
    return f;
  }
}

/**
 * Runs the armed fault of `scope` and the request's pre-response directives. True when the route
 * should answer normally; false when the exchange was answered with an error, hangs, or ended
 * while waiting.
 */
export async function gate(x: Exchange, faults: Faults | undefined, scope?: FaultScope): Promise<boolean> {
  const f = scope === undefined ? undefined : faults?.take(scope);
  const raw = x.sim.headers['x-sim'];
  const d = raw === undefined ? undefined : parseDirectives(raw);
  if (f?.hang || d?.hang) return false; // never answer; 'closed' fires when the caller or close() ends it
  const delay = (f?.delayMs ?? 0) + (d?.delayMs ?? 0);
  if (!(await pause(x, delay))) return false;
  const status = f !== undefined && f.status !== 0 ? f.status : (d?.status ?? 0);
  if (status === 0) return true;
  sendJson(x.res, status, managementErrorBody(status), retryHeaders(status));
  return false;
}
