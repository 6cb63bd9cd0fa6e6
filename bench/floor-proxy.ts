// The benchmark's floor: the least a node:http proxy can do. It reads the request body, forwards
// it with a keep-alive http.Agent to the simulated router (`/v1/…` → `<target>/v1/…`, where the
// target is `http://sim/api`) and pipes the response back. Nothing else: no auth, no parsing, no
// records. sluice is measured against this. Usage: node bench/floor-proxy.ts --listen HOST:PORT --target URL
// It prints `listening http://HOST:PORT` on stdout once it accepts connections (bench/floor-common.ts).

import http, { type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { floorArgs, serveFloor } from './floor-common.ts';

const args = floorArgs('floor-proxy.ts');
const { target, basePath } = args;
const agent = new http.Agent({ keepAlive: true, maxSockets: 512 });
// Hop-by-hop headers belong to one connection; everything else passes as it came.
const HOP = new Set(['connection', 'keep-alive', 'transfer-encoding', 'host']);

function pick(headers: IncomingMessage['headers'], length?: number): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const k in headers) if (!HOP.has(k)) out[k] = headers[k];
  if (length !== undefined) out['content-length'] = length;
  return out;
}

serveFloor(args, (req, res, body) => {
  const up = http.request({
    agent, host: target.hostname, port: target.port, method: req.method, path: basePath + req.url, headers: pick(req.headers, body.length),
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
}, () => agent.destroy());
