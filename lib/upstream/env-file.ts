// The env file `sluice upstream provision --env-out` writes: one `SLUICE_UPSTREAM_KEY_<PROFILE>=…`
// line per profile, that profile's line replaced and every other line kept as it was. Each write
// is atomic (a temporary file beside it, fsync, rename), so a reader or a crash sees the old file
// or the new one, never half of it. Mode 0600 for a new file; an existing file keeps its mode
// within 0600 (never loosened). Never logs or returns the value it writes.

import { randomBytes } from 'node:crypto';
import { chmodSync, closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, statSync, writeSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';

/** Replaces (or appends) `name=value` in `text`, keeping every other line and the line ending style. */
export function setEnvLine(text: string, name: string, value: string): string {
  const lines = text === '' ? [] : text.split('\n');
  if (lines.at(-1) === '') lines.pop(); // the final newline, put back below
  const line = `${name}=${value}`;
  // `export NAME=` is how some operators write env files for shells; it is the same variable.
  const mine = (l: string) => new RegExp(`^\\s*(export\\s+)?${name}\\s*=`).test(l);
  const at = lines.findIndex(mine);
  if (at === -1) lines.push(line);
  else {
    lines[at] = line;
    // A duplicate further down would win when the file is loaded: drop it.
    for (let i = lines.length - 1; i > at; i--) if (mine(lines[i])) lines.splice(i, 1);
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Whether the env file at `file` sets `name` to something: false when it does not exist, undefined
 * when it cannot be read (say, no permission). Never returns the value.
 */
export function envFileSets(file: string, name: string): boolean | undefined {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT' ? false : undefined;
  }
  const re = new RegExp(`^\\s*(export\\s+)?${name}\\s*=\\s*\\S`);
  return text.split('\n').some((l) => re.test(l));
}

/** Sets one variable in the env file at `file`, atomically; creates the file (mode 0600) when missing. */
export function writeEnvVar(file: string, name: string, value: string): void {
  let text = '';
  let mode = 0o600;
  try {
    text = readFileSync(file, 'utf8');
    // Never looser than the file was, and never looser than 0600: a file of secrets is the owner's alone.
    mode = statSync(file).mode & 0o600;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const tmp = join(dirname(file), `.${basename(file)}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`);
  // Created with its final mode, so the secret is never readable by others, not even for a moment.
  const fd = openSync(tmp, 'wx', mode);
  try {
    try {
      writeSync(fd, setEnvLine(text, name, value));
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    chmodSync(tmp, mode); // the umask may have narrowed it further than asked; set exactly
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}
