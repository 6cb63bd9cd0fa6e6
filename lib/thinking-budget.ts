// Keeps a request's thinking or reasoning budget valid under the output cap sluice sets. Anthropic
// (and OpenRouter for Anthropic models) refuses a budget below 1024 or not below max_tokens, so a
// cap that lowers max_tokens must lower the budget with it, and leave room for the answer. Pure
// functions over the body object: they change it in place and say what they changed; no I/O.

/** The smallest budget Anthropic accepts (`thinking.enabled.budget_tokens` ≥ 1024). */
export const MIN_THINKING_BUDGET = 1024;
/** Tokens always left for the answer after the thinking budget. */
export const MIN_ANSWER_RESERVE = 1024;
/** Share of the cap kept for the answer when that is more than MIN_ANSWER_RESERVE. */
export const ANSWER_SHARE = 0.25;

/**
 * The largest budget that leaves an answer room under `cap`: a quarter of the cap, and never less
 * than 1024 tokens, is kept for the answer (a budget of cap − 1 lets thinking use every token and
 * the answer is cut off at its first words). Null when no budget ≥ 1024 fits.
 */
export function largestBudget(cap: number): number | null {
  const reserve = Math.max(MIN_ANSWER_RESERVE, Math.ceil(cap * ANSWER_SHARE));
  const budget = cap - reserve;
  return budget >= MIN_THINKING_BUDGET ? budget : null;
}

/**
 * Fits the budget at `holder[field]` (messages `thinking.budget_tokens`, chat and responses
 * `reasoning.max_tokens`) under `cap`. Returns what it did, for the request's log line, or null
 * when the budget was already valid or there is none. When nothing fits, `dropHolder` runs:
 * thinking goes for this request.
 */
function fit(holder: Record<string, any>, field: string, cap: number, label: string, dropHolder: () => string): string | null {
  const asked = holder[field];
  if (typeof asked !== 'number') return null;
  const largest = largestBudget(cap);
  if (largest === null) return dropHolder();
  if (asked >= MIN_THINKING_BUDGET && asked <= largest) return null;
  // A budget the client set below 1024 is the client's own error only while sluice did not touch
  // the cap; once sluice rewrites the request it must leave a valid one.
  const budget = asked < MIN_THINKING_BUDGET ? MIN_THINKING_BUDGET : largest;
  holder[field] = budget;
  return `${label} ${asked}→${budget} (cap ${cap})`;
}

/**
 * Keeps the messages dialect's `thinking: {type: "enabled", budget_tokens}` valid under the cap now
 * in `max_tokens`. Adaptive and disabled thinking have no budget and stay.
 */
export function fitMessagesThinking(body: Record<string, any>, cap: number): string | null {
  const thinking = body.thinking;
  if (!thinking || typeof thinking !== 'object' || thinking.type !== 'enabled') return null;
  // A new object: the client's `thinking` value may be shared with nothing, but the body splice
  // re-serialises a member only when it sees a new value (lib/request-body.ts).
  const copy = { ...thinking };
  const done = fit(copy, 'budget_tokens', cap, 'thinking.budget_tokens', () => {
    delete body.thinking;
    return `thinking dropped (cap ${cap} leaves no budget ≥ ${MIN_THINKING_BUDGET})`;
  });
  if (done !== null && 'thinking' in body) body.thinking = copy;
  return done;
}

/**
 * Keeps OpenRouter's `reasoning.max_tokens` (chat and responses dialects) valid under the cap.
 * `reasoning.effort` needs no budget (the router derives one from the cap) and stays. When no
 * budget fits, reasoning goes for this request, as thinking does on the messages dialect.
 */
export function fitReasoning(body: Record<string, any>, cap: number): string | null {
  const reasoning = body.reasoning;
  if (!reasoning || typeof reasoning !== 'object' || Array.isArray(reasoning)) return null;
  const copy = { ...reasoning };
  const done = fit(copy, 'max_tokens', cap, 'reasoning.max_tokens', () => {
    delete body.reasoning;
    return `reasoning dropped (cap ${cap} leaves no budget ≥ ${MIN_THINKING_BUDGET})`;
  });
  if (done !== null && 'reasoning' in body) body.reasoning = copy;
  return done;
}
