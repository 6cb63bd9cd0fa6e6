// The router's management side (protocols.md §4, §1.7): the provisioning key's /api/v1/keys
// calls, a profile key's own readout (GET /api/v1/key) and generation lookups. Every call has a
// timeout, and every failure becomes a ManagementError naming the profile and the cause (status and
// the router's message, unreachable, timed out). A key never appears in an error, a log or a result.

import { withSlash } from '../config.ts';
import type { RouterUsage } from '../store/store.ts';

/** The router's key object (protocols.md §4.1), the fields sluice reads. */
export interface ApiKey extends RouterUsage {
  hash: string;
  name: string;
  label: string | null;
  disabled: boolean;
  limit: number | null;
  limit_remaining: number | null;
  limit_reset: string | null;
}

/** GET /api/v1/key (protocols.md §4.3), the fields sluice reads. */
export type KeyReadout = Omit<ApiKey, 'hash' | 'name' | 'disabled'>;

export type Cause = 'http' | 'unreachable' | 'timeout' | 'bad_response';

export class ManagementError extends Error {
  readonly profile: string;
  readonly kind: Cause;
  readonly status: number | undefined;
  constructor(profile: string, cause: Cause, detail: string, status?: number) {
    super(`profile ${profile}: ${detail}`);
    this.name = 'ManagementError';
    this.profile = profile;
    this.kind = cause;
    this.status = status;
  }

  /** The router is away or overloaded (worth retrying later), as opposed to refusing this call. */
  get outage(): boolean {
    return this.kind === 'unreachable' || this.kind === 'timeout' || this.status === 429 || (this.status ?? 0) >= 500;
  }
}

/** Anything shaped like a router secret in text the router sent back is masked before it is shown. */
function scrub(text: string): string {
  return text.replace(/sk-[A-Za-z0-9_-]{8,}/g, '[redacted]').slice(0, 300);
}

function num(v: unknown): number {
  return typeof v === 'number' && Number.isFinite(v) ? v : 0;
}

