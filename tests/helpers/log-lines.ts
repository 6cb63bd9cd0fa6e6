// A child's stdout as JSON log lines (pino's format): each complete line parsed (one that is not
// JSON kept as `{ raw }`), pushed to `lines`, and announced with `onLine` so a waiter can look again.

import type { Readable } from 'node:stream';

export type LogLine = Record<string, any>;

export function collectLogLines(stdout: Readable, lines: LogLine[], onLine: () => void): void {
  let rest = '';
  stdout.setEncoding('utf8').on('data', (chunk: string) => {
    const parts = (rest + chunk).split('\n');
    rest = parts.pop()!;
    for (const raw of parts) {
      if (!raw.trim()) continue;
      let line: LogLine;
      try {
        line = JSON.parse(raw);
      } catch {
        line = { raw };
      }
      lines.push(line);
      onLine();
    }
  });
}
