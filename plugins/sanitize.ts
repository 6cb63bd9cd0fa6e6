// The messages-dialect sanitizer (spec table): non-vendor models reject these fields, so they go.
// Adaptive `thinking`, `context_management`, `output_config`, tools' `strict` and `defer_loading`
// are dropped; `role: system` turns become user turns (role and content only) and consecutive user
// turns merge, so a conversation that ended on a system turn ends on a user turn. Everything else passes untouched.
// The checks read the scan's index (lib/request-body.ts): `tools` and `messages` are decoded only when they must change.

import type { Plugin } from '../lib/context.ts';
import { someEntryHas, someEntryWith } from '../lib/request-body.ts';

const TOOL_FIELDS = ['strict', 'defer_loading'] as const;

type Block = Record<string, unknown>;

function blocks(content: unknown): Block[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? (content as Block[]) : [];
}

/**
 * System turns made user turns, and each run of consecutive user turns made one, its content
 * blocks in order. Linear: a run's blocks are appended to one array that the run's merged turn owns.
 */
export function mergeTurns(messages: unknown[]): unknown[] {
  const out: unknown[] = [];
  /** The content of out's last turn when it is a merged one (an array made here, safe to append to). */
  let merged: Block[] | null = null;
  for (const m of messages as Array<Record<string, any> | null>) {
    const msg = m?.role === 'system' ? { role: 'user', content: m.content } : m;
    const last = out[out.length - 1] as Record<string, any> | undefined;
    if (msg?.role !== 'user' || last?.role !== 'user') {
      out.push(msg);
      merged = null;
      continue;
    }
    if (merged === null) {
      merged = blocks(last.content).slice();
      out[out.length - 1] = { ...last, content: merged };
    }
    for (const block of blocks(msg.content)) merged.push(block);
  }
  return out;
}

/** The tools without their `strict` and `defer_loading`: a new list, a copy of each tool that had one (the body rule, lib/request-body.ts). */
function withoutToolFields(tools: unknown[], removed: string[]): unknown[] {
  return tools.map((tool) => {
    if (!tool || typeof tool !== 'object') return tool;
    let copy: Block | null = null;
    for (const field of TOOL_FIELDS) {
      if (!(field in tool)) continue;
      copy ??= { ...(tool as Block) };
      delete copy[field];
      if (!removed.includes(`tools[].${field}`)) removed.push(`tools[].${field}`);
    }
    return copy ?? tool;
  });
}

export function sanitize(): Plugin<'read'> {
  return {
    name: 'sanitize',
    routes: ['messages'],
    needs: 'read',
    gives: 'read',
    run(ctx) {
      const body = ctx.body;
      const removed = ctx.removed;
      if (body.thinking && typeof body.thinking === 'object' && body.thinking.type === 'adaptive') {
        delete body.thinking;
        removed.push('thinking');
      }
      for (const field of ['context_management', 'output_config']) {
        if (field in body) {
          delete body[field];
          removed.push(field);
        }
      }
      if (someEntryHas(body, 'tools', TOOL_FIELDS)) body.tools = withoutToolFields(body.tools, removed);
      if (someEntryWith(body, 'messages', 'role', 'system')) {
        body.messages = mergeTurns(body.messages);
        removed.push('messages[role=system]');
      }
    },
  };
}