function numOrNull(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function readout(d: any): KeyReadout {
  return {
    label: typeof d?.label === 'string' ? d.label : null,
    limit: numOrNull(d?.limit),
    limit_remaining: numOrNull(d?.limit_remaining),
    limit_reset: typeof d?.limit_reset === 'string' ? d.limit_reset : null,
    usage: num(d?.usage),
    usage_daily: num(d?.usage_daily),
    usage_weekly: num(d?.usage_weekly),
    usage_monthly: num(d?.usage_monthly),
  };
}

function apiKey(d: any): ApiKey {
  return { hash: String(d?.hash ?? ''), name: String(d?.name ?? ''), disabled: d?.disabled === true, ...readout(d) };
}

/** Router keys listed per page by GET /api/v1/keys (protocols.md §4.2). */
const PAGE = 100;
/** A list longer than this many pages is a router bug, not a key count. */
const MAX_PAGES = 1000;

export interface Call {
  router: URL;
  profile: string;
  /** The bearer: the provisioning key for /keys*, the profile's own key otherwise. */
  bearer: string;
}

export class ManagementClient {
  private readonly timeoutMs: number;

  constructor(opts: { timeoutMs: number }) {
    this.timeoutMs = opts.timeoutMs;
  }

  /** One call; 2xx → parsed body, `allow404` → undefined on 404, anything else → ManagementError. */
  private async call(c: Call, method: string, path: string, o: { body?: unknown; allow404?: boolean; what: string }): Promise<any> {
    const url = new URL(path, withSlash(c.router));
    const what = `${o.what} (${method} ${url.pathname})`;
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers: { authorization: `Bearer ${c.bearer}`, ...(o.body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: o.body === undefined ? undefined : JSON.stringify(o.body),
        signal: AbortSignal.timeout(this.timeoutMs),
      });
    } catch (err) {
      const e = err as Error & { cause?: { code?: string; message?: string } };
      if (e.name === 'TimeoutError' || e.name === 'AbortError') {
        throw new ManagementError(c.profile, 'timeout', `${what}: the router at ${url.origin} did not answer within ${this.timeoutMs / 1000} s`);
      }
      throw new ManagementError(c.profile, 'unreachable', `${what}: the router at ${url.origin} is unreachable (${e.cause?.code ?? e.cause?.message ?? e.message})`);
    }
    let text: string;
    try {
      text = await res.text();
    } catch (err) {
      const timedOut = (err as Error).name === 'TimeoutError' || (err as Error).name === 'AbortError';
      throw new ManagementError(c.profile, timedOut ? 'timeout' : 'unreachable', `${what}: the answer was cut off (${timedOut ? `no end within ${this.timeoutMs / 1000} s` : (err as Error).message})`);
    }
    if (res.status === 404 && o.allow404) return undefined;
    let json: any;
    try {
      json = text ? JSON.parse(text) : undefined;
    } catch {
      json = undefined;
    }
    if (!res.ok) {
      const message = typeof json?.error?.message === 'string' ? json.error.message : text.trim() || res.statusText;
      throw new ManagementError(c.profile, 'http', `${what}: the router answered ${res.status} (${scrub(message)})`, res.status);
    }
    if (json === undefined || typeof json !== 'object') throw new ManagementError(c.profile, 'bad_response', `${what}: the router's answer is not JSON`);
    return json;
  }

  /** Every key at the router, disabled ones included (GET /api/v1/keys, page by page). */
  async listKeys(c: Call): Promise<ApiKey[]> {
    const all: ApiKey[] = [];
    for (let page = 0; page < MAX_PAGES; page++) {
      const json = await this.call(c, 'GET', `api/v1/keys?include_disabled=true&offset=${page * PAGE}`, { what: "listing the router's keys" });
      const data: unknown[] = Array.isArray(json.data) ? json.data : [];
      all.push(...data.map(apiKey));
      if (data.length < PAGE) break;
    }
    return all;
  }

  /** POST /api/v1/keys: the new key's object and its secret (shown by the router only this once). */
  async createKey(c: Call, body: { name: string; limit: number; limit_reset: 'daily' }): Promise<{ key: ApiKey; secret: string }> {
    const json = await this.call(c, 'POST', 'api/v1/keys', { body, what: `creating key ${body.name}` });
    if (typeof json.key !== 'string' || !json.data) throw new ManagementError(c.profile, 'bad_response', `creating key ${body.name}: the router's answer holds no key`);
    return { key: apiKey(json.data), secret: json.key };
  }

  /** GET /api/v1/keys/{hash}; undefined when the router has no such key. */
  async getKey(c: Call, hash: string): Promise<ApiKey | undefined> {
    const json = await this.call(c, 'GET', `api/v1/keys/${encodeURIComponent(hash)}`, { allow404: true, what: 'reading the key' });
    return json === undefined ? undefined : apiKey(json.data);
  }

  /** PATCH /api/v1/keys/{hash}; undefined when the router has no such key. */
  async patchKey(c: Call, hash: string, body: { limit: number }): Promise<ApiKey | undefined> {
    const json = await this.call(c, 'PATCH', `api/v1/keys/${encodeURIComponent(hash)}`, { body, allow404: true, what: 'changing the limit' });
    return json === undefined ? undefined : apiKey(json.data);
  }

  /** GET /api/v1/key with the profile's own key: its limit and usage. */
  async currentKey(c: Call): Promise<KeyReadout> {
    const json = await this.call(c, 'GET', 'api/v1/key', { what: 'reading the usage of its upstream key' });
    return readout(json.data);
  }

  /** GET /api/v1/generation?id=: the router's total cost, or undefined while it has no record (404). */
  async generationCost(c: Call, id: string): Promise<number | undefined> {
    const json = await this.call(c, 'GET', `api/v1/generation?id=${encodeURIComponent(id)}`, { allow404: true, what: `looking up generation ${id}` });
    if (json === undefined) return undefined;
    const cost = json.data?.total_cost;
    if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) throw new ManagementError(c.profile, 'bad_response', `looking up generation ${id}: the record has no total_cost`);
    return cost;
  }
}
