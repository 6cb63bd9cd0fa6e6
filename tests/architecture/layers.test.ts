// Data flows downhill: no module imports one above it in the flow cli → server → handler →
// plugins → proxy → recorder → store, and no two modules import each other, even for types only.
// The layers are data (RANKS below, deepest first); every .ts file under lib/, plugins/ and cli/
// must fall in one. The checker is tested on a planted bad graph first, so it cannot pass by
// seeing nothing.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import t from 'tap';

const ROOT = join(import.meta.dirname, '../..');

/**
 * The layers, deepest first. A module may import its own rank or any deeper one. Why each sits
 * where it does:
 * - leaves: plain data and helpers that import nothing of sluice but the error catalogue (errors,
 *   config, the settings, the body scan, the thinking budget rules, the paid extras, the room for bodies arriving). The simulated router is its own world: it imports none of the gateway.
 * - store and counters: the two backings; the store keeps the rollups in the insert's transaction.
 * - recorder: rows queued for the store.
 * - budget (and its spend windows), the router side (catalog, lib/upstream: ring 1's loops use the budget).
 * - proxy: the streaming core and the usage tap, with the per-request context it reads (and the key cache, which caches that context's key),
 *   the traces (lib/trace/) whose hooks the core and the handler call, and the budget report (its headers go into the core's head);
 *   admission: the IP block, the rate-limit windows, the room for bodies and the spend read, over the counters and the budget.
 * - auto: the decision model's call (it reads usage with the proxy's tap); deps: the types plugins see.
 * - board: the summary, page and metrics (reads the store, the budget, the IP block's state through admission).
 * - plugins: the chain (readers of admission, the budget, the catalog; the board needs none of them).
 * - handler: one request; server: the wiring, and its lifecycle (lib/lifecycle/: systemd's socket and readiness, the warm-up through throwaway gateways, the drain's parts); cli: the commands.
 */
export const RANKS: Array<[rank: number, prefixes: string[]]> = [
  [0, ['lib/errors.ts', 'lib/log.ts', 'lib/config.ts', 'lib/settings.ts', 'lib/keys.ts', 'lib/json-scan.ts', 'lib/request-body.ts', 'lib/client-ip.ts', 'lib/thinking-budget.ts', 'lib/paid-extras.ts', 'lib/intake.ts', 'lib/routes.ts', 'lib/sim/']],
  [1, ['lib/store/', 'lib/counters/']],
  [2, ['lib/recorder.ts']],
  [3, ['lib/budget.ts', 'lib/budget-windows.ts', 'lib/upstream/', 'lib/catalog.ts']],
  [4, ['lib/context.ts', 'lib/end-user.ts', 'lib/key-cache.ts', 'lib/admission.ts', 'lib/proxy/', 'lib/trace/', 'lib/budget-report.ts']],
  [5, ['lib/auto.ts']],
  [6, ['lib/deps.ts']],
  [7, ['lib/board/']],
  [8, ['plugins/']],
  [9, ['lib/handler.ts']],
  [10, ['lib/server.ts', 'lib/lifecycle/']],
  [11, ['cli/']],
];

export function rankOf(file: string): number | undefined {
  for (const [rank, prefixes] of RANKS) if (prefixes.some((p) => file === p || (p.endsWith('/') && file.startsWith(p)))) return rank;
  return undefined;
}

/** Relative imports and re-exports of a TypeScript source, type-only ones included. */
export function importsOf(file: string, text: string): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/^\s*(?:import|export)\s[^'"]*?['"](\.{1,2}\/[^'"]+)['"]/gm)) out.push(normalize(join(dirname(file), m[1])));
  for (const m of text.matchAll(/\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g)) out.push(normalize(join(dirname(file), m[1])));
  return out;
}

/** Edges that go uphill, and import cycles (as paths), of a graph. */
export function check(graph: Map<string, string[]>): { uphill: string[]; cycles: string[]; unranked: string[] } {
  const uphill: string[] = [];
  const unranked: string[] = [];
  for (const [from, tos] of graph) {
    const rf = rankOf(from);
    if (rf === undefined) unranked.push(from);
    for (const to of tos) {
      const rt = rankOf(to);
      if (rf !== undefined && rt !== undefined && rt > rf) uphill.push(`${from} → ${to}`);
    }
  }
  const cycles: string[] = [];
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const visit = (v: string): void => {
    state.set(v, 'open');
    stack.push(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (state.get(w) === 'open') cycles.push([...stack.slice(stack.indexOf(w)), w].join(' → '));
      else if (!state.has(w)) visit(w);
    }
    stack.pop();
    state.set(v, 'done');
  };
  for (const v of graph.keys()) if (!state.has(v)) visit(v);
  return { uphill, cycles, unranked };
}

function sources(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const rel = join(dir, name);
    if (statSync(join(ROOT, rel)).isDirectory()) out.push(...sources(rel));
    else if (name.endsWith('.ts')) out.push(rel);
  }
  return out;
}

t.test('the checker finds a planted uphill edge and a cycle', async (t) => {
  const graph = new Map<string, string[]>([
    ['lib/store/x.ts', ['lib/board/summary.ts']],
    ['lib/board/summary.ts', ['lib/store/x.ts']],
    ['lib/sim/a.ts', ['lib/sim/b.ts']],
    ['lib/sim/b.ts', ['lib/sim/a.ts']],
    ['lib/elsewhere.ts', []],
  ]);
  const found = check(graph);
  t.same(found.uphill, ['lib/store/x.ts → lib/board/summary.ts']);
  t.same(found.cycles, ['lib/store/x.ts → lib/board/summary.ts → lib/store/x.ts', 'lib/sim/a.ts → lib/sim/b.ts → lib/sim/a.ts']);
  t.same(found.unranked, ['lib/elsewhere.ts']);
  t.same(importsOf('lib/a/b.ts', "import type { X } from '../c.ts';\nexport { y } from './d.ts';\nimport 'node:fs';"), ['lib/c.ts', 'lib/a/d.ts']);
});

t.test('lib/, plugins/ and cli/ import only downhill, with no cycle', async (t) => {
  const files = [...sources('lib'), ...sources('plugins'), ...sources('cli')];
  const graph = new Map(files.map((f) => [f, importsOf(f, readFileSync(join(ROOT, f), 'utf8'))]));
  t.ok(files.length > 80, `${files.length} modules read`);
  const found = check(graph);
  t.same(found.unranked, [], 'every module has a layer');
  t.same(found.uphill, [], 'no import goes uphill');
  t.same(found.cycles, [], 'no import cycle');
  t.ok([...graph.values()].flat().length > 200, 'the imports were read');
  t.notOk(relative(ROOT, ROOT), 'paths are relative to the checkout');
});
