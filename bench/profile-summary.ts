// Summarises a V8 .cpuprofile (from `npm run bench -- --profile DIR`): self time by function and
// by source file, and total (inclusive) time of the project's own functions in lib/, plugins/ and
// cli/, so a hot spot can be named without opening DevTools. Reads the file only; prints a text report.
// Usage: node bench/profile-summary.ts FILE.cpuprofile [--top N]

import { fileOf, label, readProfile, selfBy } from './cpuprofile.ts';

const file = process.argv[2];
if (!file) {
  process.stderr.write('usage: node bench/profile-summary.ts FILE.cpuprofile [--top N]\n');
  process.exit(2);
}
const topAt = process.argv.indexOf('--top');
const TOP = topAt === -1 ? 25 : Number(process.argv[topAt + 1]);
const p = readProfile(file);
const { byId, parent, self, total } = p;
const selfByFn = selfBy(p, label);
const selfByFile = selfBy(p, fileOf);

// Inclusive time of project functions: a sample counts once for each distinct project frame on its stack.
const inclusive = new Map<string, number>();
for (const [id, t] of self) {
  const seen = new Set<string>();
  for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
    const n = byId.get(cur)!;
    if (!/\/(lib|plugins|cli)\/[^/]+\.ts$|\/(lib|plugins)\/[^/]+\/[^/]+\.ts$/.test(n.callFrame.url) || n.callFrame.url.includes('node_modules')) continue;
    const l = label(n);
    if (seen.has(l)) continue;
    seen.add(l);
    inclusive.set(l, (inclusive.get(l) ?? 0) + t);
  }
}

function table(title: string, m: Map<string, number>): void {
  process.stdout.write(`\n${title}\n`);
  for (const [k, t] of [...m].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
    process.stdout.write(`${((100 * t) / total).toFixed(1).padStart(6)}%  ${(t / 1000).toFixed(0).padStart(7)} ms  ${k}\n`);
  }
}

process.stdout.write(`${file}: ${(total / 1000).toFixed(0)} ms sampled\n`);
table('self time by file or package', selfByFile);
table('self time by function', selfByFn);
table('inclusive time of lib/, plugins/ and cli/ functions', inclusive);
