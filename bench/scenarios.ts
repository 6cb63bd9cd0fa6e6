// The benchmark's request bodies, built deterministically (a seeded generator, no randomness), so
// every run and every target sends exactly the same bytes. The direct sim and the floor get the
// body with the model sluice would resolve to; sluice gets what a client sends (`sluice/fast`,
// `claude-sonnet-4-5`). Sizes are exact: the 2 KB chat body is 2048 bytes, the coding agent's ~300 KB.

export type ScenarioName = 'chat-2k' | 'chat-2k-resolved' | 'stream-20' | 'messages-300k';

export interface Scenario {
  name: ScenarioName;
  title: string;
  dialect: 'chat' | 'messages';
  connections: number;
  /** Headers every target gets (authorization is added per target). */
  headers: Record<string, string>;
  /** The body as a client of sluice sends it. */
  sluiceBody: string;
  /** The same body with the model sluice forwards, for the direct sim and the floor. */
  upstreamBody: string;
  stream: boolean;
}

/** A small linear congruential generator: the same "random" text on every run. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const WORDS = ('the a request gateway stream token budget profile router upstream model key session tier cache '
  + 'function return const await async import export interface type string number boolean error value '
  + 'handler config server client response header body parse write read file path line test check').split(' ');

function prose(r: () => number, bytes: number): string {
  let out = '';
  while (out.length < bytes) out += WORDS[Math.floor(r() * WORDS.length)] + (r() < 0.08 ? '. ' : ' ');
  return out.slice(0, bytes);
}

/** Source-like text: indentation, quotes, braces and newlines, so JSON escaping costs what it costs. */
function code(r: () => number, bytes: number): string {
  const lines: string[] = [];
  let n = 0;
  let i = 1;
  while (n < bytes) {
    const indent = '  '.repeat(Math.floor(r() * 4));
    const w = () => WORDS[Math.floor(r() * WORDS.length)];
    const line = `${String(i++).padStart(5)}\t${indent}${r() < 0.5 ? `const ${w()}_${w()} = await ${w()}("${w()} ${w()}", { ${w()}: ${Math.floor(r() * 1000)} });` : `if (${w()} !== "${w()}") return ${w()}.${w()}(\`${w()}\`);`}`;
    lines.push(line);
    n += line.length + 1;
  }
  return lines.join('\n').slice(0, bytes);
}

/** Pads `fill` inside `make` until the JSON text is exactly `bytes` long (ASCII content). */
function exactJson(bytes: number, make: (fill: string) => unknown): string {
  const base = JSON.stringify(make(''));
  const pad = 'x'.repeat(Math.max(0, bytes - base.length));
  const out = JSON.stringify(make(pad));
  if (out.length !== bytes) throw new Error(`body is ${out.length} bytes, wanted ${bytes}`);
  return out;
}

function chatBody(model: string, stream: boolean): Record<string, unknown> {
  const r = rng(42);
  const system = `You are a helpful assistant. ${prose(r, 300)}`;
  const question = prose(r, 1500);
  return JSON.parse(exactJson(2048, (fill) => ({
    model,
    messages: [
      { role: 'system', content: system },
      { role: 'user', content: question + fill },
    ],
    max_tokens: 512,
    temperature: 0.2,
    user: 'bench-user',
    ...(stream ? { stream: true } : {}),
  })));
}

const SESSION_ID = '6f1c2d3e-4b5a-4c7d-8e9f-0a1b2c3d4e5f';
const TOOL_NAMES = ['Bash', 'Read', 'Edit', 'Write', 'Glob', 'Grep', 'TodoWrite', 'WebFetch', 'Task', 'NotebookEdit', 'MultiEdit', 'LS'];

/** A coding agent's turn: long cached system prompt, tools with schemas, many tool_use/tool_result rounds. */
function messagesBody(model: string, targetBytes: number): Record<string, unknown> {
  const r = rng(7);
  const tools = TOOL_NAMES.map((name) => ({
    name,
    description: `${name}: ${prose(r, 1200)}`,
    input_schema: {
      type: 'object',
      properties: {
        path: { type: 'string', description: prose(r, 120) },
        command: { type: 'string', description: prose(r, 160) },
        limit: { type: 'number', description: prose(r, 60) },
        options: { type: 'array', items: { type: 'string' }, description: prose(r, 80) },
      },
      required: ['path'],
      additionalProperties: false,
      $schema: 'http://json-schema.org/draft-07/schema#',
    },
  }));
  const system = [
    { type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: { type: 'ephemeral' } },
    { type: 'text', text: prose(r, 14_000), cache_control: { type: 'ephemeral' } },
    { type: 'text', text: prose(r, 4_000) },
  ];
  const messages: Array<Record<string, unknown>> = [{ role: 'user', content: [{ type: 'text', text: prose(r, 600) }] }];
  const make = () => ({
    model,
    max_tokens: 32000,
    system,
    messages,
    tools,
    metadata: { user_id: JSON.stringify({ device_id: 'd'.repeat(64), account_uuid: '0c0ffee0-1111-4222-8333-444455556666', session_id: SESSION_ID }) },
    temperature: 1,
  });
  let turn = 0;
  while (JSON.stringify(make()).length < targetBytes) {
    const id = `toolu_${String(turn).padStart(4, '0')}${'A'.repeat(18)}`;
    const name = TOOL_NAMES[turn % TOOL_NAMES.length];
    messages.push({
      role: 'assistant',
      content: [
        { type: 'text', text: prose(r, 200) },
        { type: 'tool_use', id, name, input: { path: `src/${WORDS[turn % WORDS.length]}/${turn}.ts`, command: prose(r, 40) } },
      ],
    });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: id, content: code(r, 3_500) }] });
    turn++;
  }
  // The last turn carries the cache breakpoint, like a coding agent's.
  const last = messages[messages.length - 1]!.content as Array<Record<string, unknown>>;
  last[last.length - 1]!.cache_control = { type: 'ephemeral' };
  return make();
}

/** The client's body, and the same body carrying the model sluice resolves it to. */
function pair(body: Record<string, unknown>, upstreamModel: string): { sluiceBody: string; upstreamBody: string } {
  return { sluiceBody: JSON.stringify(body), upstreamBody: JSON.stringify({ ...body, model: upstreamModel }) };
}

export const TIER_FAST_MODEL = 'google/gemini-2.5-flash';
export const TIER_AGENT_MODEL = 'anthropic/claude-sonnet-4.5';

export function scenarios(): Scenario[] {
  const json = { 'content-type': 'application/json' };
  const agentHeaders = {
    ...json,
    'anthropic-version': '2023-06-01',
    'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14',
    'x-claude-code-session-id': SESSION_ID,
    'x-app': 'cli',
    'user-agent': 'claude-cli/2.0.14 (external, cli)',
  };
  return [
    {
      name: 'chat-2k', title: '2 KB chat', dialect: 'chat', connections: 32, headers: json, stream: false,
      ...pair(chatBody('sluice/fast', false), TIER_FAST_MODEL),
    },
    {
      // The same request naming the tier's model itself: what resolution and the splice cost is the difference.
      name: 'chat-2k-resolved', title: '2 KB chat, model id', dialect: 'chat', connections: 32, headers: json, stream: false,
      ...pair(chatBody(TIER_FAST_MODEL, false), TIER_FAST_MODEL),
    },
    {
      name: 'stream-20', title: '20-chunk stream', dialect: 'chat', connections: 32, headers: { ...json, 'x-sim': 'chunks=20' }, stream: true,
      ...pair(chatBody('sluice/fast', true), TIER_FAST_MODEL),
    },
    {
      name: 'messages-300k', title: '300 KB agent body', dialect: 'messages', connections: 32, headers: agentHeaders, stream: false,
      ...pair(messagesBody('claude-sonnet-4-5', 300 * 1024), TIER_AGENT_MODEL),
    },
  ];
}
