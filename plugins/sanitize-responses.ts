// The Responses-dialect sanitizer (docs/responses.md, the field table). The router's Responses API
// is stateless: what asks it to store or recall state (`previous_response_id`, `store: true`,
// `conversation`, `background: true`, `item_reference` and Codex's `compaction_trigger` input
// items) answers 400 in the dialect before anything is spent, each with what to send instead.
// `client_metadata` (Codex's ids, read by no router) goes, and is logged. Everything else passes untouched.
// It runs before model resolution, so a refused request costs no sluice/auto decision.

import type { Plugin } from '../lib/context.ts';
import { GatewayError } from '../lib/errors.ts';
import { memberKind, someEntryWith } from '../lib/request-body.ts';

const STATELESS = "the router's Responses API is stateless and stores nothing";

const REFUSE = {
  previous_response_id: `\`previous_response_id\` is not supported: ${STATELESS}. Send the whole conversation in \`input\`.`,
  store: `\`store: true\` is not supported: ${STATELESS}. Send \`store: false\` or leave it out.`,
  conversation: `\`conversation\` is not supported: ${STATELESS}. Send the whole conversation in \`input\`.`,
  background: `\`background: true\` is not supported: a background response is stored to be polled, and ${STATELESS}. Stream it instead (\`stream: true\`).`,
  item_reference: `\`input\` items of type \`item_reference\` point at stored items, and ${STATELESS}. Send the items themselves.`,
  compaction_trigger: 'Remote compaction is not supported through this router (an `input` item of type `compaction_trigger`). In Codex, leave `remote_compaction` out of the provider\'s capabilities: it then compacts locally.',
} as const;

/** Members the router cannot use, dropped before forwarding: Codex's turn, session and installation ids. */
const DROPPED = ['client_metadata'] as const;

function refuse(message: string): never {
  throw new GatewayError('invalid_body', { message });
}

/** Checks a boolean switch that may only be off: absent, null or false pass; true is refused; anything else is a type error. */
function offOnly(body: Record<string, any>, field: 'store' | 'background'): void {
  const v = body[field];
  if (v === undefined || v === null || v === false) return;
  if (v === true) refuse(REFUSE[field]);
  refuse(`\`${field}\` must be a boolean.`);
}

export function sanitizeResponses(): Plugin<'read'> {
  return {
    name: 'sanitize-responses',
    routes: ['responses'],
    needs: 'read',
    gives: 'read',
    run(ctx) {
      const body = ctx.body;
      if (body.previous_response_id !== undefined && body.previous_response_id !== null) refuse(REFUSE.previous_response_id);
      if (body.conversation !== undefined && body.conversation !== null) refuse(REFUSE.conversation);
      offOnly(body, 'store');
      offOnly(body, 'background');
      // `input` is most of the body (a whole conversation): it is judged from the scan, never decoded here.
      const input = memberKind(body, 'input');
      if (input !== undefined && input !== 'string' && input !== 'array') refuse('`input` must be a string or an array of input items.');
      if (input === 'array') {
        if (someEntryWith(body, 'input', 'type', 'item_reference')) refuse(REFUSE.item_reference);
        if (someEntryWith(body, 'input', 'type', 'compaction_trigger')) refuse(REFUSE.compaction_trigger);
      }
      for (const field of DROPPED) {
        if (field in body) {
          delete body[field];
          ctx.removed.push(field);
        }
      }
    },
  };
}
