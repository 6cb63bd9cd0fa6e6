// The process logger (pino, JSON lines on stdout). Callers pass key prefixes, never keys; as a
// second line of defence the serializers redact the headers that carry secrets.

import { pino, type Logger } from 'pino';

export function createLogger(level = 'info', destination?: NodeJS.WritableStream): Logger {
  return pino(
    {
      level,
      base: { pid: process.pid },
      redact: { paths: ['headers.authorization', 'headers["x-api-key"]', 'upstreamKey', 'key'], censor: '[redacted]' },
    },
    destination as pino.DestinationStream | undefined,
  );
}
