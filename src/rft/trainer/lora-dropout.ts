// LoRA dropout in the train step (PEFT's lora_dropout, ../../model/lora.ts).
//
// It acts in the policy update's forward and backward only: the adapters are in training mode there and in eval mode
// everywhere else, so the log-probs recomputed for rows without rollout log-probs (PPO's old log-probs), the
// reference's (adapters disabled) and the weights synced to the rollout engine (merged) are the deterministic
// policy's, as the rollout's are. Each micro-batch draws its masks from the adapters' seeded stream; activation
// checkpointing replays them (forwardBackward's `random`).
//
// On several ranks (./row-sharding.ts) micro-batch i draws the masks one process would: a rank skips the draws of the
// micro-batches other ranks run (each forward draws once per adapted projection) and ends where one process would
// after all of them.
import type { LoraDropoutState, LoraModel } from '../../model/lora.js';

/** Eval mode (no dropout) but for the policy update's forward and backward (see the header); returns the undo. */
export function enterEvalMode(lora: LoraModel | null): () => void {
  const wasTraining = lora?.training ?? false;
  lora?.eval();
  return () => lora?.train(wasTraining);
}

/** The dropout stream of a step's policy micro-batches on one of several ranks (see the header). */
export class RankDropoutStream {
  readonly #lora: LoraModel;
  readonly #from: LoraDropoutState;
  /** Draws per forward: one per adapted projection (none when the model draws no masks). */
  readonly #perForward: number;

  /** The stream from where `lora`'s is now; null where there is nothing to keep in step (no LoRA, or one process). */
  static of(lora: LoraModel | null, worldSize: number, modelIsStochastic: boolean): RankDropoutStream | null {
    return lora !== null && worldSize > 1 ? new RankDropoutStream(lora, modelIsStochastic ? lora.modules.length : 0) : null;
  }

  private constructor(lora: LoraModel, perForward: number) {
    this.#lora = lora;
    this.#from = lora.randomState();
    this.#perForward = perForward;
  }

  /** Before micro-batch i: the stream where one process would start it. */
  seek(i: number): void {
    this.#lora.setRandomState(this.#at(i));
  }

  /** After micro-batch i: its forward drew what one process's would, else the ranks would draw different masks. */
  check(i: number): void {
    const expected = this.#at(i + 1).draws;
    const drawn = this.#lora.randomState().draws;
    if (drawn !== expected)
      throw new Error(
        `train step: micro-batch ${i} left the LoRA dropout stream at draw ${drawn}, expected ${expected} ` +
          `(${this.#perForward} per forward): ranks would draw different masks than one process`,
      );
  }

  /** After this rank's micro-batches: the stream where one process would be after all `count` of the step. */
  end(count: number): void {
    this.#lora.setRandomState(this.#at(count));
  }

  #at(i: number): LoraDropoutState {
    return { ...this.#from, draws: this.#from.draws + i * this.#perForward };
  }
}
