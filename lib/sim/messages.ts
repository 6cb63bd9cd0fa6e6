// POST /api/v1/messages answered as OpenRouter's Anthropic-shaped endpoint does (protocols.md
// §2.3-2.5, §5.4): the JSON message, or the named-event stream (message_start carrying the
// generation id and provider, text and tool_use blocks, message_delta with usage, message_stop)
// and its `event: error` on fail-after. One res.write per event; cost is whatever settle() charged.

import { NATIVE_FINISH, NATIVE_FINISH_DEFAULT } from './catalog.ts';
import { SIM_TOOL_INPUT, TOOL_FRAGMENTS } from './content.ts';
import { cutPoint } from './directives.ts';
import { messagesErrorBody, sendJson } from './errors.ts';
import { pause, randomId, send, type Exchange } from './exchange.ts';
import { CUT, delivered, endEarly, paceJson, settle, tokens, type Ending, type Run, type Tokens } from './run.ts';

/** `final` adds cost (unless no-cost); `full` adds the fields only the non-streamed message carries. */
function messagesUsage(r: Run, t: Tokens, outputTokens: number, final: boolean, full: boolean): Record<string, unknown> {
  const u: Record<string, unknown> = {
    input_tokens: t.input,
    output_tokens: outputTokens,
    cache_creation_input_tokens: t.cacheWrite,
    cache_read_input_tokens: t.cached,
  };
  if (full) {
    u.cache_creation = { ephemeral_5m_input_tokens: t.cacheWrite, ephemeral_1h_input_tokens: 0 };
    u.service_tier = 'standard';
  }
  if (final && !r.d.noCost) {
    u.cost = t.cost;
    if (full) {
      u.is_byok = false;
      u.cost_details = { upstream_inference_cost: null, upstream_inference_prompt_cost: t.promptCost, upstream_inference_completions_cost: t.completionCost };
    }
  }
  return u;
}

/** The record's finish for a completed message: normalised as on chat, the provider's raw value beside it. */
function completed(r: Run): Ending {
  const native = NATIVE_FINISH[r.provider] ?? NATIVE_FINISH_DEFAULT;
  return r.d.tool !== '' ? { finish: 'tool_calls', native: native.tool, cancelled: false } : { finish: 'stop', native: native.stop, cancelled: false };
}

export async function messagesStream(x: Exchange, r: Run): Promise<void> {
  const { d, content } = r;
  const t0 = tokens(r, 0, 0);
  const start = {
    type: 'message_start',
    message: {
      id: r.id, type: 'message', role: 'assistant', model: r.model, provider: r.provider, content: [],
      stop_reason: null, stop_sequence: null, usage: messagesUsage(r, t0, 1, false, false),
    },
  };
  x.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-generation-id': r.id });
  // The first event carries the generation id, so a caller that leaves early can still look it up.
  if (!(await send(x, `event: message_start\ndata: ${JSON.stringify(start)}\n\n`))) return;
  const n = content.pieces.length;
  const withText = n > 0 || d.tool === '';
  let index = 0;
  let pinged = false;
  if (withText) {
    if (!(await send(x, `event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n`))) return;
    if (!(await send(x, 'event: ping\ndata: {"type":"ping"}\n\n'))) return;
    pinged = true;
  }
  const cut = cutPoint(d);
  const delta = '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":';
  for (let i = 0; i <= n; i++) {
    if (i === cut) {
      return endEarly(x, r, i, 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded","error_type":"provider_overloaded"}}\n\n');
    }
    if (i === n) break;
    if (i > 0 && !(await pause(x, d.chunkDelayMs))) return;
    if (!(await send(x, `event: content_block_delta\ndata: ${delta}${content.json[i]}}}\n\n`))) return;
    delivered(r, i + 1, 0);
  }
  if (withText) {
    if (!(await send(x, 'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'))) return;
    index++;
  }
  let frags = 0;
  if (d.tool !== '') {
    const block = { type: 'content_block_start', index, content_block: { type: 'tool_use', id: `toolu_${randomId(24)}`, name: d.tool, input: {} } };
    if (!(await send(x, `event: content_block_start\ndata: ${JSON.stringify(block)}\n\n`))) return;
    if (!pinged && !(await send(x, 'event: ping\ndata: {"type":"ping"}\n\n'))) return;
    for (const f of ['', ...TOOL_FRAGMENTS]) {
      if (!(await send(x, `event: content_block_delta\ndata: {"type":"content_block_delta","index":${index},"delta":{"type":"input_json_delta","partial_json":${JSON.stringify(f)}}}\n\n`))) return;
      if (f !== '') delivered(r, n, ++frags);
    }
    if (!(await send(x, `event: content_block_stop\ndata: {"type":"content_block_stop","index":${index}}\n\n`))) return;
  }
  const t = settle(r, n, frags, completed(r));
  const md = { type: 'message_delta', delta: { stop_reason: d.tool !== '' ? 'tool_use' : 'end_turn', stop_sequence: null }, usage: messagesUsage(r, t, t.completion, true, false) };
  if (!(await send(x, `event: message_delta\ndata: ${JSON.stringify(md)}\n\n`))) return;
  if (!(await send(x, 'event: message_stop\ndata: {"type":"message_stop"}\n\n'))) return;
  x.res.end();
}

export async function messagesJson(x: Exchange, r: Run): Promise<void> {
  const { d, content } = r;
  const plan = await paceJson(x, r);
  if (!plan) return;
  const { n, cut } = plan;
  if (d.failAfter === cut && cut >= 0 && cut <= content.pieces.length) {
    // A non-streamed Anthropic answer has no way to carry a partial failure: an error status,
    // with the generation id as request_id since routing had happened (§2.5).
    settle(r, cut, 0, CUT);
    return sendJson(x.res, 502, messagesErrorBody('api_error', 'Provider returned error', 'provider_unavailable', r.id));
  }
  const blocks: unknown[] = [];
  if (n > 0 || d.tool === '') blocks.push({ type: 'text', text: content.text, citations: null });
  if (d.tool !== '') blocks.push({ type: 'tool_use', id: `toolu_${randomId(24)}`, name: d.tool, input: SIM_TOOL_INPUT });
  const t = settle(r, n, d.tool !== '' ? TOOL_FRAGMENTS.length : 0, completed(r));
  const body = JSON.stringify({
    id: r.id, type: 'message', role: 'assistant', model: r.model, provider: r.provider, content: blocks,
    stop_reason: d.tool !== '' ? 'tool_use' : 'end_turn', stop_sequence: null,
    usage: messagesUsage(r, t, t.completion, true, true),
  });
  x.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-generation-id': r.id });
  x.res.end(body);
}
