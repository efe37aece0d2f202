// Explore steps shared by explorer processes (mode explore, each with its own explorer.name) through the database of
// their shared buffer: the SQLite file (processes on one machine) or PostgreSQL (processes on several). Every explorer
// deals the same batches (the task scheduler is deterministic: same tasksets, batch size and selector seeds), so an
// explore step names its tasks; explorers claim whole steps, one at a time:
//
//   claim: the lowest unfinished step this explorer already owns (it restarted), else the lowest unfinished step whose
//          owner is dead, else the step after the highest claimed one; none of those: wait (steps in flight
//          elsewhere) or done (every step of the stage is finished)
//
// so no step is explored by two live explorers and none is skipped. A step is finished when its experiences are in
// the buffer: the explorer writes them with a marker (buffer meta `explored/<stage>/<step>`, ./share.ts) in
// the same transaction, then marks its claim done here. An explorer killed between the two finds the marker on
// restart and claims the next step; one killed before the write explores the step again (it, or another explorer
// once it is seen dead).
//
// Who is dead: PostgreSQL: every explorer holds a session advisory lock keyed by its name on a connection of its own,
// which the server releases when the process dies (its connection drops), so `pg_locks` tells the living. SQLite:
// the explorers table holds each one's process id and host; a process id that no longer runs on this host is dead.
//
// Tables (t = the buffer's table, "experiences" by default):
//   t_claims    (stage, step, owner, done)  PRIMARY KEY (stage, step)   one row per claimed explore step
//   t_deals     (stage, deal)                what the stage's explorers deal (batch size, tasksets): all must agree
//   t_explorers (name, pid, host)            SQLite only: who runs where
import { isPostgresUrl } from '../buffer/index.js';
import { PostgresTaskClaims } from './task-claims-postgres.js';
import type { TaskClaims, TaskClaimsOptions } from './task-claims-rule.js';
import { SqliteTaskClaims } from './task-claims-sqlite.js';

export type { Claim, TaskClaims, TaskClaimsOptions } from './task-claims-rule.js';

/** Opens the claims of `options.stage` beside the shared buffer at `options.path`. */
export async function openTaskClaims(options: TaskClaimsOptions): Promise<TaskClaims> {
  if (!Number.isInteger(options.totalSteps) || options.totalSteps < 0)
    throw new RangeError(`task claims: totalSteps must be an integer >= 0, got ${options.totalSteps}`);
  if (isPostgresUrl(options.path)) {
    return PostgresTaskClaims.open(options);
  }
  return SqliteTaskClaims.open(options);
}
