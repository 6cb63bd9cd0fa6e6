// What the benchmark's floors share (bench/floor-proxy.ts, floor-undici.ts, floor-hp3.ts): the
// command line (`--listen HOST:PORT --target URL`), a node:http server that reads each request
// body into one Buffer and hands it to the floor's forward(), the `listening http://HOST:PORT`
// line on stdout once it accepts connections, and a stop on SIGTERM or SIGINT. Only forward()
// differs between floors: what each one measures.

import http, { type IncomingMessage, type ServerResponse } from 'node:http';

export interface FloorArgs {
  target: URL;
  /** The target's path without a trailing slash: `/v1/…` is forwarded to `<basePath>/v1/…`. */
  basePath: string;
}

export function floorArgs(script: string): FloorArgs & { host: string; port: number } {
  const arg = (name: string): string => {
    const i = process.argv.indexOf(`--${name}`);
    const v = i === -1 ? undefined : process.argv[i + 1];
    if (!v) {
      process.stderr.write(`usage: node bench/${script} --listen HOST:PORT --target URL (missing --${name})\n`);
      process.exit(2);
    }
    return v;
  };
  const listen = arg('listen');
  const target = new URL(arg('target'));
  const colon = listen.lastIndexOf(':');
  return { target, basePath: target.pathname.replace(/\/$/, ''), host: listen.slice(0, colon), port: Number(listen.slice(colon + 1)) };
}

/** Serves the floor: each request's body read whole, then `forward`; `close` runs at the stop. */
export function serveFloor(
  where: { host: string; port: number },
  forward: (req: IncomingMessage, res: ServerResponse, body: Buffer) => void,
  close: () => void,
): void {
  const server = http.createServer({ keepAliveTimeout: 65_000 }, (req, res) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (c: Buffer) => {
      chunks.push(c);
      size += c.length;
    });
    req.on('end', () => forward(req, res, chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size)));
  });
  server.listen(where.port, where.host, () => {
    const a = server.address() as { address: string; port: number };
    process.stdout.write(`listening http://${a.address}:${a.port}\n`);
  });
  const stop = () => {
    server.close();
    server.closeAllConnections();
    close();
    process.exit(0);
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}
