// Judges and prints a handover run (bench/handover-scenario.ts): the checks every run must pass,
// one list shared by the CI test (each check one assertion) and the benchmark (printed) — no
// transport error, no non-2xx, every stream whole and equal to the router's bytes, one stored row
// per request with the usage the client and the router saw, the rate limit carried over, every
// generation exiting 0 by itself — and the latency figures, which only the benchmark weighs: p99
// in the window before each next generation starts, during its start-up and after the old one's
// SIGTERM, and the p50 of the new generation's first 20 requests against the steady p50.

import type { GenerationData } from '../lib/sim/index.ts';
import { percentile } from './stream-client.ts';
import { RUN, type Kind, type Sample } from './handover-load.ts';
import { LIMIT_PER_MINUTE, LIMIT_RUN, type HandoverRun, type HandoverTimes } from './handover-scenario.ts';

export interface Check { name: string; ok: boolean; detail: string }

export interface Window { n: number; p50: number; p99: number }

export interface HandoverFigures {
  from: string;
  to: string;
  startupMs: number;
  /** SIGTERM of the old one to the new one's merge of its counters (ms). */
  mergeMs: number;
  /** The old one's exit after its SIGTERM (ms). */
  oldExitMs: number;
  before: Window;
  startup: Window;
  after: Window;
  /** The new generation's first 20 requests: those on connections it accepted once the old one drained. */
  first20: Window;
  /** The same 20 timed from when each went out on its connection: without the client's wait for a new connection. */
  first20Sent: Window;
  /** The first request on each of the first 20 connections the new generation accepted: each waited for its TCP connect. */
  firstOnConn: Window;
}

export interface Judgement {
  checks: Check[];
  sent: Record<Kind, number>;
  figures: HandoverFigures[];
}

function window(samples: Sample[], from: (s: Sample) => number = (s) => s.at): Window {
  const ms = samples.map((s) => s.ms - (from(s) - s.at)).sort((a, b) => a - b);
  return { n: ms.length, p50: percentile(ms, 50), p99: percentile(ms, 99) };
}

function count<T>(items: T[], key: (x: T) => string): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of items) out[key(x)] = (out[key(x)] ?? 0) + 1;
  return out;
}

function figures(run: HandoverRun, h: HandoverTimes, next: HandoverTimes | undefined, before: number, after: number): HandoverFigures {
  const ok = run.samples.filter((s) => s.kind === 'chat' && s.status === 200 && !s.burst);
  const between = (a: number, b: number) => ok.filter((s) => s.at >= a && s.at < b);
  // A connection opened after the old one's SIGTERM was the new generation's, until the next
  // handover: the load's connections close only when the draining one tells them to, after it has
  // stopped accepting. (Its answer saying `connection: close` would mean otherwise.)
  const fresh = ok.filter((s) => s.connAt !== undefined && s.connAt >= h.termAt && !s.closeHeader && s.at < (next ? Math.min(next.spawnAt, next.termAt) : Infinity));
  fresh.sort((a, b) => a.at - b.at);
  const old = run.generations.find((g) => g.name === h.from);
  return {
    from: h.from, to: h.to,
    startupMs: h.readyAt - h.spawnAt,
    mergeMs: (h.mergedAt ?? NaN) - h.termAt,
    oldExitMs: old?.exit && old.termAt !== undefined ? old.exit.at - old.termAt : NaN,
    // Before whichever came first: the next one's start, or (a serial restart) the old one's SIGTERM.
    before: window(between(Math.min(h.spawnAt, h.termAt) - before, Math.min(h.spawnAt, h.termAt))),
    startup: window(between(h.spawnAt, h.termAt)),
    after: window(between(h.termAt, h.termAt + after)),
    first20: window(fresh.slice(0, 20)),
    first20Sent: window(fresh.slice(0, 20), (s) => s.sentAt ?? s.at),
    firstOnConn: window(fresh.filter((s) => s.firstOnConn).slice(0, 20)),
  };
}

