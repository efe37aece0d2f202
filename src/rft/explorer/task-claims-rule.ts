// The claim rule and the contract of task claims (./task-claims.ts explains the scheme), shared by the SQLite
// (./task-claims-sqlite.ts) and PostgreSQL (./task-claims-postgres.ts) stores.
export type Claim =
  /** Explore `step`; `from` names the dead explorer it was taken from (null: new, or this explorer's own). */
  | { kind: 'step'; step: number; from: string | null }
  /** Every unclaimed step is taken and the unfinished ones are owned by live explorers: try again later. */
  | { kind: 'wait'; inFlight: { step: number; owner: string }[] }
  /** Every step of the stage is finished. */
  | { kind: 'done' };

export interface TaskClaimsOptions {
  /** The shared buffer's path: a postgresql:// URL, else an SQLite file. */
  path: string;
  /** The buffer's table (claims go in `<table>_claims`). */
  table: string;
  /** The stage's name: stages of a run claim their own steps. */
  stage: string;
  /** This explorer (explorer.name). */
  explorer: string;
  /** What this explorer deals (batch size, tasksets): explorers that disagree would explore different tasks. */
  deal: string;
  /** The stage's explore steps. */
  totalSteps: number;
}

export interface TaskClaims {
  /** Where the claims live, for messages (no password). */
  readonly location: string;
  claim(): Promise<Claim>;
  /** Marks this explorer's claim of `step` finished (its experiences are in the buffer). */
  complete(step: number): Promise<void>;
  /** The steps this explorer finished. */
  completedBy(): Promise<number[]>;
  /** Gives up the explorer's name (its unfinished claims become free for others). */
  close(): Promise<void>;
}

/** An unfinished claim as the decision sees it. */
export interface OpenClaim {
  step: number;
  owner: string;
}

/** What a claim transaction does: take `step` over (update), add it (insert), or nothing. */
export type ClaimDecision =
  | { action: 'take'; step: number; from: string | null }
  | { action: 'insert'; step: number }
  | { action: 'none'; claim: Claim };

/**
 * The claim rule (see ./task-claims.ts), over the stage's unfinished claims in step order, the highest claimed step
 * (0: none) and who is alive. Both stores run it inside their serialised claim transaction.
 */
export function decideClaim(
  unfinished: readonly OpenClaim[],
  highest: number,
  totalSteps: number,
  me: string,
  alive: (owner: string) => boolean,
): ClaimDecision {
  const own = unfinished.find((c) => c.owner === me);
  if (own !== undefined) return { action: 'take', step: own.step, from: null };
  const dead = unfinished.find((c) => !alive(c.owner));
  if (dead !== undefined) return { action: 'take', step: dead.step, from: dead.owner };
  if (highest < totalSteps) return { action: 'insert', step: highest + 1 };
  if (unfinished.length > 0) return { action: 'none', claim: { kind: 'wait', inFlight: [...unfinished] } };
  return { action: 'none', claim: { kind: 'done' } };
}

/** The error for explorers of one stage that deal differently. */
export function dealMismatch(location: string, stage: string, explorer: string, mine: string, theirs: string): Error {
  return new Error(
    `explorer '${explorer}': the explore steps of stage '${stage}' in ${location} were dealt as ${theirs}, but this ` +
      `explorer deals ${mine}: every explorer process of a stage needs the same tasksets and buffer.batch_size`,
  );
}

/** The error for a second process with an explorer's name. */
export function nameTaken(location: string, explorer: string, where: string): Error {
  return new Error(
    `explorer '${explorer}' is already running (${where}) on the buffer ${location}: give each explorer process its ` +
      'own explorer.name (the same name resumes that explorer once it stopped)',
  );
}
