// Mode both's one wait that nothing ends: the trainer waits for experiences to fill train step s while the explorer
// (sync_style fixed) waits for the weights train step s makes before it explores on. Neither can go on, and only
// max_read_timeout would end it (1800 s by default), with a short batch. It happens when buffer.train_batch_size (T)
// is more than the explore steps before the wait made:
//   explore steps 1 .. e-1 are written, explore step e waits for version requiredVersion(e) >= s (../explorer/loop.ts),
//   and the buffer holds fewer than T for step s.
// With environment workflows in workflow_args.experience_mode step an explore step makes one experience per move, a
// number that varies from step to step, so a train_batch_size that fits one step's output may not fit the next.
// ExplorerTrainerWait follows the explorer's events (which step waits, how many experiences each step wrote) and
// gives the trainer's buffer source (../trainer/experience-source.ts, explorerWaitsOn) the error that names the
// keys to change, at the moment both wait.
import { awaitedVersion } from '../explorer/loop.js';
import type { StageSettings } from '../settings.js';

export class ExplorerTrainerWait {
  readonly #settings: Pick<StageSettings, 'sync' | 'batchSize' | 'trainBatchSize'>;
  readonly #rolloutsPerStep: number;
  /** The explore step waiting for its weights (null: none waits). */
  #waitingStep: number | null = null;
  /** Experiences each explore step wrote to the buffer, by step. */
  readonly #written = new Map<number, number>();

  constructor(settings: Pick<StageSettings, 'sync' | 'batchSize' | 'trainBatchSize'>, repeatTimes: number) {
    this.#settings = settings;
    this.#rolloutsPerStep = settings.batchSize * repeatTimes;
  }

  /** The explorer loop's onWaitingForWeights. */
  waiting(step: number | null): void {
    this.#waitingStep = step;
  }

  /** The explorer loop's onWritten. */
  written(step: number, count: number): void {
    this.#written.set(step, count);
  }

  /** The buffer source's explorerWaitsOn: the error's message while the explorer waits on train step `trainStep`. */
  explorerWaitsOn(trainStep: number): ((buffered: number) => string) | null {
    const exploreStep = this.#waitingStep;
    if (exploreStep === null) return null;
    const version = awaitedVersion(this.#settings.sync, exploreStep);
    if (version === null || version < trainStep) return null;
    return (buffered) => this.#message(trainStep, exploreStep, version, buffered);
  }

  #message(trainStep: number, exploreStep: number, version: number, buffered: number): string {
    const { trainBatchSize } = this.#settings;
    const { interval, offset } = this.#settings.sync;
    const made = [...this.#written].filter(([step]) => step < exploreStep).sort(([a], [b]) => a - b);
    const madeText = made.map(([step, count]) => `explore step ${step} made ${count}`).join(', ') || 'no explore step wrote any';
    const perMove = made.some(([, count]) => count > this.#rolloutsPerStep)
      ? ' (an environment workflow in workflow_args.experience_mode: step makes one experience per move, so the ' +
        'count varies from step to step)'
      : '';
    const fits = Math.min(this.#rolloutsPerStep, ...made.map(([, count]) => count).filter((count) => count > 0));
    return (
      `train step ${trainStep} waits for buffer.train_batch_size = ${trainBatchSize} experiences and the buffer holds ` +
      `${buffered}, while the explorer waits for weights version ${version} (which train step ${trainStep} makes) ` +
      `before explore step ${exploreStep} (synchronizer.sync_style fixed, sync_interval ${interval}, sync_offset ` +
      `${offset}): the two would wait on each other. ${madeText} experience(s) from buffer.batch_size × ` +
      `repeat_times = ${this.#rolloutsPerStep} rollouts${perMove}. Set buffer.train_batch_size to at most ${fits} ` +
      '(what one explore step makes at least), or let the explorer run ahead (synchronizer.sync_offset: enough ' +
      'while explore steps make train_batch_size on average), or set ' +
      'synchronizer.sync_style: explorer_driven (the trainer answers the explorer with the weights it has while it ' +
      'waits for a batch)'
    );
  }
}
