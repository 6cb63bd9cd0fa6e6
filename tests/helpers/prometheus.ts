// Debian's Prometheus and Alertmanager as child processes for the alerting tests: each on a free
// loopback port (they take no port 0: a throwaway server finds one), with a temporary data
// directory and its configuration written there, ready once its /-/ready answers 200, and killed
// and removed at teardown. Plus the two readings the tests wait on: a query's answer and the
// rule evaluations Prometheus reports through /api/v1/rules.

import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as pause } from 'node:timers/promises';
import type { Test } from 'tap';
import { stringify } from 'yaml';

/** A loopback port free a moment ago: the kernel's pick for a server closed at once. */
export async function freePort(): Promise<number> {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Polls `fn` (each call awaited, `everyMs` apart) until it returns a value; throws after `timeoutMs`. */
export async function poll<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 30_000, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await pause(everyMs);
  }
}

export interface Program { url: string; dir: string; output: () => string }

/** Starts `command` with `args(dir, port)` and a configuration file `config.yml` in a fresh directory; resolves once ready. */
async function startProgram(t: Test, command: string, config: object, args: (dir: string, port: number) => string[]): Promise<Program> {
  const dir = mkdtempSync(join(tmpdir(), `sluice-${command}-`));
  writeFileSync(join(dir, 'config.yml'), stringify(config));
  const port = await freePort();
  const child = spawn(command, args(dir, port), { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (c) => (output += c));
  child.stderr.on('data', (c) => (output += c));
  const exited = once(child, 'exit');
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  });
  const url = `http://127.0.0.1:${port}`;
  await poll(`${command} to be ready`, async () => {
    if (child.exitCode !== null) throw new Error(`${command} exited ${child.exitCode}: ${output}`);
    return (await fetch(`${url}/-/ready`)).status === 200 ? true : undefined;
  }).catch((err) => {
    throw new Error(`${err.message}\n${output}`);
  });
  return { url, dir, output: () => output };
}

/** Prometheus scraping `target` (host:port) as job `sluice` and evaluating `rulesFile` every second, alerting `alertmanager`. */
export function startPrometheus(t: Test, o: { target: string; rulesFile: string; alertmanager: string }): Promise<Program> {
  const config = {
    global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
    rule_files: [o.rulesFile],
    alerting: { alertmanagers: [{ static_configs: [{ targets: [new URL(o.alertmanager).host] }] }] },
    scrape_configs: [{ job_name: 'sluice', static_configs: [{ targets: [o.target] }] }],
  };
  return startProgram(t, 'prometheus', config, (dir, port) => [
    `--config.file=${join(dir, 'config.yml')}`, `--storage.tsdb.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`,
    // Firing alerts go to Alertmanager again after every evaluation: each resend is a chance to notify twice.
    '--rules.alert.resend-delay=1s', '--log.level=warn',
  ]);
}

/** Alertmanager with `config` (an alertmanager.yml as an object), no cluster. */
export function startAlertmanager(t: Test, config: object): Promise<Program> {
  return startProgram(t, 'prometheus-alertmanager', config, (dir, port) => [
    `--config.file=${join(dir, 'config.yml')}`, `--storage.path=${join(dir, 'data')}`, `--web.listen-address=127.0.0.1:${port}`,
    '--cluster.listen-address=', '--log.level=warn',
  ]);
}

/** The value of a PromQL query's single sample, or undefined when it has none. */
export async function queryValue(prometheus: string, query: string): Promise<number | undefined> {
  const body = await (await fetch(`${prometheus}/api/v1/query?query=${encodeURIComponent(query)}`)).json() as { data: { result: Array<{ value: [number, string] }> } };
  const r = body.data.result;
  return r.length === 1 ? Number(r[0].value[1]) : undefined;
}

/** The lastEvaluation of rule group `group`, as Prometheus reports it. */
async function lastEvaluation(prometheus: string, group: string): Promise<string | undefined> {
  const body = await (await fetch(`${prometheus}/api/v1/rules`)).json() as { data: { groups: Array<{ name: string; lastEvaluation: string }> } };
  return body.data.groups.find((g) => g.name === group)?.lastEvaluation;
}

/** Resolves once Prometheus reports `n` evaluations of rule group `group` after the one it reports now. */
export async function evaluations(prometheus: string, group: string, n: number): Promise<void> {
  let last = await lastEvaluation(prometheus, group);
  for (let seen = 0; seen < n;) {
    const next = await poll(`evaluation ${seen + 1} of ${n} of ${group}`, async () => {
      const e = await lastEvaluation(prometheus, group);
      return e !== last ? e : undefined;
    }, 30_000, 50);
    last = next;
    seen++;
  }
}
