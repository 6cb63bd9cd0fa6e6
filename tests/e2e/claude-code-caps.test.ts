// A runaway Claude Code session stopped alone (docs/configuration.md, key and session caps): the
// real `claude -p` (pinned in devDependencies) run twice in one session (`--session-id`, then
// `--resume` with the same id: Claude Code sends that id as `x-claude-code-session-id`) on a
// profile whose session cap the first answer spends. The second run is refused with the session
// cap's words and Claude Code stops at once (exactly one request, no retries, though it may retry
// ten times); a second session on the same key then gets its answer. Three runs in all.

import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { insertKey, prepareKey } from '../../cli/keys.ts';
import { startHarness, type Harness } from '../helpers/gateway.ts';
import { runProgram } from '../helpers/processes.ts';

const BIN = join(import.meta.dirname, '../../node_modules/.bin');
// One answer of the sim through Claude Code costs far more than this (its system prompt alone is
// thousands of tokens): the first run of a session spends the cap.
const PROFILE = `  capped:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    session_daily_usd: 0.0001
`;

/** Counts Claude Code's POST /v1/messages requests as sluice receives them. */
function countMessages(h: Harness): () => number {
  let n = 0;
  h.gateway.server.on('request', (req) => {
    if (req.method === 'POST' && req.url?.split('?')[0] === '/v1/messages') n++;
  });
  return () => n;
}

/** `claude -p PROMPT ARGS… --output-format json` with HOME `home` (where its sessions are kept), pointed at sluice. */
async function claude(t: Test, h: Harness, home: string, key: string, prompt: string, args: string[]) {
  const run = await runProgram(join(BIN, 'claude'), ['-p', prompt, ...args, '--output-format', 'json'], {
    cwd: home, t,
    env: {
      PATH: '/usr/bin:/bin', HOME: home, ANTHROPIC_BASE_URL: h.url, ANTHROPIC_AUTH_TOKEN: key,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_TELEMETRY: '1', DISABLE_AUTOUPDATER: '1',
      // Its default: a refusal it took for transient would be retried up to ten times.
      CLAUDE_CODE_MAX_RETRIES: '10',
    },
  });
  let out: any;
  try {
    out = JSON.parse(run.stdout);
  } catch {
    out = { raw: run.stdout, stderr: run.stderr };
  }
  return { code: run.code, out };
}

t.test('a Claude Code session past its cap is stopped at once; another session of the key goes on', async (t) => {
  const h = await startHarness(t, { extraProfiles: PROFILE, env: { SLUICE_UPSTREAM_KEY_CAPPED: 'sk-or-v1-cappedcappedcappedcappedcappedcappedcappedcappedcapped' } });
  const key = await insertKey(h.store, prepareKey(h.config, { profile: 'capped', name: 'laptop' }));
  const home = mkdtempSync(join(tmpdir(), 'sluice-cc-caps-home-'));
  t.teardown(() => rmSync(home, { recursive: true, force: true }));
  const seen = countMessages(h);
  const session = randomUUID();

  const first = await claude(t, h, home, key, 'say hi', ['--session-id', session]);
  t.equal(first.code, 0, 'the first run of the session is answered');
  t.equal(first.out.result, 'Hello from the simulated router.');
  t.equal(first.out.session_id, session);
  const [row] = await h.rows(1);
  t.match(row, { profile: 'capped', session, status: 200 }, 'its row carries the session Claude Code sent');
  t.ok(row.cost_usd >= 0.0001, `its cost (${row.cost_usd} USD) spends the session cap`);

  const before = seen();
  const second = await claude(t, h, home, key, 'say hi again', ['--resume', session]);
  t.not(second.code, 0, 'the resumed session is refused');
  t.equal(second.out.is_error, true);
  t.equal(second.out.api_error_status, 429);
  t.match(String(second.out.result), /daily session quota of profile capped \(0\.0001 USD\) exhausted for this session; resets at 00:00 UTC/, 'Claude Code shows the refusal\'s words');
  t.equal(seen() - before, 1, 'Claude Code stopped at once: one request after the refusal was decided, no retry');
  t.equal(h.sim.received.filter((r) => r.path.startsWith('/api/v1/messages')).length, 1, 'nothing more went upstream');

  const other = await claude(t, h, home, key, 'say hi', ['--session-id', randomUUID()]);
  t.equal(other.code, 0, 'a second session on the same key gets its answer');
  t.equal(other.out.result, 'Hello from the simulated router.');
});
