// A TCP relay a test controls, for simulating the loss of a shared server (Postgres, Redis)
// without touching the machine's real one: 127.0.0.1:<port> pipes to a target host:port.
// `cut()` destroys every piped connection and stops listening (new connections are refused);
// `restore()` listens again on the same port. The relay never inspects or alters the bytes.

import { once } from 'node:events';
import net, { type AddressInfo, type Socket } from 'node:net';
import type { Test } from 'tap';

export interface Relay {
  readonly port: number;
  /** True between cut() and restore(). */
  readonly isCut: boolean;
  /** Connections accepted since start (a test can see that a client came back). */
  readonly accepted: number;
  /** Bytes relayed from the target to the clients since start (back-pressure tests). */
  readonly fromTarget: number;
  /** Destroys every piped connection and stops listening: connection attempts are refused. */
  cut(): Promise<void>;
  /** Listens again on the same port. */
  restore(): Promise<void>;
  close(): Promise<void>;
}

export async function startRelay(t: Test, target: { host: string; port: number }): Promise<Relay> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  let fromTarget = 0;
  let cut = false;
  const server = net.createServer((client) => {
    accepted++;
    const upstream = net.connect(target.port, target.host);
    sockets.add(client);
    sockets.add(upstream);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop).on('close', drop);
    upstream.on('error', drop).on('close', drop);
    upstream.on('data', (c: Buffer) => (fromTarget += c.length));
    client.pipe(upstream);
    upstream.pipe(client);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const port = (server.address() as AddressInfo).port;

  const relay: Relay = {
    port,
    get isCut() {
      return cut;
    },
    get accepted() {
      return accepted;
    },
    get fromTarget() {
      return fromTarget;
    },
    async cut() {
      if (cut) return;
      cut = true;
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const s of sockets) s.destroy();
      sockets.clear();
      await closed;
    },
    async restore() {
      if (!cut) return;
      server.listen(port, '127.0.0.1');
      await once(server, 'listening');
      cut = false;
    },
    async close() {
      await relay.cut();
    },
  };
  t.teardown(() => relay.close());
  return relay;
}
