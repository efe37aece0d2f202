// The experience operator contract (Trinity-RFT's `ExperienceOperator`: `process(exps) -> (exps, metrics)`): one
// explore step's experiences in, the experiences the trainer should see out, with metrics. An operator that reports
// task feedback (pass_rate_calculator) is what the task selectors learn from once it is in the pipeline.
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { Experience } from '../../experience.js';

export interface OperatorContext {
  /** The explore step the experiences come from. */
  step: number;
  /** Responses per task (algorithm.repeat_times): the size of a complete group. */
  repeatTimes: number;
}

export interface OperatorOutput {
  /** What goes on down the pipeline (new objects where changed: operators never mutate their input). */
  experiences: Experience[];
  /** Finite numbers; logged as experience_pipeline/<operator>/<key>. */
  metrics?: Record<string, number>;
  /** Rewards by task id that the task selectors learn from (only from modules with `feedsSelectors`). */
  taskFeedback?: ReadonlyMap<string, readonly number[]>;
}

export interface ExperienceOperator {
  process(experiences: readonly Experience[], context: OperatorContext): OperatorOutput | Promise<OperatorOutput>;
  close?(): void | Promise<void>;
}

/** What an operator may reach besides its options (an operator that calls a model, the data_juicer recipes). */
export interface ExperienceOperatorSetup {
  /** Module paths and relative files resolve against this folder (the config file's). */
  baseDir: string;
  /** The run's auxiliary models (explorer.auxiliary_models), started by the first process(); null: the run has none. */
  auxiliaryModels(): AuxiliaryModels | null;
  log(line: string): void;
}

/**
 * A named operator: its arguments' defaults (Trinity's names, camelCased; YAML may use either spelling) and a factory.
 * A user module named by path (`args` checked against `defaults` the same way) is registered under that path.
 */
export interface ExperienceOperatorModule<Options extends object = object> {
  description?: string;
  defaults: Readonly<Options>;
  /**
   * True when the operator reports taskFeedback: with it in the pipeline the task selectors learn from what it saw
   * (its place in the pipeline decides which rewards), instead of every raw reward of the step.
   */
  feedsSelectors?: boolean;
  create(options: Options, setup: ExperienceOperatorSetup): ExperienceOperator;
}

/** One `operators:` entry: a registered name or a module path, and its arguments. */
export interface OperatorSpec {
  name: string;
  args: Record<string, unknown>;
}
