// The benchmark's second floor: a node:http server that forwards through undici's `Pool.stream`
// (the fastest bare Node proxy measured here). Like bench/floor-proxy.ts it reads the body,
// forwards it with the headers as they came (`/v1/…` → `<target>/v1/…`) and pipes the response
// back; nothing else. Usage: node bench/floor-undici.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections.

import http, { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { Pool } from 'undici';

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i === -1 ? undefined : process.argv[i + 1];
  if (!v) {
    process.stderr.write(`usage: node bench/floor-undici.ts --listen HOST:PORT --target URL (missing --${name})\n`);
    process.exit(2);
  }
  return v;
}

const listen = arg('listen');
const target = new URL(arg('target'));
const colon = listen.lastIndexOf(':');
const basePath = target.pathname.replace(/\/$/, '');
const pool = new Pool(target.origin, { connections: 512, pipelining: 1, keepAliveTimeout: 10_000 });
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host']);

function pick(headers: IncomingMessage['headers']): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const k in headers) if (!HOP.has(k) && headers[k] !== undefined) out[k] = headers[k]!;
  return out;
}

function forward(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
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
}

const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    chunks.push(c);
    size += c.length;
  });
  req.on('end', () => forward(req, res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
});

server.listen(Number(listen.slice(colon + 1)), listen.slice(0, colon), () => {
  const a = server.address() as { address: string; port: number };
  process.stdout.write(`listening http://${a.address}:${a.port}\n`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  void pool.close();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