/** The checks and figures of a run; `routerRecord` (the sim's own records, when in this process) adds the usage check against them. */
export function judge(run: HandoverRun, o: { beforeMs: number; afterMs: number; minLongPerHandover: number; routerRecord?: (id: string) => GenerationData | undefined }): Judgement {
  const checks: Check[] = [];
  const check = (name: string, ok: boolean, detail: string) => checks.push({ name, ok, detail });
  const { samples } = run;
  const sent = count(samples, (s) => s.kind) as Record<Kind, number>;

  const errors = samples.filter((s) => s.error !== undefined);
  check('no transport error', errors.length === 0, `${errors.length} ${JSON.stringify(count(errors, (s) => `${s.kind} ${s.error}`))}`);
  const answered = samples.filter((s) => s.error === undefined);
  const non2xx = answered.filter((s) => s.status < 200 || s.status > 299);
  check('every request answered 2xx (no 5xx, no shutting_down)', non2xx.length === 0, `${non2xx.length} ${JSON.stringify(count(non2xx, (s) => `${s.kind} ${s.status}`))}`);
  check('no request shed by the open loop\'s bound', run.shed === 0, `${run.shed} shed`);

  const streams = samples.filter((s) => s.kind !== 'chat');
  const cut = streams.filter((s) => !s.complete);
  check('every stream ended with its final event', cut.length === 0, `${cut.length} of ${streams.length} cut`);
  const differ = streams.filter((s) => {
    const ref = s.kind === 'long' ? run.references.long : run.references.short;
    return s.digest !== ref.digest || s.bytes !== ref.bytes;
  });
  check('every stream is the router\'s bytes (generation id and created aside)', differ.length === 0, `${differ.length} of ${streams.length} differ`);
  check(`at least ${o.minLongPerHandover} long streams per handover, each ended`, run.longOpened >= o.minLongPerHandover * run.handovers.length && (sent.long ?? 0) === run.longOpened,
    `${run.longOpened} opened, ${sent.long ?? 0} ended, ${run.handovers.length} handovers`);

  const rows = run.rows.filter((r) => r.run === RUN);
  const byId = new Map(rows.map((r) => [r.id, r]));
  const ids = new Set(samples.map((s) => s.requestId).filter(Boolean));
  const ok200 = samples.filter((s) => s.status === 200);
  const noId = ok200.filter((s) => !s.requestId).length;
  const lost = ok200.filter((s) => s.requestId && !byId.has(s.requestId)).length;
  const extra = rows.filter((r) => !ids.has(r.id)).length;
  const gens = count(rows.filter((r) => r.generation_id), (r) => r.generation_id!);
  const twice = Object.values(gens).filter((n) => n > 1).length;
  check('one stored row per request (none lost)', noId === 0 && lost === 0, `${ok200.length} answered 200, ${rows.length} rows; ${lost} lost, ${noId} without a request id`);
  check('no request stored twice, no row without a request', extra === 0 && twice === 0, `${extra} rows of no request, ${twice} generations stored twice`);
  let clientMismatch = 0;
  let routerMismatch = 0;
  for (const s of ok200) {
    const r = byId.get(s.requestId);
    if (!r) continue;
    const u = s.usage;
    if (!u || r.input_tokens !== u.input || r.output_tokens !== u.output || r.cost_usd !== u.cost || r.generation_id !== s.generationId) clientMismatch++;
    if (o.routerRecord) {
      const g = o.routerRecord(s.generationId);
      if (!g || r.input_tokens !== g.tokens_prompt - g.native_tokens_cached || r.output_tokens !== g.tokens_completion || r.cost_usd !== g.total_cost) routerMismatch++;
    }
  }
  check('stored usage = the usage the client received', clientMismatch === 0, `${clientMismatch} rows differ`);
  if (o.routerRecord) check('stored usage = the router\'s record of the generation', routerMismatch === 0, `${routerMismatch} rows differ`);

  const { limit } = run;
  const limitRows = run.rows.filter((r) => r.run === LIMIT_RUN);
  check(`the ${LIMIT_PER_MINUTE}/min key: ${LIMIT_PER_MINUTE - 1} requests allowed before the handover`, limit.first59.length === LIMIT_PER_MINUTE - 1 && limit.first59.every((s) => s === 200), JSON.stringify(count(limit.first59, String)));
  check(`the ${LIMIT_PER_MINUTE}/min key: request ${LIMIT_PER_MINUTE} allowed after it`, limit.sixtieth === 200, `answered ${limit.sixtieth}`);
  check(`the ${LIMIT_PER_MINUTE}/min key: request ${LIMIT_PER_MINUTE + 1} refused 429 after it`, limit.sixtyFirst === 429, `answered ${limit.sixtyFirst}`);
  check(`the ${LIMIT_PER_MINUTE}/min key: one row per allowed request`, limitRows.length === LIMIT_PER_MINUTE, `${limitRows.length} rows`);

  for (const g of run.generations) {
    const ok = g.exit?.code === 0 && g.exit.signal === null && g.signals.length === 1 && g.signals[0] === 'SIGTERM';
    check(`${g.name} exited 0 by itself after one SIGTERM, never killed`, ok, `exit ${JSON.stringify(g.exit ? { code: g.exit.code, signal: g.exit.signal } : 'none')}, signals ${g.signals.join(' ') || 'none'}`);
  }
  return { checks, sent, figures: run.handovers.map((h, i) => figures(run, h, run.handovers[i + 1], o.beforeMs, o.afterMs)) };
}

