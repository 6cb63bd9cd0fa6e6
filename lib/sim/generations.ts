// GET /api/v1/generation?id=… (protocols.md §1.7): the record of a generation, from the log in
// generation-log.ts, for any live key of the account; 404 until the record is visible (like
// OpenRouter, `delay` ms after the generation ended).

import { MISSING_AUTH, USER_NOT_FOUND, managementErrorBody, sendJson } from './errors.ts';
import { bearerOf, type Exchange } from './exchange.ts';
import { gate } from './faults.ts';
import type { SimState } from './state.ts';

const MISSING_ID = managementErrorBody(400, 'Missing required parameter: id');
const NOT_FOUND = managementErrorBody(404, 'Generation not found');

/** GET /api/v1/generation?id=gen-… with any live bearer key of the account. */
export async function serveGeneration(x: Exchange, state: SimState, query: string): Promise<void> {
  if (!(await gate(x, state.faults, 'generation'))) return;
  const bearer = bearerOf(x.sim.headers);
  if (bearer === undefined) return sendJson(x.res, 401, MISSING_AUTH);
  if (state.keys.isDeleted(bearer)) return sendJson(x.res, 401, USER_NOT_FOUND);
  const id = new URLSearchParams(query).get('id');
  if (id === null || id === '') return sendJson(x.res, 400, MISSING_ID);
  const data = state.generations.visible(id);
  if (data === undefined) return sendJson(x.res, 404, NOT_FOUND);
  sendJson(x.res, 200, JSON.stringify({ data }));
}
