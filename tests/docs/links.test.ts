// Every relative link and #anchor in README.md and docs/*.md resolves: the file exists, and the
// anchor is a heading of that file, slugged the way GitHub slugs headings. A broken link or anchor
// fails the suite. External links (http:, https:, mailto:) are not followed: tests never touch the
// network. The checker is tested on an in-memory sample first, so it cannot pass by seeing nothing.

import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import t from 'tap';

const ROOT = resolve(import.meta.dirname, '../..');

/** GitHub's heading slug: lower case, punctuation dropped (hyphens and underscores kept), spaces → hyphens. */
export function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/<[^>]*>/g, '').replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The anchors a Markdown text defines: its headings' slugs, numbered as GitHub numbers repeats. */
export function anchors(text: string): Set<string> {
  const out = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Inline links `[text](target)` outside code fences and code spans. */
export function links(text: string): string[] {
  const out: string[] = [];
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    if (fenced) continue;
    const bare = line.replace(/`[^`]*`/g, '');
    for (const m of bare.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) out.push(m[1]);
  }
  return out;
}

/** The broken links of one file, as readable strings; `read` gives a file's text or undefined. */
export function broken(file: string, text: string, read: (path: string) => string | undefined): string[] {
  const bad: string[] = [];
  for (const target of links(text)) {
    if (/^[a-z]+:/i.test(target)) continue;
    const [path, anchor] = target.split('#', 2) as [string, string | undefined];
    const dest = path === '' ? file : join(dirname(file), decodeURIComponent(path));
    const destText = read(dest);
    if (destText === undefined) {
      bad.push(`${file}: ${target} (no such file)`);
      continue;
    }
    if (anchor !== undefined && dest.endsWith('.md') && !anchors(destText).has(anchor)) bad.push(`${file}: ${target} (no such heading)`);
  }
  return bad;
}

t.test('the checker finds broken links and anchors', async (t) => {
  const files: Record<string, string> = {
    'a.md': '# Title\n\n## Limits and budgets\n\nSee [b](b.md#the-end), [here](#limits-and-budgets), [gone](c.md), [bad](#nope), [x](https://example.com), `[not](a-link.md)`\n',
    'b.md': '# B\n\n## The end\n\n```\n## not a heading\n```\n[back](a.md#not-a-heading)\n',
  };
  const read = (p: string) => files[p];
  t.same(broken('a.md', files['a.md'], read), ['a.md: c.md (no such file)', 'a.md: #nope (no such heading)']);
  t.same(broken('b.md', files['b.md'], read), ['b.md: a.md#not-a-heading (no such heading)'], 'headings inside code fences are no anchors');
  t.equal(slug('`npm run bench:board`: the board at 1 M and 10 M rows'), 'npm-run-benchboard-the-board-at-1-m-and-10-m-rows');
  t.equal(slug('Ring 1: upstream keys, usage readouts, cost reconciliation'), 'ring-1-upstream-keys-usage-readouts-cost-reconciliation');
  t.same([...anchors('## A\n## A\n')], ['a', 'a-1'], 'repeated headings are numbered');
});

t.test('README.md and docs/*.md have no broken internal link', async (t) => {
  const docs = readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).map((f) => join(ROOT, 'docs', f));
  const files = [join(ROOT, 'README.md'), ...docs];
  t.ok(docs.length >= 10, `docs/ holds the manual (${docs.length} pages)`);
  const read = (p: string) => (existsSync(p) && !p.endsWith('/') ? (p.endsWith('.md') ? readFileSync(p, 'utf8') : '') : undefined);
  let count = 0;
  const bad: string[] = [];
  for (const f of files) {
    const text = readFileSync(f, 'utf8');
    count += links(text).length;
    bad.push(...broken(f, text, read).map((b) => relative(ROOT, b.split(': ')[0]) + ': ' + b.split(': ').slice(1).join(': ')));
  }
  t.ok(count > 50, `${count} links checked`);
  t.same(bad, [], 'every relative link resolves');
  // Every page is reachable from the README's map.
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  for (const d of docs) t.ok(readme.includes(`docs/${d.split('/').at(-1)}`), `the README links ${relative(ROOT, d)}`);
});
