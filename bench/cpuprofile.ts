// Reading a V8 .cpuprofile (node --cpu-prof): each sample's time given to the node sampled, and the
// names the reports group by (a function, its source file or package). Shared by
// bench/profile-summary.ts (one profile) and bench/where.ts (sluice's against its proxy core's).

import { readFileSync } from 'node:fs';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

export interface CpuProfile {
  nodes: ProfileNode[];
  /** Node id → the node. */
  byId: Map<number, ProfileNode>;
  /** Node id → its caller's id. */
  parent: Map<number, number>;
  /** Node id → its self time, µs. */
  self: Map<number, number>;
  /** All sampled time, µs (idle included). */
  total: number;
}

export function readProfile(file: string): CpuProfile {
  const p = JSON.parse(readFileSync(file, 'utf8')) as { nodes: ProfileNode[]; samples: number[]; timeDeltas: number[] };
  const byId = new Map<number, ProfileNode>();
  const parent = new Map<number, number>();
  for (const n of p.nodes) byId.set(n.id, n);
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const self = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) self.set(p.samples[i]!, (self.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0));
  let total = 0;
  for (const t of self.values()) total += t;
  return { nodes: p.nodes, byId, parent, self, total };
}

function where(n: ProfileNode): string {
  const url = n.callFrame.url.replace(/^file:\/\/.*?\/(node_modules|lib|plugins|cli|bench)\//, '$1/');
  return url ? `${url}:${n.callFrame.lineNumber + 1}` : '(native)';
}

/** A function and where it is defined. */
export function label(n: ProfileNode): string {
  return `${n.callFrame.functionName || '(anonymous)'} ${where(n)}`;
}

/** The source file (lib/…, node:…) or package a function belongs to; native code by its own name. */
export function fileOf(n: ProfileNode): string {
  const u = n.callFrame.url;
  if (!u) return n.callFrame.functionName.startsWith('(') ? n.callFrame.functionName : '(native)';
  const m = /\/(node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(u);
  if (m) return m[1]!;
  return u.replace(/^file:\/\/.*?\/(lib|plugins|cli|bench)\//, '$1/');
}

/** Self time summed by a grouping of the nodes, µs. */
export function selfBy(p: CpuProfile, group: (n: ProfileNode) => string): Map<string, number> {
  const out = new Map<string, number>();
  for (const [id, t] of p.self) {
    const k = group(p.byId.get(id)!);
    out.set(k, (out.get(k) ?? 0) + t);
  }
  return out;
}
