// Reads and scans the request body, once, after the header-only checks have passed: an
// unauthenticated client never makes sluice buffer its body, and a key's bodies arriving at once
// are bounded in number and bytes before a byte is read (lib/intake.ts). Bodies over 32 MiB answer 413
// (refused from content-length before reading when it is declared), bodies that stall answer
// 408, bodies that are not a JSON object with a usable string `model`, or that nest deeper than
// anything downstream can re-serialise, answer 400; nothing goes upstream.

import type { Ctx, Plugin, ReadCtx } from '../lib/context.ts';
import { identify } from '../lib/end-user.ts';
import type { Deps } from '../lib/deps.ts';
import { GatewayError } from '../lib/errors.ts';
import type { Reservation } from '../lib/intake.ts';
import { PROXIED } from '../lib/routes.ts';
import { scanJson, type ScanLimits } from '../lib/json-scan.ts';
import { bodyFromScan } from '../lib/request-body.ts';

export const MAX_BODY_BYTES = 32 * 1024 * 1024;
/**
 * Arrays and objects nested deeper than this answer 400. JSON.parse copes with any depth, but
 * JSON.stringify (a changed member is re-serialised) overflows the stack a few thousand levels
 * down; real requests (tool schemas included) stay far below this. The scan measures it.
 */
export const MAX_DEPTH = 512;
/**
 * What one body may hold besides bytes and depth (lib/json-scan.ts counts them as it reads). A turn
 * of a coding agent's conversation is 10–25 JSON values (a tool call and its result, with their
 * wrappers) and at least ~100 tokens, so even a 1 M-token context holds under 250 000 values;
 * Codex's 272 k-token one under 40 000. No object of a real request has more than a few hundred
 * members. Decoding a member costs per value (JSON.parse: ~0.2 µs a value, ~1 µs a key of an
 * object past 128 keys), so these bounds also bound the longest a plugin's decode can hold the
 * event loop (~60 ms). Past either: 400, nothing decoded.
 */
export const BODY_LIMITS: ScanLimits = { values: 250_000, objectMembers: 1_000 };
const OVER_LIMIT: Record<keyof ScanLimits, string> = {
  values: `The request body holds more than ${BODY_LIMITS.values.toLocaleString('en')} JSON values.`,
  objectMembers: `An object in the request body has more than ${BODY_LIMITS.objectMembers.toLocaleString('en')} members.`,
};
/**
 * The model id goes upstream as given and comes back in the `x-sluice-model` response header, so
 * it must be a header-safe token: router ids are short printable ASCII (`openai/gpt-5:online`).
 */
const MODEL_RE = /^[\x21-\x7e]{1,256}$/;
/** Top-level arrays whose entries the scan indexes: the sanitizers inspect them without decoding them. */
const INDEXED = new Set(['messages', 'tools', 'input']);
/** The members of those entries the sanitizers ask about (plugins/sanitize.ts, plugins/sanitize-responses.ts). */
const ENTRY_KEYS = ['role', 'type', 'strict', 'defer_loading'];

/** The one scan of a request body, with the bounds and the indexes the plugins rely on (null: not JSON). */
export function scanBody(raw: Buffer) {
  return scanJson(raw, { maxDepth: MAX_DEPTH, watch: INDEXED, entryKeys: ENTRY_KEYS, limits: BODY_LIMITS });
}

function readAll(ctx: Ctx, timeoutMs: number, room: Reservation): Promise<Buffer> {
  const req = ctx.req;
  // The client may have left while the header-only checks awaited: 'close' has already fired.
  if (req.destroyed) return Promise.reject(new Error('client closed before the body was complete'));
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const timer = setTimeout(() => fail(new GatewayError('body_timeout')), timeoutMs);
    function done() {
      clearTimeout(timer);
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
    }
    function fail(err: Error) {
      done();
      req.pause();
      reject(err);
    }
    function onData(c: Buffer) {
      size += c.length;
      if (size > MAX_BODY_BYTES) return fail(new GatewayError('request_too_large'));
      try {
        room.grow(c.length);
      } catch (err) {
        return fail(err as Error);
      }
      chunks.push(c);
    }
    function onEnd() {
      done();
      resolve(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, size));
    }
    function onError(err: Error) {
      fail(err);
    }
    function onClose() {
      if (!req.complete) fail(new Error('client closed before the body was complete'));
    }
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
  });
}

export function readBody(deps: Pick<Deps, 'admission'>, opts: { timeoutMs: number }): Plugin<'profiled', 'read'> {
  const { admission } = deps;
  return {
    name: 'read-body',
    routes: PROXIED,
    needs: 'profiled',
    gives: 'read',
    async run(ctx) {
      const declared = Number(ctx.req.headers['content-length']);
      if (declared > MAX_BODY_BYTES) throw new GatewayError('request_too_large');
      const keyId = ctx.key.row.id;
      const limits = ctx.profile.rate_limits;
      let raw: Buffer;
      // Room for the body is taken before a byte of it is read, and given back once it is.
      const room = admission.room(keyId, limits, declared > 0 ? declared : 0);
      try {
        raw = await readAll(ctx, opts.timeoutMs, room);
      } catch (err) {
        admission.countAbandoned(keyId, limits);
        throw err;
      } finally {
        room.end();
      }
      // One pass over the bytes validates the JSON and finds the top-level members; nothing is
      // decoded beyond the small members (lib/request-body.ts).
      const scan = scanBody(raw);
      if (!scan) throw new GatewayError('invalid_body', { message: 'The request body is not valid JSON.' });
      if (scan.overLimit) throw new GatewayError('invalid_body', { message: OVER_LIMIT[scan.overLimit] });
      if (scan.root !== 'object') throw new GatewayError('invalid_body', { message: 'The request body must be a JSON object.' });
      const body = bodyFromScan(raw, scan);
      const model = body.model;
      if (typeof model !== 'string' || model === '') {
        throw new GatewayError('invalid_body', { message: 'The request body must name a `model` (a non-empty string).' });
      }
      if (!MODEL_RE.test(model)) {
        throw new GatewayError('invalid_body', { message: 'The `model` must be at most 256 printable ASCII characters, without spaces.' });
      }
      if (scan.tooDeep) {
        throw new GatewayError('invalid_body', { message: `The request body nests arrays and objects deeper than ${MAX_DEPTH} levels.` });
      }
      const read = ctx as ReadCtx; // the phase this plugin gives: its fields are set just below
      read.raw = raw;
      read.body = body;
      read.requestedModel = model;
      read.stream = body.stream === true;
      identify(read);
    },
  };
}
