// POST /api/v1/chat/completions answered as OpenRouter does (protocols.md §1.3-1.6): the JSON
// answer, or the SSE stream (keep-alive comment, role chunk carrying the generation id, content
// deltas, tool-call fragments, finish chunk, one usage chunk with cost, [DONE]) and its in-band
// error on fail-after. One res.write per event; the usage is whatever settle() charged.

import { NATIVE_FINISH, NATIVE_FINISH_DEFAULT } from './catalog.ts';
import { TOOL_ARGS, TOOL_FRAGMENTS } from './content.ts';
import { cutPoint } from './directives.ts';
import { pause, randomId, send, type Exchange } from './exchange.ts';
import { delivered, endEarly, paceJson, settle, type Run, type Tokens } from './run.ts';

function chatUsage(r: Run, t: Tokens): string {
  const u: Record<string, unknown> = {
    prompt_tokens: t.prompt,
    completion_tokens: t.completion,
    total_tokens: t.prompt + t.completion,
    prompt_tokens_details: { cached_tokens: t.cached, cache_write_tokens: t.cacheWrite, audio_tokens: 0 },
    completion_tokens_details: { reasoning_tokens: t.reasoning, image_tokens: 0 },
  };
  if (!r.d.noCost) {
    u.cost = t.cost;
    u.is_byok = false;
    u.cost_details = { upstream_inference_cost: null, upstream_inference_prompt_cost: t.promptCost, upstream_inference_completions_cost: t.completionCost };
  }
  return JSON.stringify(u);
}

export async function chatStream(x: Exchange, r: Run): Promise<void> {
  const { d, content } = r;
  const native = NATIVE_FINISH[r.provider] ?? NATIVE_FINISH_DEFAULT;
  const base = `data: {"id":"${r.id}","provider":${JSON.stringify(r.provider)},"model":${JSON.stringify(r.model)},"object":"chat.completion.chunk","created":${r.created}`;
  const head = `${base},"choices":[{"index":0,"delta":`;
  const tail = ',"finish_reason":null,"native_finish_reason":null,"logprobs":null}]}\n\n';
  x.res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', 'x-generation-id': r.id });
  if (!(await send(x, ': OPENROUTER PROCESSING\n\n'))) return;
  // The first event carries the generation id, so a caller that leaves early can still look it up.
  if (!(await send(x, `${head}{"role":"assistant","content":""}${tail}`))) return;
  const cut = cutPoint(d);
  const n = content.pieces.length;
  for (let i = 0; i <= n; i++) {
    if (i === cut) {
      return endEarly(x, r, i, `${base},"error":{"code":502,"message":"Provider disconnected unexpectedly","metadata":{"error_type":"provider_unavailable","provider_name":${JSON.stringify(r.provider)}}},"choices":[{"index":0,"delta":{"content":""},"finish_reason":"error","native_finish_reason":null,"logprobs":null}]}\n\n`);
    }
    if (i === n) break;
    if (i > 0 && !(await pause(x, d.chunkDelayMs))) return;
    if (!(await send(x, `${head}{"content":${content.json[i]}}${tail}`))) return;
    delivered(r, i + 1, 0);
  }
  let frags = 0;
  if (d.tool !== '') {
    if (!(await send(x, `${head}{"tool_calls":[{"index":0,"id":"call_${randomId(24)}","type":"function","function":{"name":${JSON.stringify(d.tool)},"arguments":""}}]}${tail}`))) return;
    for (const f of TOOL_FRAGMENTS) {
      if (!(await send(x, `${head}{"tool_calls":[{"index":0,"function":{"arguments":${JSON.stringify(f)}}}]}${tail}`))) return;
      delivered(r, n, ++frags);
    }
  }
  const finish = d.tool !== '' ? 'tool_calls' : 'stop';
  const nativeFinish = d.tool !== '' ? native.tool : native.stop;
  if (!(await send(x, `${head}{},"finish_reason":"${finish}","native_finish_reason":"${nativeFinish}","logprobs":null}]}\n\n`))) return;
  const usageJson = chatUsage(r, settle(r, n, frags, { finish, native: nativeFinish, cancelled: false }));
  const usageChunk = d.usageChoice
    ? `${head}{},"finish_reason":null,"native_finish_reason":null,"logprobs":null}],"usage":${usageJson}}\n\n`
    : `${base},"choices":[],"usage":${usageJson}}\n\n`;
  if (!(await send(x, usageChunk))) return;
  if (!(await send(x, 'data: [DONE]\n\n'))) return;
  x.res.end();
}

export async function chatJson(x: Exchange, r: Run): Promise<void> {
  const { d, content } = r;
  const native = NATIVE_FINISH[r.provider] ?? NATIVE_FINISH_DEFAULT;
  const plan = await paceJson(x, r);
  if (!plan) return;
  const { n, cut } = plan;
  const failed = d.failAfter === cut && cut >= 0 && cut <= content.pieces.length;
  const text = n === content.pieces.length ? content.text : content.pieces.slice(0, n).join('');
  const withTool = d.tool !== '' && !failed;
  const finish = failed ? 'error' : withTool ? 'tool_calls' : 'stop';
  const nativeFinish = failed ? null : withTool ? native.tool : native.stop;
  const t = settle(r, n, withTool ? TOOL_FRAGMENTS.length : 0, { finish, native: nativeFinish, cancelled: false });
  const choice: Record<string, unknown> = {
    index: 0,
    finish_reason: finish,
    native_finish_reason: nativeFinish,
    logprobs: null,
    message: {
      role: 'assistant',
      content: text === '' && withTool ? null : text,
      refusal: null,
      reasoning: null,
      tool_calls: withTool ? [{ id: `call_${randomId(24)}`, type: 'function', function: { name: d.tool, arguments: TOOL_ARGS } }] : [],
    },
  };
  if (failed) choice.error = { code: 502, message: 'Provider disconnected unexpectedly', metadata: { error_type: 'provider_unavailable' } };
  const body = `{"id":"${r.id}","provider":${JSON.stringify(r.provider)},"model":${JSON.stringify(r.model)},"object":"chat.completion","created":${r.created},"system_fingerprint":null,"choices":[${JSON.stringify(choice)}],"usage":${chatUsage(r, t)}}`;
  x.res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-generation-id': r.id });
  x.res.end(body);
}
