// Train steps with nothing to train on: every rollout of the explore steps that feed them failed (a workflow that
// throws, hangs past explorer.max_timeout, returns a reward that is not a number), was rejected by the model's bounds
// (token ids outside the vocabulary, sequences longer than the context) or was filtered out (the experience pipeline,
// the sample strategy), or every experience that came has no token to train (the placeholders of prompts over
// model.max_prompt_tokens: action mask all 0, see trainableExperiences). Such a step changes no weight; a few of them in a run are tolerated (logged, and its metrics
// have no actor/* keys), but a run that cannot fill its train steps must not end as if it had trained:
//
//   fails after MAX_EMPTY_STEPS_IN_A_ROW train steps in a row with nothing to train on, or when the trainer loop
//   ends (not stopped) having trained nothing in all the steps it ran
//
// with a NothingToTrainError naming why the batches were empty and the last rollout failures the explorer saw, so
// `trinity run` exits non-zero, run_status.json says "failed", and no done.json marks the stage finished. An explorer
// process (mode explore) keeps the same count over the explore steps it wrote nothing for (../run/stage-explore.ts):
// its trainer process, elsewhere, only sees that nothing comes.

import type { Experience } from '../experience.js';

/**
 * The experiences of a batch that have a token to train: an action mask with a 1, or none (every response token is
 * trained). The placeholders of prompts over model.max_prompt_tokens (truncateStatus prompt_truncated) have an action
 * mask of 0s: a batch of only those trains nothing.
 */
export function trainableExperiences(experiences: readonly Experience[]): number {
  return experiences.filter((e) => e.actionMask === undefined || e.actionMask.some((m) => m > 0)).length;
}

/** Why a batch whose experiences all have an empty action mask trains nothing. */
export function untrainableWhy(experiences: readonly Experience[]): string {
  const placeholders = experiences.filter((e) => e.truncateStatus === 'prompt_truncated').length;
  return placeholders === experiences.length
    ? `every experience is the placeholder of a prompt over model.max_prompt_tokens (rollout/prompt_truncated_ratio 1): ` +
        'shorten the prompts, or raise model.max_prompt_tokens (and max_model_len)'
    : 'no experience has a token to train (their action masks are all 0)';
}

/** Train steps in a row with nothing to train on after which the stage fails (a fixed bound: not a setting). */
export const MAX_EMPTY_STEPS_IN_A_ROW = 3;

/** Rollout failures quoted in the error (the newest the explorer reported). */
const FAILURES_QUOTED = 3;

export class NothingToTrainError extends Error {
  override name = 'NothingToTrainError';
}

export class EmptyStepGuard {
  readonly #stageName: string;
  readonly #unit: 'train' | 'explore';
  readonly #lastFailures: () => readonly string[];
  /** The current run of empty steps, in the order they came (an explorer process's claimed steps skip numbers). */
  #emptyInARow: number[] = [];
  #stepsRun = 0;
  /** Steps that had experiences (trained on, or written for the trainer). */
  #stepsFilled = 0;
  #lastWhy = '';
  #sourceEndedAt: number | null = null;

  /**
   * `unit`: the steps counted (the trainer's, or an explorer process's); `lastFailures`: the newest rollout failures
   * the explorer reported (mode both, mode explore; none in a trainer process of its own).
   */
  constructor(stageName: string, options: { unit?: 'train' | 'explore'; lastFailures?: () => readonly string[] } = {}) {
    this.#stageName = stageName;
    this.#unit = options.unit ?? 'train';
    this.#lastFailures = options.lastFailures ?? (() => []);
  }

  /** Step `step` had `count` experiences (`why`: why fewer than a batch came); throws at the bound. */
  step(step: number, count: number, why: string | undefined): void {
    this.#stepsRun++;
    if (count > 0) {
      this.#stepsFilled++;
      this.#emptyInARow = [];
      return;
    }
    this.#emptyInARow.push(step);
    this.#lastWhy = why ?? 'the sample strategy kept none of the experiences it read';
    if (this.#emptyInARow.length >= MAX_EMPTY_STEPS_IN_A_ROW)
      throw this.#error(
        `${this.#unit} steps ${this.#emptyInARow.join(', ')} had nothing to train on (${MAX_EMPTY_STEPS_IN_A_ROW} in a ` +
          'row is the most a run goes on with)',
      );
  }

  /** The source gave nothing more before train step `step` (the explorer or the dataset stopped early). */
  sourceEnded(step: number, why: string | undefined): void {
    this.#sourceEndedAt = step;
    if (this.#stepsFilled === 0) this.#lastWhy = why ?? 'the experience source ended';
  }

  /** The loop ended on its own (not stopped): throws when it trained nothing in the steps it ran or was to run. */
  finished(): void {
    if (this.#stepsFilled > 0 || (this.#stepsRun === 0 && this.#sourceEndedAt === null)) return;
    const ended =
      this.#sourceEndedAt === null ? '' : `, and the experience source ended before train step ${this.#sourceEndedAt}`;
    throw this.#error(`none of the ${this.#stepsRun} ${this.#unit} step(s) run had anything to train on${ended}`);
  }

  #error(what: string): NothingToTrainError {
    const failures = this.#lastFailures().slice(-FAILURES_QUOTED);
    const last = failures.length
      ? `last rollout failures: ${failures.join(' | ')}`
      : 'no rollout failure was reported to this process (an explorer process logs its own)';
    return new NothingToTrainError(`stage '${this.#stageName}': ${what}: ${this.#lastWhy}; ${last}`);
  }
}
