// The collector of `npm run bench -- --trace`: a minimal OTLP/HTTP receiver in its own process. It
// takes every export, answers 200 with an empty body (an empty ExportTraceServiceResponse: full
// success), and counts the export requests and their bytes; `GET /count` answers them as JSON. It
// decodes nothing: what the benchmark measures is the traced sluice's CPU, not the collector's.
// Usage: node bench/otlp-sink.ts. It prints `listening http://127.0.0.1:PORT` once it accepts.

import http from 'node:http';
import type { AddressInfo } from 'node:net';

let exports = 0;
let bytes = 0;

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ exports, bytes }));
    return;
  }
  req.on('data', (chunk: Buffer) => (bytes += chunk.length));
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 }).end();
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening http://127.0.0.1:${(server.address() as AddressInfo).port}\n`));
process.on('SIGTERM', () => server.close(() => process.exit(0)));
