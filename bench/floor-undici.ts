// The benchmark's second floor: a node:http server that forwards through undici's `Pool.stream`
// (the fastest bare Node proxy measured here). Like bench/floor-proxy.ts it reads the body,
// forwards it with the headers as they came (`/v1/…` → `<target>/v1/…`) and pipes the response
// back; nothing else. Usage: node bench/floor-undici.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections (bench/floor-common.ts).

import type { IncomingMessage, OutgoingHttpHeaders } from 'node:http';
import { Pool } from 'undici';
import { floorArgs, serveFloor } from './floor-common.ts';

const args = floorArgs('floor-undici.ts');
const { target, basePath } = args;
const pool = new Pool(target.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 10_000 });
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host']);

function pick(headers: IncomingMessage['headers']): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const k in headers) if (!HOP.has(k) && headers[k] !== undefined) out[k] = headers[k]!;
  return out;
}

serveFloor(args, (req, res, body) => {
  const headers = pick(req.headers);
  headers['content-length'] = String(body.length);
  pool.stream(
    { path: basePath + req.url, method: req.method as 'POST', headers, body },
    ({ statusCode, headers: up }) => {
      const out: OutgoingHttpHeaders = {};
      for (const k in up) if (!HOP.has(k)) out[k] = up[k];
      res.writeHead(statusCode, out);
      return res;
    },
    (err) => {
      if (!err) return;
      process.stderr.write(`floor-undici: upstream ${(err as NodeJS.ErrnoException).code ?? err.message}\n`);
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end('{"error":"upstream unreachable"}');
      else res.destroy();
    },
  );
}, () => void pool.close());
