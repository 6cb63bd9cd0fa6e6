// What the sim tests share: a fetch against a sim marked with x-test-id, request bodies in both
// dialects, a wait on the sim's 'request'/'closed' events for one marked request, an SSE reader
// built on eventsource-parser, and the cost arithmetic of the catalog prices. No assertions here.

import { createParser } from 'eventsource-parser';
import { SIM_CATALOG, type SimRequest, type SimulatedRouter } from '../../lib/sim/index.ts';

export const SENTENCE = 'Hello from the simulated router.';
export const GEN_ID = /^gen-\d+-[A-Za-z0-9]+$/;

let seq = 0;

export interface Call {
  key?: string | null;
  sim?: string;
  id?: string;
  method?: string;
  signal?: AbortSignal;
  raw?: string;
}

/** A request to the sim; `id` marks it (x-test-id) so its events can be told apart. */
export function call(router: SimulatedRouter, path: string, body: unknown, c: Call = {}): Promise<Response> {
  const headers: Record<string, string> = { 'content-type': 'application/json', 'x-test-id': c.id ?? `r${++seq}` };
  if (c.key !== null) headers.authorization = `Bearer ${c.key ?? 'sk-or-v1-test-inference'}`;
  if (c.sim !== undefined) headers['x-sim'] = c.sim;
  const method = c.method ?? (body === undefined && c.raw === undefined ? 'GET' : 'POST');
  return fetch(router.url + path, { method, headers, body: c.raw ?? (body === undefined ? undefined : JSON.stringify(body)), signal: c.signal });
}

export const chatBody = (extra: Record<string, unknown> = {}, text = 'ping'): Record<string, unknown> => ({
  model: 'google/gemini-2.5-flash',
  messages: [{ role: 'user', content: text }],
  ...extra,
});
export const messagesBody = (extra: Record<string, unknown> = {}, text = 'ping'): Record<string, unknown> => ({
  model: 'anthropic/claude-sonnet-4.5',
  max_tokens: 256,
  messages: [{ role: 'user', content: text }],
  ...extra,
});

/** Waits for the sim event of the request marked `id` (register before triggering it). */
export function eventFor(router: SimulatedRouter, name: 'request' | 'closed', id: string): Promise<SimRequest> {
  return new Promise((resolve) => {
    const on = (r: SimRequest): void => {
      if (r.headers['x-test-id'] !== id) return;
      router.events.off(name, on);
      resolve(r);
    };
    router.events.on(name, on);
  });
}

export type Item = { kind: 'comment'; text: string } | { kind: 'event'; event: string | undefined; data: string };
export interface Sse { items: Item[]; error: unknown }

/** Reads an SSE body into comments and events; stops early once `until` holds, keeps a read error. */
export async function readSse(res: Response, until?: (items: Item[]) => boolean): Promise<Sse> {
  const items: Item[] = [];
  const parser = createParser({
    onEvent: (e) => items.push({ kind: 'event', event: e.event, data: e.data }),
    onComment: (c) => items.push({ kind: 'comment', text: c.trim() }),
  });
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let error: unknown;
  try {
    for (;;) {
      if (until?.(items)) break;
      const { done, value } = await reader.read();
      if (done) break;
      parser.feed(decoder.decode(value, { stream: true }));
    }
  } catch (err) {
    error = err;
  }
  return { items, error };
}

export const dataOf = (s: Sse): string[] => s.items.flatMap((i) => (i.kind === 'event' ? [i.data] : []));
export const chunksOf = (s: Sse): any[] => dataOf(s).filter((d) => d !== '[DONE]').map((d) => JSON.parse(d));
export const contentOf = (chunks: any[]): string => chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
export const namedEvents = (s: Sse): Array<{ event: string | undefined; data: any }> =>
  s.items.flatMap((i) => (i.kind === 'event' ? [{ event: i.event, data: JSON.parse(i.data) }] : []));

export function priceOf(model: string): { prompt: number; completion: number } {
  const m = SIM_CATALOG.find((x) => x.id === model)!;
  return { prompt: Number(m.pricing.prompt), completion: Number(m.pricing.completion) };
}
export const expectedCost = (model: string, promptTokens: number, completionTokens: number): number => {
  const p = priceOf(model);
  return Math.round((promptTokens * p.prompt + completionTokens * p.completion) * 1e10) / 1e10;
};
