// What a checkpoint's trainer.json holds for the trainer worker (./trainer-worker-main.ts) besides the critic
// optimizer (see ../checkpoint.ts): the train step's state, the LR schedule's position and the LoRA dropout stream,
// read back with a precise error when it is missing or malformed.
import type { LoraDropoutState } from '../../model/index.js';
import type { LoadedCheckpoint } from '../checkpoint.js';
import type { TrainStepState } from './train-step.js';

/** trainer.json's fields besides the critic optimizer (see ../checkpoint.ts). */
export interface SavedTrainerState {
  trainStep: TrainStepState;
  /** The LR scheduler's step. */
  schedulerStep: number;
  /** The LoRA dropout stream (LoRA runs). */
  loraDropout?: LoraDropoutState;
}

/** The trainer state of a checkpoint (one without it would resume as a different run: an error). */
export function savedTrainerState(checkpoint: LoadedCheckpoint): SavedTrainerState {
  const trainer = checkpoint.trainer;
  if (trainer === null || trainer.trainStep === undefined) {
    throw new Error(
      `${checkpoint.dir}: the checkpoint has no trainer state (trainer.json: KL coefficients, LR schedule position); ` +
        `it was written by an older version and cannot resume as the same run`,
    );
  }
  const schedulerStep = trainer.schedulerStep;
  if (typeof schedulerStep !== 'number' || !Number.isInteger(schedulerStep) || schedulerStep < 0) {
    throw new Error(
      `${checkpoint.dir}/trainer.json: schedulerStep must be a non-negative integer, got ${JSON.stringify(schedulerStep)}`,
    );
  }
  return {
    trainStep: trainer.trainStep as TrainStepState,
    schedulerStep,
    ...(trainer.loraDropout === undefined ? {} : { loraDropout: trainer.loraDropout as LoraDropoutState }),
  };
}
