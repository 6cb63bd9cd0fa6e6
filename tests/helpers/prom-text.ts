// Reads Prometheus's text format into samples, for the metrics tests (tests/board, tests/e2e).
// Comments (HELP, TYPE) are skipped; a line that is neither a comment nor a sample throws.

export interface Sample { name: string; labels: Record<string, string>; value: number }

export function parseMetrics(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a sample line: ${line}`);
    const labels: Record<string, string> = {};
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** The sum of the samples of `name` whose labels include `where`. */
export function sumOf(samples: Sample[], name: string, where: Record<string, string> = {}): number {
  return samples.filter((s) => s.name === name && Object.entries(where).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
}
