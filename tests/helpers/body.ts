// A request body as plugins see it: scanned from its JSON text by read-body's own scan, so a test
// sees the same lazy members, indexes and change tracking as a request (lib/request-body.ts).

import { bodyFromScan } from '../../lib/request-body.ts';
import { scanBody } from '../../plugins/read-body.ts';

/** The body read from `json` (text, or an object serialised first); throws on what read-body refuses as not JSON. */
export function scannedBody(json: string | object): Record<string, any> {
  const raw = Buffer.from(typeof json === 'string' ? json : JSON.stringify(json));
  const scan = scanBody(raw);
  if (!scan) throw new Error('not JSON');
  return bodyFromScan(raw, scan);
}
