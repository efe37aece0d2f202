// Where the priority replay over the shared sql buffer (./sql-replay.ts) keeps its state: one reader's revisions in
// the buffer's <t>_replay tables (./shared-contract.ts ReplayStore), written once for SQLite and PostgreSQL. Each
// method is one transaction body (../store/sql-steps.ts); a dialect (ReplaySqlDialect, from ./sqlite.ts and
// ./postgres.ts) runs it and writes what the two write differently.
//
//   t_replay      (reader, seq, id, model_version, use_count, priority, available_at, added, dropped)
//                 an entry is in revision r when added <= r and (dropped is null or dropped > r)
//   t_replay_revs (reader, revision, position, next_seq, noise_draws, at)   each kept revision's scalars
import type { SqlStatement, SqlSteps } from '../store/sql-steps.js';
import type { Experience } from '../experience.js';
import type { ReplayStore, StoredReplayEntry } from './shared-contract.js';
import { quoteIdentifier as q } from './sql-names.js';

/** What the two databases do differently for the replay store. */
export interface ReplaySqlDialect {
  /**
   * Runs `steps` named `what` in errors: `read` one look, `write` one write transaction, `snapshot` a write
   * transaction whose reads all see one snapshot (the scalars and the entries agree).
   */
  run<T>(what: string, kind: 'read' | 'write' | 'snapshot', steps: () => SqlSteps<T>): Promise<T>;
  /** Statements inserting `put` into `entries` for `reader`, as added at revision `added`. */
  insertEntries(entries: string, reader: string, put: readonly StoredReplayEntry[], added: number): SqlStatement[];
  /** The condition "`column` is one of the integers `values`" with its placeholder's value. */
  oneOf(column: string, values: readonly number[]): SqlStatement;
  /** An error the store found itself (a revision missing), named as the buffer's errors are. */
  error(what: string, detail: string): Error;
  /** The experience stored in row `id` (bad JSON: an error naming the row). */
  experience(id: number, data: string): Experience;
}

type RevisionRow = { revision: unknown; position: unknown; next_seq: unknown; noise_draws: unknown; at: unknown };
type EntryRow = {
  seq: unknown;
  id: unknown;
  model_version: unknown;
  use_count: unknown;
  priority: unknown;
  available_at: unknown;
};

/** Reader `reader`'s replay state in the tables of buffer table `table`. */
export function sqlReplayStore(sql: ReplaySqlDialect, table: string, reader: string): ReplayStore {
  const entries = q(`${table}_replay`);
  const revs = q(`${table}_replay_revs`);
  const cursors = q(`${table}_cursors`);
  const statement = (text: string, ...values: unknown[]): SqlStatement => ({ text, values });
  return {
    committedRevision: () =>
      sql.run('read the replay state', 'read', function* () {
        const rows = yield statement(`SELECT min(revision) AS r FROM ${revs} WHERE reader = ?`, reader);
        return rows[0]?.r == null ? null : Number(rows[0].r);
      }),
    load: (revision) =>
      sql.run('read the replay state', 'snapshot', function* () {
        const found = yield statement(`SELECT * FROM ${revs} WHERE reader = ? AND revision = ?`, reader, revision);
        const row = found[0] as RevisionRow | undefined;
        if (row === undefined) return null;
        const rows = (yield statement(
          `SELECT seq, id, model_version, use_count, priority, available_at FROM ${entries}
           WHERE reader = ? AND added <= ? AND (dropped IS NULL OR dropped > ?) ORDER BY seq`,
          reader,
          revision,
          revision,
        )) as EntryRow[];
        return {
          revision: {
            revision: Number(row.revision),
            position: Number(row.position),
            nextSeq: Number(row.next_seq),
            noiseDraws: Number(row.noise_draws),
            at: Number(row.at),
          },
          entries: rows.map((e) => ({
            seq: Number(e.seq),
            id: Number(e.id),
            modelVersion: Number(e.model_version),
            useCount: Number(e.use_count),
            priority: Number(e.priority),
            availableAt: Number(e.available_at),
          })),
        };
      }),
    dropAfter: (revision) =>
      sql.run('restore the replay state', 'write', function* () {
        yield statement(`DELETE FROM ${entries} WHERE reader = ? AND added > ?`, reader, revision);
        yield statement(`UPDATE ${entries} SET dropped = NULL WHERE reader = ? AND dropped > ?`, reader, revision);
        yield statement(`DELETE FROM ${revs} WHERE reader = ? AND revision > ?`, reader, revision);
      }),
    append: (revision, put, dropped) =>
      sql.run('write the replay state', 'write', function* () {
        yield statement(
          `INSERT INTO ${revs} (reader, revision, position, next_seq, noise_draws, at) VALUES (?, ?, ?, ?, ?, ?)`,
          reader,
          revision.revision,
          revision.position,
          revision.nextSeq,
          revision.noiseDraws,
          revision.at,
        );
        if (put.length > 0) for (const insert of sql.insertEntries(entries, reader, put, revision.revision)) yield insert;
        if (dropped.length > 0) {
          const seqs = sql.oneOf('seq', dropped);
          yield statement(
            `UPDATE ${entries} SET dropped = ? WHERE reader = ? AND ${seqs.text}`,
            revision.revision,
            reader,
            ...seqs.values,
          );
        }
      }),
    commit: (revision, cursorReader) =>
      sql.run('commit the replay state', 'write', function* () {
        const rows = yield statement(`SELECT position FROM ${revs} WHERE reader = ? AND revision = ?`, reader, revision);
        const position = rows[0]?.position;
        if (position === undefined)
          throw sql.error('commit the replay state', `no replay revision ${revision} of reader '${reader}' to commit`);
        yield statement(`DELETE FROM ${entries} WHERE reader = ? AND dropped <= ?`, reader, revision);
        yield statement(`DELETE FROM ${revs} WHERE reader = ? AND revision < ?`, reader, revision);
        yield statement(
          `INSERT INTO ${cursors} (reader, position) VALUES (?, ?)
           ON CONFLICT (reader) DO UPDATE SET position = excluded.position`,
          cursorReader,
          position,
        );
      }),
    experiences: (ids) =>
      sql.run('read rows', 'read', function* () {
        const condition = sql.oneOf('id', ids);
        const rows = yield statement(`SELECT id, data FROM ${q(table)} WHERE ${condition.text}`, ...condition.values);
        return new Map(rows.map((row) => [Number(row.id), sql.experience(Number(row.id), row.data as string)]));
      }),
  };
}
