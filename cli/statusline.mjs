#!/usr/bin/env node
// The budget in one line, for Claude Code's status line (`sluice setup --statusline` prints the
// setting), a shell prompt or a terminal's status bar: it asks sluice's GET /v1/budget with the
// key the agent already uses and prints e.g. `sluice · 42 % of today · fast tier at 70 %`.
// Plain Node, no dependency, nothing written anywhere. Whatever goes wrong (no key, sluice away,
// a slow answer) it prints a short line and exits 0 within its time limit: a status line must never
// hang or fail. The key is sent to sluice only and never printed.
//
// Environment: the base URL from ANTHROPIC_BASE_URL, else OPENAI_BASE_URL (its /v1 dropped); the
// key from ANTHROPIC_AUTH_TOKEN, else ANTHROPIC_API_KEY, else SLUICE_KEY. `--timeout-ms N` bounds
// the whole run (default 2000). Claude Code's JSON on stdin gives the session id, so the line also
// shows the session against its profile's session cap.

const env = process.env;
const at = process.argv.indexOf('--timeout-ms');
const TIMEOUT_MS = Math.max(100, (at === -1 ? 0 : Number(process.argv[at + 1])) || 2000);
/** stdin is read for at most this long: Claude Code writes its JSON at once and closes it. */
const STDIN_MS = Math.min(500, TIMEOUT_MS / 2);
const STDIN_MAX = 1 << 20;

/** Prints the line and leaves at once (an open stdin or socket must not keep the process). */
function done(line) {
  process.stdout.write(`${line}\n`, () => process.exit(0));
}

/** Claude Code's session id from the JSON on stdin; null on a terminal, without JSON, or late. */
function sessionFromStdin() {
  if (process.stdin.isTTY) return Promise.resolve(null);
  return new Promise((resolve) => {
    const chunks = [];
    let size = 0;
    const finish = () => {
      clearTimeout(timer);
      process.stdin.pause();
      try {
        const id = JSON.parse(Buffer.concat(chunks).toString('utf8'))?.session_id;
        resolve(typeof id === 'string' && id !== '' ? id : null);
      } catch {
        resolve(null);
      }
    };
    const timer = setTimeout(finish, STDIN_MS);
    process.stdin.on('data', (c) => {
      size += c.length;
      if (size <= STDIN_MAX) chunks.push(c);
    });
    process.stdin.once('end', finish);
    process.stdin.once('error', () => {
      clearTimeout(timer);
      resolve(null);
    });
  });
}

function baseUrl() {
  const url = env.ANTHROPIC_BASE_URL || (env.OPENAI_BASE_URL ?? '').replace(/\/v1\/*$/, '');
  return url ? url.replace(/\/+$/, '') : '';
}

const pct = (p) => `${Math.round(p * 10) / 10} %`;
/** A reset time as a person reads it: the hour of a day's reset, the date of a month's. */
const when = (iso, window) => (window === 'month' ? `${iso.slice(0, 10)} 00:00 UTC` : '00:00 UTC');

/** The line for a GET /v1/budget body (docs/http.md, "Budgets"). */
function lineOf(b) {
  const whose = b.scope === 'key' ? `key ${b.key?.name ?? ''} · ` : '';
  const of = b.window === 'month' ? 'of this month' : 'of today';
  const t = b.thresholds ?? { 'fast-only': 70, 'max-tokens': 85, blocked: 100 };
  const next = {
    none: `fast tier at ${t['fast-only']} %`,
    'fast-only': `fast tier only · 2048 tokens at ${t['max-tokens']} %`,
    'max-tokens': `fast tier, 2048 tokens · blocked at ${t.blocked} %`,
    blocked: `blocked until ${when(b.resets_at, b.window)}`,
  }[b.stage] ?? b.stage;
  const parts = ['sluice', `${whose}${pct(b.percent)} ${of}`, next];
  if (b.session) parts.push(b.session.blocked ? `session stopped (cap ${b.session.limit_usd} USD)` : `session ${pct(b.session.percent)}`);
  return parts.join(' · ');
}

async function main() {
  // However the run goes, it ends by the time limit.
  setTimeout(() => done('sluice · budget unavailable (no answer in time)'), TIMEOUT_MS).unref();
  const url = baseUrl();
  const key = env.ANTHROPIC_AUTH_TOKEN || env.ANTHROPIC_API_KEY || env.SLUICE_KEY;
  if (!url) return done('sluice · no base URL (ANTHROPIC_BASE_URL)');
  if (!key) return done('sluice · no key (ANTHROPIC_AUTH_TOKEN)');
  const session = await sessionFromStdin();
  const headers = { authorization: `Bearer ${key}`, accept: 'application/json' };
  if (session !== null) headers['x-claude-code-session-id'] = session;
  let res;
  try {
    // No timeout of its own: the run's time limit ends a fetch that takes too long.
    res = await fetch(`${url}/v1/budget`, { headers });
  } catch {
    return done('sluice · budget unavailable');
  }
  if (res.status !== 200) {
    await res.body?.cancel();
    return done(`sluice · budget unavailable (HTTP ${res.status})`);
  }
  try {
    done(lineOf(await res.json()));
  } catch {
    done('sluice · budget unavailable (unreadable answer)');
  }
}

await main();
