// The benchmark's third floor: the owner's proxy core alone. A node:http server that forwards
// through http-proxy-3 as sluice does (selfHandleResponse, a keep-alive http.Agent, the body handed
// over in one write, the response relayed by hand) and nothing else: no auth, no parsing, no records.
// It shows what the proxy core costs over the bare `http.request` floor, so sluice's own share is
// the rest. Usage: node bench/floor-hp3.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections (bench/floor-common.ts).

import http, { type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import { ProxyServer, type ServerOptions } from 'http-proxy-3';
import { floorArgs, serveFloor } from './floor-common.ts';

const args = floorArgs('floor-hp3.ts');
const { target, basePath } = args;
const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });
const proxy = new ProxyServer({ selfHandleResponse: true, changeOrigin: true, ignorePath: true });
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding']);

proxy.on('proxyRes', (upRes, _req, res) => {
  const out: OutgoingHttpHeaders = {};
  for (const k in upRes.headers) if (!HOP.has(k)) out[k] = upRes.headers[k];
  res.writeHead(upRes.statusCode ?? 502, out);
  upRes.pipe(res);
});

function onError(err: NodeJS.ErrnoException, _req: IncomingMessage, res: ServerResponse): void {
  process.stderr.write(`floor-hp3: upstream ${err.code ?? err.message}\n`);
  if (!res.headersSent) res.writeHead(502, { 'content-type': 'application/json' }).end('{"error":"upstream unreachable"}');
  else res.destroy();
}

serveFloor(args, (req, res, body) => {
  req.headers['content-length'] = String(body.length);
  const options = { target: new URL(basePath + req.url, target), agent, buffer: { pipe: (dest: NodeJS.WritableStream) => dest.end(body) } };
  proxy.web(req, res, options as unknown as ServerOptions, onError as never);
}, () => {
  proxy.close();
  agent.destroy();
});
