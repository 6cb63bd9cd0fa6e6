// `sluice check [--config DIR]`: what `serve` would refuse, found before a restart. Reads every
// SLUICE_* and OTEL_* setting and the profile and tier files, and reports every problem of both at once (one
// ConfigError, exit 78), opening no store, no network connection and no port. A profile without
// an upstream key is not a problem (it answers 503) but is named, since it is rarely meant.

import { resolve } from 'node:path';
import { ConfigError, loadConfig, type Config } from '../lib/config.ts';
import { readSettings, upstreamKeysOf, type Settings } from '../lib/settings.ts';
import { readTraceSettings } from '../lib/trace/settings.ts';

/** The summary line and notes of a configuration `serve` would start with; throws every problem found. */
export function check(opts: { config?: string; env: NodeJS.ProcessEnv }): { summary: string; notes: string[] } {
  const problems: string[] = [];
  let settings: Settings | undefined;
  let config: Config | undefined;
  try {
    settings = readSettings(opts.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
  }
  try {
    readTraceSettings(opts.env);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
  }
  // The files are checked whatever the settings said; only their directory comes from them.
  const dir = resolve(opts.config ?? settings?.configDir ?? opts.env.SLUICE_CONFIG_DIR ?? './config');
  try {
    config = loadConfig(dir);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    problems.push(...err.problems);
  }
  if (problems.length > 0) throw new ConfigError(problems);
  const notes = upstreamKeysOf(config!, settings!).missing.map((m) => `profile ${m.profile} has no upstream key (${m.variable}): its requests will answer 503`);
  return { summary: `ok: ${dir}: ${config!.profiles.size} profiles, ${config!.tiers.size} tiers; every SLUICE_* setting valid`, notes };
}
