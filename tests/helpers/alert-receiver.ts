// A local receiver for Alertmanager's notifications: one HTTP server on a loopback port that takes
// every POST (a Slack-compatible incoming webhook on one path, Alertmanager's generic webhook on
// another), keeps each body parsed, answers 200 and emits 'notification'. Closed at teardown.

import { EventEmitter, once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Test } from 'tap';

export interface Notification { path: string; body: any }

export interface Receiver {
  url: string;
  received: Notification[];
  /** The notifications that reached `path`. */
  on(path: string): Notification[];
  /** Resolves with the `count`-th notification to reach `path` (at once if it already has); rejects after `deadlineMs`. */
  nth(path: string, count: number, deadlineMs: number): Promise<Notification>;
}

export async function startReceiver(t: Test): Promise<Receiver> {
  const received: Notification[] = [];
  const events = new EventEmitter();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ path: req.url ?? '', body: JSON.parse(Buffer.concat(chunks).toString('utf8') || 'null') });
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
      events.emit('notification');
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const on = (path: string) => received.filter((n) => n.path === path);
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    received,
    on,
    async nth(path, count, deadlineMs) {
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`notification ${count} on ${path} did not arrive within ${deadlineMs} ms (got ${on(path).length})`)), deadlineMs);
      });
      try {
        while (on(path).length < count) await Promise.race([once(events, 'notification'), late]);
      } finally {
        clearTimeout(timer);
      }
      return on(path)[count - 1];
    },
  };
}
