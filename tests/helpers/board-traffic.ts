// Real traffic for the board, metrics and page tests: both dialects, streamed and not, a tier, an
// alias, sluice/auto, a free-form model id, an upstream error, cache reads, a tool call, auth
// failures, a budget refusal and a rate-limit refusal, with markup in an end user, a run label and
// a tool name. Everything goes through the real gateway of a harness (tests/helpers/gateway.ts).

import { randomUUID } from 'node:crypto';
import type { Harness, HarnessOptions } from './gateway.ts';

/** A profile whose key may make two requests a minute (for a rate-limit refusal). */
export const LIMITED: Pick<HarnessOptions, 'extraProfiles' | 'env'> = {
  extraProfiles: `  limited:
    default_tier: fast
    router: sim
    budget: { daily_usd: 5, monthly_usd: 60 }
    rate_limits: { per_key_per_minute: 2, per_user_per_minute: 2 }
`,
  env: { SLUICE_UPSTREAM_KEY_LIMITED: 'sk-or-v1-limitedlimitedlimitedlimitedlimitedlimitedlimitedlimited0' },
};

export const MARKUP_USER = '<script>alert(1)</script>';
export const MARKUP_RUN = '<b>run</b><img src=x onerror=alert(2)>';
export const MARKUP_TOOL = '<svg onload=alert(3)>';

export interface Traffic {
  /** Rows the traffic left (proxied requests plus the auto decision). */
  rows: number;
  /** The free-form model id asked for once (must never become a metric label). */
  randomModel: string;
  keys: string[];
  statuses: number[];
}

export async function boardTraffic(h: Harness): Promise<Traffic> {
  const dev = await h.key('dev', { name: 'board-dev' });
  const assistant = await h.key('assistant', { name: 'board-assistant' });
  const tiny = await h.key('tiny', { name: 'board-tiny' });
  const limited = await h.key('limited', { name: 'board-limited' });
  const randomModel = `vendor/model-${randomUUID()}`;
  const statuses: number[] = [];
  let rows = 0;

  async function chat(key: string | undefined, body: Record<string, unknown>, headers: Record<string, string> = {}) {
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(key ? { authorization: `Bearer ${key}` } : {}), ...headers },
      body: JSON.stringify({ messages: [{ role: 'user', content: 'hello board' }], ...body }),
    });
    await res.arrayBuffer();
    statuses.push(res.status);
    return res.status;
  }
  async function messages(key: string, body: Record<string, unknown>, headers: Record<string, string> = {}) {
    const res = await fetch(`${h.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01', ...headers },
      body: JSON.stringify({ model: 'claude-sonnet-4-5', max_tokens: 64, messages: [{ role: 'user', content: 'hello board' }], ...body }),
    });
    await res.arrayBuffer();
    statuses.push(res.status);
    return res.status;
  }

  // Served: chat and messages, streamed and not.
  await chat(dev, { model: 'sluice/fast', stream: true, user: MARKUP_USER }, { 'x-sluice-run': MARKUP_RUN, 'x-sluice-session': 'conv-board' });
  await chat(dev, { model: 'sluice/fast', user: MARKUP_USER }, { 'x-sluice-run': MARKUP_RUN, 'x-sim': `tool=${MARKUP_TOOL}` });
  await messages(dev, { metadata: { user_id: 'alice' } }, { 'x-sim': 'cached=40;cache-write=8' });
  await messages(dev, { stream: true, metadata: { user_id: 'alice' } }, { 'x-sim': 'tool=get_weather;reasoning=5' });
  await chat(assistant, { model: 'sluice/agent', stream: true, user: 'bob' });
  await chat(dev, { model: randomModel, user: 'carol' });
  await chat(dev, { model: 'sluice/auto', user: 'carol' }, { 'x-sluice-session': 'conv-auto' });
  rows += 7 + 1; // sluice/auto leaves its decision row too
  // An upstream error passed back.
  await chat(dev, { model: 'sluice/fast', user: 'dave' }, { 'x-sim': 'status=500' });
  rows += 1;
  // Auth failures: missing and unknown keys.
  await chat(undefined, { model: 'sluice/fast' });
  await chat(`${dev.slice(0, -4)}zzzz`, { model: 'sluice/fast' });
  // The tiny profile's budget runs out: served until it refuses.
  for (let i = 0; i < 10; i++) {
    const s = await chat(tiny, { model: 'sluice/fast', max_tokens: 400 }, { 'x-sim': 'chunks=200' });
    if (s !== 200) break;
    rows += 1;
  }
  // The limited key's third request in a minute is refused.
  for (let i = 0; i < 3; i++) if ((await chat(limited, { model: 'sluice/fast' })) === 200) rows += 1;
  return { rows, randomModel, keys: [dev, assistant, tiny, limited], statuses };
}
