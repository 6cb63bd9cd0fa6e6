// Summarises a V8 .cpuprofile (from `npm run bench -- --profile DIR`): self time by function and
// by source file, and total (inclusive) time of the project's own functions in lib/, plugins/ and
// cli/, so a hot spot can be named without opening DevTools. Reads the file only; prints a text report.
// Usage: node bench/profile-summary.ts FILE.cpuprofile [--top N]

import { readFileSync } from 'node:fs';

interface Node {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
  hitCount?: number;
}
interface Profile {
  nodes: Node[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

const file = process.argv[2];
if (!file) {
  process.stderr.write('usage: node bench/profile-summary.ts FILE.cpuprofile [--top N]\n');
  process.exit(2);
}
const topAt = process.argv.indexOf('--top');
const TOP = topAt === -1 ? 25 : Number(process.argv[topAt + 1]);
const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;

const byId = new Map<number, Node>();
const parent = new Map<number, number>();
for (const n of p.nodes) byId.set(n.id, n);
for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

// Sample time per node: each sample's delta belongs to the node sampled.
const self = new Map<number, number>();
for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0));
const total = [...self.values()].reduce((a, b) => a + b, 0);

function where(n: Node): string {
  const url = n.callFrame.url.replace(/^file:\/\/.*?\/(node_modules|lib|plugins|cli|bench)\//, '$1/');
  return url ? `${url}:${n.callFrame.lineNumber + 1}` : '(native)';
}
function label(n: Node): string {
  return `${n.callFrame.functionName || '(anonymous)'} ${where(n)}`;
}
function fileOf(n: Node): string {
  const u = n.callFrame.url;
  if (!u) return n.callFrame.functionName.startsWith('(') ? n.callFrame.functionName : '(native)';
  const m = /\/(node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(u);
  if (m) return m[1]!;
  return u.replace(/^file:\/\/.*?\/(lib|plugins|cli|bench)\//, '$1/').replace(/^node:/, 'node:');
}

const selfByFn = new Map<string, number>();
const selfByFile = new Map<string, number>();
for (const [id, t] of self) {
  const n = byId.get(id)!;
  selfByFn.set(label(n), (selfByFn.get(label(n)) ?? 0) + t);
  selfByFile.set(fileOf(n), (selfByFile.get(fileOf(n)) ?? 0) + t);
}

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