const f = (ms: number) => (Number.isFinite(ms) ? `${ms.toFixed(1)} ms` : '–');
/** Two decimals where a bar compares them: a ratio of 1.2 is decided below a tenth of a millisecond. */
const f2 = (ms: number) => (Number.isFinite(ms) ? `${ms.toFixed(2)} ms` : '–');
const w = (x: Window) => `n=${x.n} p50 ${f(x.p50)} p99 ${f(x.p99)}`;

/** The judgement as text: the checks, then per handover the figures and the two latency bars of the acceptance test (ops-anchors 2c). */
export function formatReport(run: HandoverRun, j: Judgement): string {
  const out: string[] = [];
  out.push(`control: ${run.control}; ${((run.endedAt - run.startedAt) / 1000).toFixed(0)} s; sent ${JSON.stringify(j.sent)}`);
  for (const c of j.checks) out.push(`${c.ok ? 'ok  ' : 'FAIL'}  ${c.name}: ${c.detail}`);
  for (const x of j.figures) {
    out.push(`handover ${x.from} → ${x.to}: start-up ${f(x.startupMs)}, counters merged ${f(x.mergeMs)} after SIGTERM, ${x.from} exited ${f(x.oldExitMs)} after SIGTERM`);
    out.push(`  before (until ${x.to} spawned)  ${w(x.before)}`);
    out.push(`  during ${x.to}'s start-up     ${w(x.startup)}`);
    out.push(`  after ${x.from}'s SIGTERM        ${w(x.after)}`);
    out.push(`  ${x.to}'s first 20 requests    ${w(x.first20)} (from their sending: ${w(x.first20Sent)})`);
    out.push(`  first on its first 20 conns ${w(x.firstOnConn)}`);
    const p99Bar = x.after.p99 <= x.before.p99 + 1;
    const p50Bar = x.first20.n === 20 && x.first20.p50 <= 1.2 * x.before.p50;
    out.push(`  bar: p99 after ≤ p99 before + 1 ms (${f2(x.after.p99)} against ${f2(x.before.p99)}): ${p99Bar ? 'met' : 'missed'}; first 20 p50 ≤ 1.2 × steady p50 (${f2(x.first20.p50)} against ${f2(x.before.p50)}, ${(x.first20.p50 / x.before.p50).toFixed(2)}×): ${p50Bar ? 'met' : 'missed'}`);
  }
  return out.join('\n');
}
