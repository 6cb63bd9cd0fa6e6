// The env file writer: one line per profile replaced, every other line kept, atomic writes,
// mode 0600 for a new file and never looser than an existing file's mode.

import { chmodSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { envFileSets, setEnvLine, writeEnvVar } from '../../lib/upstream/env-file.ts';

t.test('setEnvLine replaces that variable and keeps every other line', async (t) => {
  t.equal(setEnvLine('', 'A', '1'), 'A=1\n', 'an empty file gets the line');
  t.equal(setEnvLine('X=1\n# comment\n\nY=2', 'A', '1'), 'X=1\n# comment\n\nY=2\nA=1\n', 'appended, other lines and blanks kept');
  t.equal(setEnvLine('X=1\nA=old\nY=2\n', 'A', 'new'), 'X=1\nA=new\nY=2\n', 'replaced in place');
  t.equal(setEnvLine('export A=old\nY=2\n', 'A', 'new'), 'A=new\nY=2\n', 'an `export A=` line is the same variable');
  t.equal(setEnvLine('A=old\nY=2\nA=older\n', 'A', 'new'), 'A=new\nY=2\n', 'a later duplicate (which would win) is dropped');
  t.equal(setEnvLine('AB=1\nA_B=2\n', 'A', 'x'), 'AB=1\nA_B=2\nA=x\n', 'a longer name that starts the same is another variable');
});

t.test('writeEnvVar creates a 0600 file, keeps a stricter mode, tightens a looser one', async (t) => {
  const dir = t.testdir();
  const file = join(dir, 'sluice.env');
  writeEnvVar(file, 'SLUICE_UPSTREAM_KEY_DEV', 'secret-1');
  t.equal(statSync(file).mode & 0o777, 0o600, 'a new file is 0600');
  t.equal(readFileSync(file, 'utf8'), 'SLUICE_UPSTREAM_KEY_DEV=secret-1\n');

  writeFileSync(file, 'OTHER=keep\nSLUICE_UPSTREAM_KEY_DEV=old\n');
  chmodSync(file, 0o400);
  writeEnvVar(file, 'SLUICE_UPSTREAM_KEY_DEV', 'secret-2');
  t.equal(statSync(file).mode & 0o777, 0o400, 'a stricter mode is kept');
  t.equal(readFileSync(file, 'utf8'), 'OTHER=keep\nSLUICE_UPSTREAM_KEY_DEV=secret-2\n');

  chmodSync(file, 0o644);
  writeEnvVar(file, 'SLUICE_UPSTREAM_KEY_OPS', 'secret-3');
  t.equal(statSync(file).mode & 0o777, 0o600, 'a world-readable file is not kept world-readable');
  t.equal(readFileSync(file, 'utf8'), 'OTHER=keep\nSLUICE_UPSTREAM_KEY_DEV=secret-2\nSLUICE_UPSTREAM_KEY_OPS=secret-3\n');
  t.strictSame(readdirSync(dir), ['sluice.env'], 'no temporary file is left behind');
});

t.test('a write that cannot happen leaves the old file untouched and no temporary file', async (t) => {
  const dir = t.testdir({ 'sluice.env': 'A=1\n', sub: {} });
  t.throws(() => writeEnvVar(join(dir, 'missing-dir', 'sluice.env'), 'A', '2'), { code: 'ENOENT' });
  t.throws(() => writeEnvVar(join(dir, 'sub'), 'A', '2'), { code: 'EISDIR' }, 'a directory is not an env file');
  t.equal(readFileSync(join(dir, 'sluice.env'), 'utf8'), 'A=1\n');
  t.strictSame(readdirSync(dir).sort(), ['sluice.env', 'sub'], 'no temporary file is left behind');
});

t.test('envFileSets: whether a variable is set, without reading it out', async (t) => {
  const dir = t.testdir({ 'sluice.env': '# c\nexport A=1\nB=\nAB=2\n', locked: {} });
  const file = join(dir, 'sluice.env');
  t.equal(envFileSets(file, 'A'), true, 'an export line counts');
  t.equal(envFileSets(file, 'B'), false, 'an empty value does not');
  t.equal(envFileSets(file, 'C'), false);
  t.equal(envFileSets(join(dir, 'missing.env'), 'A'), false, 'no file');
  t.equal(envFileSets(join(dir, 'locked'), 'A'), undefined, 'unreadable (a directory here): unknown');
});
