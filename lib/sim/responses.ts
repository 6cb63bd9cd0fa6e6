// POST /api/v1/responses answered as OpenRouter's stateless Responses API does (beta; docs/simulator.md):
// the JSON response object (`id` = the `gen-…` generation id, `output` items, usage with `cost`),
// or the named-event stream (`response.created`, `response.in_progress`, the items' added/delta/
// done events with sequence numbers, `response.completed`, then `data: [DONE]`), a reasoning item
// for `reasoning=`, one function call for `tool=` unless the input already answers a call, and
// `response.failed` on fail-after. One res.write per event; the cost is whatever settle() charged.

import { SIM_TOOL_INPUT, TOOL_ARGS, TOOL_FRAGMENTS } from './content.ts';
import { cutPoint } from './directives.ts';
import { pause, randomId, send, type Exchange } from './exchange.ts';
import { delivered, endEarly, paceJson, settle, type Run, type Tokens } from './run.ts';

const REASONING_SUMMARY = 'Considering the request.';

function usageOf(r: Run, t: Tokens): Record<string, unknown> {
  const u: Record<string, unknown> = {
    input_tokens: t.prompt,
    input_tokens_details: { cached_tokens: t.cached },
    output_tokens: t.completion,
    output_tokens_details: { reasoning_tokens: t.reasoning },
    total_tokens: t.prompt + t.completion,
  };
  if (!r.d.noCost) {
    u.cost = t.cost;
    u.is_byok = false;
  }
  return u;
}

/** Whether the conversation's last input item answers a function call: the model then writes text. */
export function answersCall(json: any): boolean {
  const input = json?.input;
  return Array.isArray(input) && input.length > 0 && input[input.length - 1]?.type === 'function_call_output';
}

/** The response object around `output`, as the stream's lifecycle events and the JSON answer carry it. */
function responseObject(r: Run, json: any, status: string, output: unknown[], usage: unknown, error: unknown = null): Record<string, unknown> {
  return {
    id: r.id, object: 'response', created_at: r.created, model: r.model, status, error, incomplete_details: null,
    instructions: json.instructions ?? null, max_output_tokens: json.max_output_tokens ?? null, output, parallel_tool_calls: json.parallel_tool_calls ?? true,
    previous_response_id: null, reasoning: json.reasoning ?? null, store: false, temperature: json.temperature ?? null,
    tool_choice: json.tool_choice ?? 'auto', tools: Array.isArray(json.tools) ? json.tools : [], top_p: json.top_p ?? null, usage,
  };
}

interface Items { message: string; reasoning: string; call: string; callId: string }

function itemIds(): Items {
  return { message: `msg_${randomId(24)}`, reasoning: `rs_${randomId(24)}`, call: `fc_${randomId(24)}`, callId: `call_${randomId(24)}` };
}

const reasoningItem = (ids: Items) => ({ id: ids.reasoning, type: 'reasoning', summary: [{ type: 'summary_text', text: REASONING_SUMMARY }] });
const messageItem = (ids: Items, text: string, status: string) => ({
  id: ids.message, type: 'message', status, role: 'assistant', content: status === 'in_progress' ? [] : [{ type: 'output_text', text, annotations: [] }],
});
const callItem = (ids: Items, name: string, args: string, status: string) => ({ id: ids.call, type: 'function_call', status, call_id: ids.callId, name, arguments: args });

