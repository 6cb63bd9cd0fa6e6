// docs/configuration.md's environment table against lib/settings.ts's table: every variable the
// settings table declares is documented with its default, and every variable documented there is
// one the settings table declares. Every SLUICE_* name anywhere in README.md and docs/*.md is one of
// them too (or a profile's SLUICE_UPSTREAM_KEY_<PROFILE>, or SLUICE_KEY, the clients' own variable).
// The checker is tested on an in-memory sample first, so it cannot pass by seeing nothing.

import { readdirSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import { SETTINGS } from '../../lib/settings.ts';

const ROOT = resolve(import.meta.dirname, '../..');

interface Row { names: string[]; default: string }
type Declared = Array<{ name: string; shown: string | null }>;

/** The rows of the table under the `## Environment` heading: the variables of each and its default cell. */
export function environmentRows(markdown: string): Row[] {
  const lines = markdown.split('\n');
  const start = lines.findIndex((l) => /^##\s+Environment\s*$/.test(l));
  if (start < 0) return [];
  const rows: Row[] = [];
  let inTable = false;
  for (const line of lines.slice(start + 1)) {
    if (/^#{1,2}\s/.test(line)) break;
    if (!line.startsWith('|')) {
      if (inTable) break;
      continue;
    }
    inTable = true;
    const cells = line.replace(/^\|/, '').replace(/\|\s*$/, '').split(/\s\|\s/).map((c) => c.trim());
    if (cells[0] === 'variable' || /^-+$/.test(cells[0].replaceAll('|', ''))) continue; // the head and its rule
    rows.push({ names: [...cells[0].matchAll(/`(SLUICE_[A-Z0-9_<>]+)`/g)].map((m) => m[1]), default: cells.at(-1)! });
  }
  return rows;
}

/** What disagrees between the documented rows and the declared variables, as readable strings. */
export function disagreements(rows: Row[], declared: Declared): string[] {
  const bad: string[] = [];
  const documented = new Map<string, string>();
  for (const r of rows) {
    if (r.names.length === 0) bad.push(`a row names no variable (default "${r.default}")`);
    for (const n of r.names) documented.set(n, r.default);
  }
  for (const n of documented.keys()) if (!declared.some((d) => d.name === n)) bad.push(`${n}: documented, but not in the settings table`);
  for (const d of declared) {
    const cell = documented.get(d.name);
    if (cell === undefined) bad.push(`${d.name}: not documented`);
    else if (d.shown === null ? !cell.startsWith('unset') : !cell.startsWith(`\`${d.shown}\``)) {
      bad.push(`${d.name}: documented default "${cell}", the table's is ${d.shown === null ? 'unset' : `"${d.shown}"`}`);
    }
  }
  return bad;
}

/** SLUICE_* names in `text` that are neither declared, nor a profile's upstream key, nor SLUICE_KEY. */
export function unknownNames(text: string, declared: Declared): string[] {
  const known = new Set(declared.map((d) => d.name));
  const pattern = declared.find((d) => d.name.endsWith('<PROFILE>'))?.name.replace('<PROFILE>', '');
  const out = new Set<string>();
  for (const [n] of text.matchAll(/SLUICE_[A-Z0-9_]+(<PROFILE>)?/g)) {
    if (known.has(n) || n === 'SLUICE_KEY' || (pattern && n.startsWith(pattern) && n.length > pattern.length)) continue;
    out.add(n);
  }
  return [...out];
}

const DECLARED: Declared = Object.values(SETTINGS).map(({ name, shown }) => ({ name, shown }));

t.test('the checker finds missing, extra and wrong rows', async (t) => {
  const sample = [
    '# Configuration', '', '## Environment', '',
    '| variable | meaning | default |', '|---|---|---|',
    '| `SLUICE_A` | a | `5` |',
    '| `SLUICE_B`, `SLUICE_C` | b and c | `1` |',
    '| `SLUICE_X` | not declared | unset |',
    '| `SLUICE_D` | d | unset: none |',
    '', 'Text after the table: `SLUICE_E` is not a row.', '', '## Next', '| `SLUICE_F` | f | `0` |',
  ].join('\n');
  const rows = environmentRows(sample);
  t.strictSame(rows.map((r) => r.names), [['SLUICE_A'], ['SLUICE_B', 'SLUICE_C'], ['SLUICE_X'], ['SLUICE_D']]);
  const declared: Declared = [{ name: 'SLUICE_A', shown: '5' }, { name: 'SLUICE_B', shown: '2' }, { name: 'SLUICE_C', shown: '1' }, { name: 'SLUICE_D', shown: null }, { name: 'SLUICE_E', shown: null }];
  t.strictSame(disagreements(rows, declared), [
    'SLUICE_X: documented, but not in the settings table',
    'SLUICE_B: documented default "`1`", the table\'s is "2"',
    'SLUICE_E: not documented',
  ]);
  t.strictSame(environmentRows('# No environment here\n| `SLUICE_A` | a | `5` |\n'), [], 'only the Environment section counts');
  const keyed: Declared = [...declared, { name: 'SLUICE_UPSTREAM_KEY_<PROFILE>', shown: null }];
  t.strictSame(unknownNames('SLUICE_A, SLUICE_UPSTREAM_KEY_DEV, SLUICE_UPSTREAM_KEY_<PROFILE>, SLUICE_KEY, SLUICE_TYPO_S', keyed), ['SLUICE_TYPO_S']);
});

t.test('docs/configuration.md documents every setting with its default, and nothing else', async (t) => {
  const rows = environmentRows(readFileSync(join(ROOT, 'docs', 'configuration.md'), 'utf8'));
  t.ok(rows.length >= 20, `${rows.length} rows read`);
  t.equal(DECLARED.length, rows.flatMap((r) => r.names).length, 'one documented name per declared variable');
  t.strictSame(disagreements(rows, DECLARED), [], 'the documentation and lib/settings.ts agree');
});

t.test('README.md and docs/*.md name no SLUICE_* variable the settings table does not declare', async (t) => {
  const files = [join(ROOT, 'README.md'), ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => join(ROOT, 'docs', f))];
  for (const f of files) t.strictSame(unknownNames(readFileSync(f, 'utf8'), DECLARED), [], f.slice(ROOT.length + 1));
});
