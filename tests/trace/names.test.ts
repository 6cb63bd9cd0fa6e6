// Every convention name lib/trace/attributes.ts spells out is the one @opentelemetry/semantic-conventions
// 1.45.0 exports under the same constant name (ATTR_<NAME>): a typo in a gen_ai.* or HTTP name fails
// here, not in someone's dashboard. The operation and API values are the conventions' own; the
// provider name is a custom one (the conventions know no router); no content attribute is named.

import t from 'tap';
import * as semconv from '@opentelemetry/semantic-conventions/incubating';
import * as A from '../../lib/trace/attributes.ts';

const conventions = semconv as unknown as Record<string, unknown>;
const NOT_NAMES = new Set(['GENAI_SEMCONV', 'SCOPE', 'PROVIDER', 'MAX_USER_AGENT', 'OPERATION', 'OPENAI_API']);

t.test('each convention name is the package\'s, constant for constant', async (t) => {
  const ours = Object.entries(A).filter(([name, value]) => typeof value === 'string' && !NOT_NAMES.has(name) && !name.startsWith('SLUICE_'));
  t.ok(ours.length >= 25, `${ours.length} names checked`);
  for (const [name, value] of ours) t.equal(conventions[`ATTR_${name}`], value, `${name} = ${value}`);
  for (const [name, value] of Object.entries(A)) if (name.startsWith('SLUICE_')) t.match(value, /^sluice\.[a-z_.]+$/, `${name}: sluice's own namespace`);
});

t.test('operation, API and provider values', async (t) => {
  t.equal(A.OPERATION.chat, semconv.GEN_AI_OPERATION_NAME_VALUE_CHAT);
  t.equal(A.OPERATION.messages, semconv.GEN_AI_OPERATION_NAME_VALUE_CHAT);
  t.equal(A.OPERATION.responses, semconv.GEN_AI_OPERATION_NAME_VALUE_CHAT);
  t.equal(A.OPENAI_API.chat, semconv.OPENAI_API_TYPE_VALUE_CHAT_COMPLETIONS);
  t.equal(A.OPENAI_API.responses, semconv.OPENAI_API_TYPE_VALUE_RESPONSES);
  const wellKnown = Object.entries(conventions).filter(([k]) => k.startsWith('GEN_AI_PROVIDER_NAME_VALUE_')).map(([, v]) => v);
  t.ok(wellKnown.length > 5 && !wellKnown.includes(A.PROVIDER), `${A.PROVIDER} is a custom value beside ${wellKnown.length} well-known ones`);
});

t.test('no content attribute is named', async (t) => {
  const values = new Set<unknown>(Object.values(A));
  for (const content of [semconv.ATTR_GEN_AI_INPUT_MESSAGES, semconv.ATTR_GEN_AI_OUTPUT_MESSAGES, semconv.ATTR_GEN_AI_SYSTEM_INSTRUCTIONS,
    semconv.ATTR_GEN_AI_TOOL_DEFINITIONS, semconv.ATTR_GEN_AI_PROMPT, semconv.ATTR_GEN_AI_COMPLETION, semconv.ATTR_GEN_AI_TOOL_CALL_ARGUMENTS,
    semconv.ATTR_GEN_AI_TOOL_CALL_RESULT]) {
    t.notOk(values.has(content), `${content} is never set`);
  }
});
