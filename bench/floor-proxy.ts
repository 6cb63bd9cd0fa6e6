// The benchmark's floor: the least a node:http proxy can do. It reads the request body, forwards
// it with a keep-alive http.Agent to the simulated router (`/v1/…` → `<target>/v1/…`, where the
// target is `http://sim/api`) and pipes the response back. Nothing else: no auth, no parsing, no
// records. sluice is measured against this. Usage: node bench/floor-proxy.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections.

import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i === -1 ? undefined : process.argv[i + 1];
  if (!v) {
    process.stderr.write(`usage: node bench/floor-proxy.ts --listen HOST:PORT --target URL (missing --${name})\n`);
    process.exit(2);
  }
  return v;
}

const listen = arg('listen');
const target = new URL(arg('target'));
const colon = listen.lastIndexOf(':');
const host = listen.slice(0, colon);
const port = Number(listen.slice(colon + 1));
const basePath = target.pathname.replace(/\/$/, '');
const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });
// Hop-by-hop headers belong to one connection; everything else passes as it came.
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host']);

function pick(headers: IncomingMessage['headers'], length?: number): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const k in headers) if (!HOP.has(k)) out[k] = headers[k];
  if (length !== undefined) out['content-length'] = length;
  return out;
}

const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    chunks.push(c);
    size += c.length;
  });
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size);
    const up = http.request({
      agent, host: target.hostname, port: target.port, method: req.method, path: basePath + req.url, headers: pick(req.headers, size),
    }, (upRes) => {
      res.writeHead(upRes.statusCode ?? 502, pick(upRes.headers));
      upRes.pipe(res);
    });
    up.on('error', (err: NodeJS.ErrnoException) => {
      // Rare (a keep-alive race with the sim closing an idle socket): say so, the bench counts it.
      process.stderr.write(`floor: upstream ${err.code ?? err.message}${up.reusedSocket ? ' on a reused socket' : ''}\n`);
      if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end('{"error":"upstream unreachable"}');
      else res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) up.destroy();
    });
    up.end(body);
  });
});

server.listen(port, host, () => {
  const a = server.address() as { address: string; port: number };
  process.stdout.write(`listening http://${a.address}:${a.port}\n`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  agent.destroy();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
