// The entry of both inference routes: the bearer key and body checks, the key's refusals
// (management key, deleted, disabled, expired, over its limit), the pre-response directives
// (hang, delay-ms, status) after the body checks the real routers make (validate.ts), then a Run with its generation id handed to the dialect. From the
// moment a Run exists, the exchange's end settles it, so a caller that leaves is charged and
// recorded for what it got.

import { chatJson, chatStream } from './chat.ts';
import { providerOf } from './catalog.ts';
import { parseDirectives } from './directives.ts';
import { BAD_JSON, BAD_JSON_MESSAGES, MISSING_AUTH, MISSING_AUTH_MESSAGES, retryHeaders, sendJson, simulatedErrorBody, type Dialect } from './errors.ts';
import { bearerOf, pause, type Exchange } from './exchange.ts';
import { keyRefusal } from './management.ts';
import { messagesJson, messagesStream } from './messages.ts';
import { responsesJson, responsesStream } from './responses.ts';
import { baseOf, modelOf, newRun, settleEarlyEnd } from './run.ts';
import type { SimState } from './state.ts';
import { validate } from './validate.ts';

export async function inference(x: Exchange, state: SimState, dialect: Dialect): Promise<void> {
  const { sim, res } = x;
  const bearer = bearerOf(sim.headers);
  if (bearer === undefined) return sendJson(res, 401, dialect === 'messages' ? MISSING_AUTH_MESSAGES : MISSING_AUTH);
  const json = sim.json;
  if (json === null || typeof json !== 'object' || Array.isArray(json)) return sendJson(res, 400, dialect === 'messages' ? BAD_JSON_MESSAGES : BAD_JSON);
  const refusal = keyRefusal(state, bearer, dialect);
  if (refusal !== undefined) return sendJson(res, refusal.status, refusal.body);
  // Refused as the real routers refuse it, before any directive: a bad body never routes.
  const invalid = validate(dialect, json, sim.headers);
  if (invalid !== undefined) return sendJson(res, invalid.status, invalid.body);

  const d = parseDirectives(sim.headers['x-sim']);
  if (d.hang) return; // never answer; 'closed' fires when the caller gives up
  if (!(await pause(x, d.delayMs))) return;

  const model = modelOf(json);
  if (d.status !== 0) {
    const provider = providerOf(baseOf(model), d.provider);
    return sendJson(res, d.status, simulatedErrorBody(dialect, d.status, model, provider), retryHeaders(d.status));
  }
  const r = newRun(state, json, model, d, bearer, x.bodyBytes);
  x.onEnd = () => settleEarlyEnd(r, sim.aborted);
  if (dialect === 'chat') return r.streamed ? chatStream(x, r) : chatJson(x, r);
  if (dialect === 'responses') return r.streamed ? responsesStream(x, r, json) : responsesJson(x, r, json);
  return r.streamed ? messagesStream(x, r) : messagesJson(x, r);
}
