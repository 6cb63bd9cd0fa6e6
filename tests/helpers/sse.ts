// Server-sent events for the tests: a complete SSE text (a finished stream's body) parsed into its
// events with eventsource-parser, a reference parser independent of the usage tap's own byte-level
// reader (lib/proxy/usage-tap.ts). Only for whole texts; a test that reads a stream as it arrives
// feeds its own parser.

import { createParser, type EventSourceMessage } from 'eventsource-parser';

/** The events of a complete SSE text, in order. */
export function sse(text: string): EventSourceMessage[] {
  const out: EventSourceMessage[] = [];
  createParser({ onEvent: (ev) => out.push(ev) }).feed(text);
  return out;
}
