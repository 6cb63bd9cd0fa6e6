// The `x-sim` request header (`x-sim: chunks=20;tool=get_weather`): parsed into Directives that
// steer one request. Unknown items are ignored, like unknown fields upstream; bad numbers read as
// "not asked for". This file only parses: it never touches a request or a response.

export interface Directives {
  status: number;
  chunks: number;
  bytes: number;
  tool: string;
  failAfter: number;
  dropAfter: number;
  silentAfter: number;
  hang: boolean;
  delayMs: number;
  chunkDelayMs: number;
  usageChoice: boolean;
  noCost: boolean;
  provider: string;
  cached: number;
  cacheWrite: number;
  reasoning: number;
}

// -1 means "not asked for"; shared by every request that sends no x-sim header.
const NO_DIRECTIVES: Readonly<Directives> = Object.freeze({
  status: 0, chunks: 5, bytes: -1, tool: '', failAfter: -1, dropAfter: -1, silentAfter: -1, hang: false,
  delayMs: 0, chunkDelayMs: 0, usageChoice: false, noCost: false, provider: '', cached: 0, cacheWrite: 0, reasoning: 0,
});
const MAX_CHUNKS = 100_000;
const MAX_BYTES = 64 * 1024 * 1024;

function count(v: string, max: number): number {
  const n = Number.parseInt(v, 10);
  return Number.isFinite(n) && n >= 0 ? Math.min(n, max) : -1;
}

export function parseDirectives(raw: string | string[] | undefined): Readonly<Directives> {
  if (raw === undefined) return NO_DIRECTIVES;
  const d: Directives = { ...NO_DIRECTIVES };
  for (const item of (Array.isArray(raw) ? raw.join(';') : raw).split(';')) {
    const eq = item.indexOf('=');
    const k = (eq < 0 ? item : item.slice(0, eq)).trim().toLowerCase();
    const v = eq < 0 ? '' : item.slice(eq + 1).trim();
    switch (k) {
      case 'status': { const s = count(v, 599); d.status = s >= 400 ? s : 0; break; }
      case 'chunks': { const c = count(v, MAX_CHUNKS); if (c >= 0) d.chunks = c; break; }
      case 'bytes': d.bytes = count(v, MAX_BYTES); break;
      case 'tool': d.tool = v; break;
      case 'fail-after': d.failAfter = count(v, MAX_CHUNKS); break;
      case 'drop-after': d.dropAfter = count(v, MAX_CHUNKS); break;
      case 'silent-after': d.silentAfter = count(v, MAX_CHUNKS); break;
      case 'hang': d.hang = true; break;
      case 'delay-ms': d.delayMs = Math.max(0, count(v, 3_600_000)); break;
      case 'chunk-delay-ms': d.chunkDelayMs = Math.max(0, count(v, 3_600_000)); break;
      case 'usage': d.usageChoice = v === 'choice'; break;
      case 'no-cost': d.noCost = true; break;
      case 'provider': d.provider = v; break;
      case 'cached': d.cached = Math.max(0, count(v, 1e9)); break;
      case 'cache-write': d.cacheWrite = Math.max(0, count(v, 1e9)); break;
      case 'reasoning': d.reasoning = Math.max(0, count(v, 1e9)); break;
      default: break; // unknown items are ignored, like unknown fields upstream
    }
  }
  return d;
}

/** The first of fail-after / drop-after / silent-after to strike, in content pieces; -1 for none. */
export function cutPoint(d: Readonly<Directives>): number {
  let at = -1;
  for (const n of [d.failAfter, d.dropAfter, d.silentAfter]) if (n >= 0 && (at < 0 || n < at)) at = n;
  return at;
}
