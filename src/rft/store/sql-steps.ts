// A transaction body written once for both SQL dialects: a generator that yields its statements one at a time and
// gets each one's rows back.
//
//   function* committedPosition(reader) {
//     const rows = yield { text: 'SELECT position FROM cursors WHERE reader = ?', values: [reader] };
//     return Number(rows[0]?.position ?? 0);
//   }
//
// SQLite (better-sqlite3) runs it synchronously inside its transaction (runStepsSync): nothing else runs on the
// connection between two statements, so no other caller's write lands in the middle. PostgreSQL runs it on one pooled
// connection, awaiting each round trip (runSteps). Statements are written with `?` placeholders, SQLite's;
// postgresPlaceholders numbers them for PostgreSQL. What the dialects write differently (bulk inserts, "one of these
// ids") stays with each dialect; the body names it through an interface of its own (../buffer/sql-replay-store.ts).
//
// This is the bottom of src/rft: it imports nothing from the other parts.

/** One statement, with `?` placeholders, and its values. */
export interface SqlStatement {
  text: string;
  values: unknown[];
}

/** A row as the driver returns it: PostgreSQL's BIGINT columns come as strings, SQLite's as numbers. */
export type SqlRow = Record<string, unknown>;

/** A transaction body: yields statements, gets their rows back, returns its result. */
export type SqlSteps<T> = Generator<SqlStatement, T, SqlRow[]>;

/** Runs `steps` with `run` executing each statement at once (SQLite, inside its transaction). */
export function runStepsSync<T>(steps: SqlSteps<T>, run: (statement: SqlStatement) => SqlRow[]): T {
  let step = steps.next();
  while (!step.done) step = steps.next(run(step.value));
  return step.value;
}

/** Runs `steps` with `run` executing each statement in turn (PostgreSQL, one round trip each). */
export async function runSteps<T>(steps: SqlSteps<T>, run: (statement: SqlStatement) => Promise<SqlRow[]>): Promise<T> {
  let step = steps.next();
  while (!step.done) step = steps.next(await run(step.value));
  return step.value;
}

/** `?` placeholders as PostgreSQL's `$1, $2, ...` (statements hold no `?` but placeholders). */
export function postgresPlaceholders(text: string): string {
  let n = 0;
  return text.replaceAll('?', () => `$${++n}`);
}
