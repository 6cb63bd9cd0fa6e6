// The collector of `npm run bench -- --trace`: a minimal OTLP/HTTP receiver in its own process. It
// takes every export, answers 200 with an empty body (an empty ExportTraceServiceResponse: full
// success), and counts the export requests and their bytes; `GET /count` answers them as JSON. It
// decodes nothing: what the benchmark measures is the traced sluice's CPU, not the collector's.
// BENCH_SINK plays a collector in trouble: `reset` closes the connection of every export as it
// arrives (a collector down behind a load balancer, or refusing), `slow` never answers one (the
// exporter gives up at its timeout). `/count` answers in every mode.
// Usage: node bench/otlp-sink.ts. It prints `listening http://127.0.0.1:PORT` once it accepts.

import http from 'node:http';
import type { AddressInfo } from 'node:net';

let exports = 0;
let bytes = 0;
const mode = process.env.BENCH_SINK ?? 'ok';
if (!['ok', 'reset', 'slow'].includes(mode)) throw new Error(`BENCH_SINK must be ok, reset or slow, not ${mode}`);

const server = http.createServer((req, res) => {
  if (req.method === 'GET' && req.url === '/count') {
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ exports, bytes }));
    return;
  }
  if (mode === 'reset') return void req.socket.destroy();
  if (mode === 'slow') return; // held until the exporter gives up and closes it
  req.on('data', (chunk: Buffer) => (bytes += chunk.length));
  req.on('end', () => {
    exports++;
    res.writeHead(200, { 'content-type': 'application/x-protobuf', 'content-length': 0 }).end();
  });
});
server.keepAliveTimeout = 65_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening http://127.0.0.1:${(server.address() as AddressInfo).port}\n`));
process.on('SIGTERM', () => {
  server.closeAllConnections();
  server.close(() => process.exit(0));
});
