// `sluice setup --statusline`: the Claude Code `statusLine` setting that runs cli/statusline.mjs,
// the budget in one line (docs/clients.md, "The budget where you work"). The command names this
// Node and the script by absolute path, so it works from whatever shell and PATH Claude Code has;
// it holds no key (the script reads the one Claude Code already uses from its environment).

import { fileURLToPath } from 'node:url';

/** The status line script shipped beside this file. */
export const STATUSLINE_SCRIPT = fileURLToPath(new URL('./statusline.mjs', import.meta.url));

/** How often Claude Code re-runs the line besides its own updates (a block can lift at midnight while nobody types). */
export const STATUSLINE_REFRESH_S = 60;

/** A word for a POSIX shell: single-quoted, a single quote inside it closed, escaped and reopened. */
export function shellQuote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The setting to merge into ~/.claude/settings.json, as JSON text. */
export function statuslineSetting(node = process.execPath, script = STATUSLINE_SCRIPT): string {
  const statusLine = { type: 'command', command: `${shellQuote(node)} ${shellQuote(script)}`, padding: 0, refreshInterval: STATUSLINE_REFRESH_S };
  return `${JSON.stringify({ statusLine }, null, 2)}\n`;
}
