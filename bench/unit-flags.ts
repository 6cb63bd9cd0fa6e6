// The node flags of the shipped unit's ExecStart line (systemd/sluice@.service): benchmarks and
// the handover test run sluice with exactly these. No side effects on import (bench/procs.ts
// installs signal handlers; a test imports this instead).

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const UNIT = join(fileURLToPath(new URL('..', import.meta.url)), 'systemd/sluice@.service');

/** The flags between the node binary and cli/sluice.ts in the unit's ExecStart. */
export function serveNodeFlags(): string[] {
  const exec = /^ExecStart=(.*)$/m.exec(readFileSync(UNIT, 'utf8'))![1]!.split(' ');
  return exec.slice(1, exec.findIndex((a) => a.endsWith('cli/sluice.ts')));
}
