// Versioned schema migrations, shared by both stores. Each store's DDL lives in one SQL file split
// into numbered steps by marker lines `-- migration N: what it does` (schema.sql for Postgres,
// lib/store/sqlite-schema.sql for SQLite; the same N means the same change in both). A store
// records each applied step in `schema_migrations` and runs only the steps it lacks, in order.
// Step 1 is the 0.3.0 schema written with IF NOT EXISTS, so a 0.3.0 store (tables present, no
// `schema_migrations`) takes it as a no-op. Never edit an applied step: append a new one.

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

const MARKER = /^-- migration (\d+): (.+)$/gm;

/** Splits a schema file into its steps; throws at start-up on a gap or a repeated number. */
export function parseMigrations(text: string): Migration[] {
  const marks = [...text.matchAll(MARKER)];
  const steps = marks.map((m, i) => ({
    version: Number(m[1]),
    name: m[2].trim(),
    sql: text.slice(m.index + m[0].length, i + 1 < marks.length ? marks[i + 1].index : text.length).trim(),
  }));
  steps.forEach((s, i) => {
    if (s.version !== i + 1) throw new Error(`schema migrations must be numbered 1, 2, 3, …: found ${s.version} at position ${i + 1}`);
  });
  return steps;
}

/** The steps not yet applied, in order. */
export function pendingMigrations(all: Migration[], applied: Iterable<number>): Migration[] {
  const done = new Set(applied);
  return all.filter((m) => !done.has(m.version));
}
