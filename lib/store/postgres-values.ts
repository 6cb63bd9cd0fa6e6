// How values come back from the postgres driver (Date objects, int8 and numeric as strings) and
// how the Store wants them (ISO-8601 UTC strings, JS numbers). Shared by every part of the
// Postgres Store so the conversion is written once; it never touches a connection.

export type Raw = Record<string, unknown>;

export function iso(value: unknown): string {
  return value instanceof Date ? value.toISOString() : new Date(value as string).toISOString();
}

export function isoOrNull(value: unknown): string | null {
  return value === null || value === undefined ? null : iso(value);
}

/** int8 and numeric arrive as strings; the Store speaks JS numbers. */
export function numOrNull(value: unknown): number | null {
  return value === null || value === undefined ? null : Number(value);
}