export async function responsesStream(x: Exchange, r: Run, json: any): Promise<void> {
  const { d, content } = r;
  const ids = itemIds();
  const withTool = d.tool !== '' && !answersCall(json);
  let seq = 0;
  const ev = (type: string, body: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: seq++, ...body })}\n\n`;
  x.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-generation-id': r.id });
  // The first event carries the generation id, so a caller that leaves early can still look it up.
  if (!(await send(x, ev('response.created', { response: responseObject(r, json, 'in_progress', [], null) })))) return;
  if (!(await send(x, ev('response.in_progress', { response: responseObject(r, json, 'in_progress', [], null) })))) return;
  const output: unknown[] = [];
  let index = 0;
  if (d.reasoning > 0) {
    if (!(await send(x, ev('response.output_item.added', { output_index: index, item: { ...reasoningItem(ids), summary: [] } })))) return;
    if (!(await send(x, ev('response.reasoning_summary_text.delta', { item_id: ids.reasoning, output_index: index, summary_index: 0, delta: REASONING_SUMMARY })))) return;
    if (!(await send(x, ev('response.output_item.done', { output_index: index, item: reasoningItem(ids) })))) return;
    output.push(reasoningItem(ids));
    index++;
  }
  const n = withTool ? 0 : content.pieces.length;
  const where = { item_id: ids.message, output_index: index, content_index: 0 };
  if (!withTool) {
    if (!(await send(x, ev('response.output_item.added', { output_index: index, item: messageItem(ids, '', 'in_progress') })))) return;
    if (!(await send(x, ev('response.content_part.added', { ...where, part: { type: 'output_text', text: '', annotations: [] } })))) return;
  }
  const cut = cutPoint(d);
  for (let i = 0; i <= n; i++) {
    if (i === cut) {
      const failed = responseObject(r, json, 'failed', output, null, { code: 'server_error', message: 'Provider disconnected unexpectedly' });
      return endEarly(x, r, i, `${ev('response.failed', { response: failed })}data: [DONE]\n\n`);
    }
    if (i === n) break;
    if (i > 0 && !(await pause(x, d.chunkDelayMs))) return;
    if (!(await send(x, ev('response.output_text.delta', { ...where, delta: content.pieces[i], logprobs: [] })))) return;
    delivered(r, i + 1, 0);
  }
  if (!withTool) {
    if (!(await send(x, ev('response.output_text.done', { ...where, text: content.text, logprobs: [] })))) return;
    if (!(await send(x, ev('response.content_part.done', { ...where, part: { type: 'output_text', text: content.text, annotations: [] } })))) return;
    if (!(await send(x, ev('response.output_item.done', { output_index: index, item: messageItem(ids, content.text, 'completed') })))) return;
    output.push(messageItem(ids, content.text, 'completed'));
  }
  let frags = 0;
  if (withTool) {
    if (!(await send(x, ev('response.output_item.added', { output_index: index, item: callItem(ids, d.tool, '', 'in_progress') })))) return;
    for (const f of TOOL_FRAGMENTS) {
      if (!(await send(x, ev('response.function_call_arguments.delta', { item_id: ids.call, output_index: index, delta: f })))) return;
      delivered(r, 0, ++frags);
    }
    if (!(await send(x, ev('response.function_call_arguments.done', { item_id: ids.call, output_index: index, arguments: TOOL_ARGS })))) return;
    if (!(await send(x, ev('response.output_item.done', { output_index: index, item: callItem(ids, d.tool, TOOL_ARGS, 'completed') })))) return;
    output.push(callItem(ids, d.tool, TOOL_ARGS, 'completed'));
  }
  const t = settle(r, n, frags, { finish: withTool ? 'tool_calls' : 'stop', native: 'completed', cancelled: false });
  if (!(await send(x, ev('response.completed', { response: responseObject(r, json, 'completed', output, usageOf(r, t)) })))) return;
  if (!(await send(x, 'data: [DONE]\n\n'))) return;
  x.res.end();
}

export async function responsesJson(x: Exchange, r: Run, json: any): Promise<void> {
  const { d, content } = r;
  const plan = await paceJson(x, r);
  if (!plan) return;
  const { n, cut } = plan;
  const ids = itemIds();
  const withTool = d.tool !== '' && !answersCall(json);
  const failed = d.failAfter === cut && cut >= 0 && cut <= content.pieces.length;
  const text = n === content.pieces.length ? content.text : content.pieces.slice(0, n).join('');
  const output: unknown[] = [];
  if (d.reasoning > 0) output.push(reasoningItem(ids));
  if (withTool && !failed) output.push(callItem(ids, d.tool, JSON.stringify(SIM_TOOL_INPUT), 'completed'));
  else output.push(messageItem(ids, text, failed ? 'incomplete' : 'completed'));
  const t = settle(r, withTool && !failed ? 0 : n, withTool && !failed ? TOOL_FRAGMENTS.length : 0, { finish: failed ? 'error' : withTool ? 'tool_calls' : 'stop', native: failed ? null : 'completed', cancelled: false });
  const error = failed ? { code: 'server_error', message: 'Provider disconnected unexpectedly' } : null;
  const body = JSON.stringify(responseObject(r, json, failed ? 'failed' : 'completed', output, usageOf(r, t), error));
  x.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-generation-id': r.id });
  x.res.end(body);
}
