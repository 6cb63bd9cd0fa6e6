// The unit harness of model resolution: the harness tiers plus one the catalog lacks, a stub
// catalog with the simulated router's maxima, a stub auto router that always decides
// 'reasoning', and a Ctx-like object per request. Shared by the model-resolve tests.

import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import type { AutoRouter } from '../../lib/auto.ts';
import type { Catalog } from '../../lib/catalog.ts';
import { loadConfig, type Config } from '../../lib/config.ts';
import type { ReadCtx } from '../../lib/context.ts';
import type { Dialect } from '../../lib/errors.ts';
import type { Degradation } from '../../lib/store/store.ts';
import { modelResolve } from '../../plugins/model-resolve.ts';
import { scannedBody } from './body.ts';
import { profilesYaml, TIERS_YAML } from './gateway.ts';

// The harness tiers plus one whose model the catalog does not list.
const UNIT_TIERS = TIERS_YAML.replace('auto:\n', `  offlist:
    model: acme/unlisted-model
    price: { input_per_mtok: 1, output_per_mtok: 2 }
    max_output_tokens: 4000
auto:
`);

function unitConfig(): Config {
  const dir = mkdtempSync(join(tmpdir(), 'sluice-mr-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'profiles.yaml'), profilesYaml('http://127.0.0.1:9'));
  writeFileSync(join(dir, 'tiers.yaml'), UNIT_TIERS);
  return loadConfig(dir);
}

// The simulated router's catalog maxima for the models used here.
export const CATALOG_MAX: Record<string, number> = {
  'google/gemini-2.5-flash': 65535,
  'google/gemini-2.5-pro': 65536,
  'anthropic/claude-sonnet-4.5': 64000,
  'openai/gpt-4.1-mini': 32768,
};

export const config = unitConfig();
export const autoCalls: ReadCtx[] = [];
export const plugin = modelResolve({
  config,
  catalog: { maxCompletion: (_router: string, model: string) => CATALOG_MAX[model] ?? null } as unknown as Catalog,
  auto: { decide: async (ctx: ReadCtx) => { autoCalls.push(ctx); return 'reasoning'; } } as unknown as AutoRouter,
});

export function ctxOf(dialect: Dialect, body: Record<string, any>, opts: { profile?: string; degradation?: Degradation } = {}): ReadCtx {
  return {
    id: 'unit', dialect, route: dialect, body: scannedBody(body), raw: Buffer.from(JSON.stringify(body)), requestedModel: body.model,
    profile: config.profiles.get(opts.profile ?? 'dev'), degradation: opts.degradation ?? 'none',
    budget: null, removed: [], adjusted: [], tier: null, model: null, endUser: null, session: null, run: null, stream: false, ip: '127.0.0.1',
  } as unknown as ReadCtx;
}

export async function resolve(dialect: Dialect, body: Record<string, any>, opts: { profile?: string; degradation?: Degradation } = {}): Promise<ReadCtx> {
  const ctx = ctxOf(dialect, body, opts);
  await plugin.run(ctx);
  return ctx;
}

