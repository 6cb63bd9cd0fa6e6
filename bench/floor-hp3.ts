// The benchmark's third floor: the owner's proxy core alone. A node:http server that forwards
// through http-proxy-3 as sluice does (selfHandleResponse, a keep-alive http.Agent, the body handed
// over in one write, the response relayed by hand) and nothing else: no auth, no parsing, no records.
// It shows what the proxy core costs over the bare `http.request` floor, so sluice's own share is
// the rest. Usage: node bench/floor-hp3.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections.

import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { ProxyServer, type ServerOptions } from 'http-proxy-3';

function arg(name: string): string {
  const i = process.argv.indexOf(`--${name}`);
  const v = i === -1 ? undefined : process.argv[i + 1];
  if (!v) {
    process.stderr.write(`usage: node bench/floor-hp3.ts --listen HOST:PORT --target URL (missing --${name})\n`);
    process.exit(2);
  }
  return v;
}

const listen = arg('listen');
const target = new URL(arg('target'));
const colon = listen.lastIndexOf(':');
const basePath = target.pathname.replace(/\/$/, '');
const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });
const proxy = new ProxyServer({ selfHandleResponse: true, changeOrigin: true, ignorePath: true });
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding']);

proxy.on('proxyRes', (upRes, _req, res) => {
  const out: OutgoingHttpHeaders = {};
  for (const k in upRes.headers) if (!HOP.has(k)) out[k] = upRes.headers[k];
  res.writeHead(upRes.statusCode ?? 502, out);
  upRes.pipe(res);
});

function onError(err: NodeJS.ErrnoException, _req: IncomingMessage, res: http.ServerResponse): void {
  process.stderr.write(`floor-hp3: upstream ${err.code ?? err.message}\n`);
  if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end('{"error":"upstream unreachable"}');
  else res.destroy();
}

const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
  const chunks: Buffer[] = [];
  let size = 0;
  req.on('data', (c: Buffer) => {
    chunks.push(c);
    size += c.length;
  });
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
    req.headers['content-length'] = String(size);
    const options = { target: new URL(basePath + req.url, target), agent, buffer: { pipe: (dest: NodeJS.WritableStream) => dest.end(body) } };
    proxy.web(req, res, options as unknown as ServerOptions, onError as never);
  });
});

server.listen(Number(listen.slice(colon + 1)), listen.slice(0, colon), () => {
  const a = server.address() as { address: string; port: number };
  process.stdout.write(`listening http://${a.address}:${a.port}\n`);
});
const stop = () => {
  server.close();
  server.closeAllConnections();
  proxy.close();
  agent.destroy();
  process.exit(0);
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
