// data_processor.experience_pipeline (Trinity-RFT's ExperiencePipeline): every explore step's experiences go through
// the operators in order before they are written to the buffer; the raw input is saved first (save_input).
//
//   workflows ──▶ [save_input] ──▶ op 1 ──▶ op 2 ──▶ … ──▶ buffer ──▶ trainer (advantages)
//
// Metrics per operator i (named by its `name`, `name#2` for a second one of the same name):
//   experience_pipeline/<op>/kept      experiences it passed on
//   experience_pipeline/<op>/dropped   experiences it took out (input − kept; a mapper that adds rows makes it < 0)
//   experience_pipeline/<op>/seconds   time in its process()
//   experience_pipeline/<op>/<key>     the operator's own metrics
//
// Group advantages and filters. The advantage function runs in the trainer over each train batch, grouping by
// info.taskId (src/rft/trainer/loss-inputs.ts), so it sees what the pipeline kept — as Trinity-RFT, which appends the
// group advantage operator after the user's operators:
//   - group filters (reward_std_filter, dapo_dynamic_sampling) drop whole groups: the groups they keep get exactly
//     the advantages they would have had without the pipeline;
//   - per-experience filters (reward_filter, invalid_reward_filter, reward_shaping_mapper dropping rewardless rows)
//     can drop part of a group: the group's baseline is then the survivors', A_i = (r_i − mean_kept) / (std_kept + ε),
//     and a lone survivor is a group of one (GRPO: mean 0, std 1, so A = r; dropped when std_threshold is set).
//   Put a group filter after a per-experience filter to train only on groups that still have a signal.
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { Experience } from '../../experience.js';
import { resolveArgs } from '../../../util/module-args.js';
import { EXPERIENCE_OPERATORS } from './operators/index.js';
import { type InputRecorder, openInputRecorder } from './save-input.js';
import type { ExperienceOperator, ExperienceOperatorSetup, OperatorContext, OperatorSpec } from './types.js';

export interface ExperiencePipelineSettings {
  operators: OperatorSpec[];
  /** Where the raw experiences go (a .jsonl, .db/.sqlite or sqlite:/// path); null: not saved. */
  inputSavePath: string | null;
}

export interface PipelineResult {
  experiences: Experience[];
  metrics: Record<string, number>;
  /**
   * Rewards by task id for the task selectors, from the operators that feed them (pass_rate_calculator); null when
   * no operator does (the selectors then learn from every raw reward of the step).
   */
  taskFeedback: Map<string, number[]> | null;
}

interface Stage {
  label: string;
  operator: ExperienceOperator;
  feedsSelectors: boolean;
}

export class ExperiencePipeline {
  readonly #stages: Stage[];
  readonly #recorder: InputRecorder | null;

  private constructor(stages: Stage[], recorder: InputRecorder | null) {
    this.#stages = stages;
    this.#recorder = recorder;
  }

  /**
   * Resolves the operators (registered names, or module paths relative to `baseDir`) and checks their arguments;
   * opens the save file, dropping what it holds for steps after `startStep` (a resumed run explores them again), or
   * for steps not in `keepSteps` when given (an explorer process keeps the steps it finished).
   */
  static async create(
    settings: ExperiencePipelineSettings,
    options: {
      baseDir?: string;
      startStep?: number;
      keepSteps?: ReadonlySet<number>;
      /** The run's auxiliary models, once started (operators that call a model ask for them in process()). */
      auxiliaryModels?: () => AuxiliaryModels | null;
      log?: (line: string) => void;
    } = {},
  ): Promise<ExperiencePipeline> {
    const setup: ExperienceOperatorSetup = {
      baseDir: options.baseDir ?? process.cwd(),
      auxiliaryModels: options.auxiliaryModels ?? (() => null),
      log: options.log ?? (() => {}),
    };
    const stages: Stage[] = [];
    const seen = new Map<string, number>();
    for (const [i, spec] of settings.operators.entries()) {
      const where = `data_processor.experience_pipeline.operators[${i}] '${spec.name}'`;
      try {
        const module = await EXPERIENCE_OPERATORS.resolve(spec.name, options.baseDir);
        const operator = module.create(resolveArgs(`experience operator '${spec.name}'`, module.defaults, spec.args), setup);
        const count = (seen.get(spec.name) ?? 0) + 1;
        seen.set(spec.name, count);
        stages.push({
          label: count === 1 ? spec.name : `${spec.name}#${count}`,
          operator,
          feedsSelectors: module.feedsSelectors === true,
        });
      } catch (error) {
        throw new Error(`${where}: ${(error as Error).message}`);
      }
    }
    const recorder =
      settings.inputSavePath === null
        ? null
        : openInputRecorder(settings.inputSavePath, options.keepSteps ?? options.startStep ?? 0);
    return new ExperiencePipeline(stages, recorder);
  }

  /** True when an operator reports task feedback: the selectors learn from it instead of every raw reward. */
  get feedsSelectors(): boolean {
    return this.#stages.some((s) => s.feedsSelectors);
  }

  /** The raw input's file, or null. */
  get inputSavePath(): string | null {
    return this.#recorder?.path ?? null;
  }

  async process(experiences: readonly Experience[], context: OperatorContext): Promise<PipelineResult> {
    this.#recorder?.record(context.step, experiences);
    const metrics: Record<string, number> = { 'experience_pipeline/input': experiences.length };
    let current: Experience[] = [...experiences];
    let taskFeedback: Map<string, number[]> | null = null;
    for (const { label, operator, feedsSelectors } of this.#stages) {
      const started = performance.now();
      let output: Awaited<ReturnType<ExperienceOperator['process']>>;
      try {
        output = await operator.process(current, context);
      } catch (error) {
        throw new Error(`experience operator '${label}' at explore step ${context.step}: ${(error as Error).message}`);
      }
      const seconds = (performance.now() - started) / 1000;
      if (!Array.isArray(output?.experiences))
        throw new Error(
          `experience operator '${label}' at explore step ${context.step}: process() must return { experiences: [...] }`,
        );
      const prefix = `experience_pipeline/${label}`;
      metrics[`${prefix}/kept`] = output.experiences.length;
      metrics[`${prefix}/dropped`] = current.length - output.experiences.length;
      metrics[`${prefix}/seconds`] = seconds;
      for (const [key, value] of Object.entries(output.metrics ?? {})) {
        if (typeof value !== 'number' || !Number.isFinite(value))
          throw new Error(`experience operator '${label}': metric ${key} = ${String(value)} is not a finite number`);
        metrics[`${prefix}/${key}`] = value;
      }
      if (feedsSelectors && output.taskFeedback) {
        taskFeedback ??= new Map();
        for (const [task, rewards] of output.taskFeedback) taskFeedback.set(task, [...rewards]);
      }
      current = output.experiences;
    }
    metrics['experience_pipeline/output'] = current.length;
    return { experiences: current, metrics, taskFeedback };
  }

  async close(): Promise<void> {
    try {
      for (const { operator } of this.#stages) await operator.close?.();
    } finally {
      this.#recorder?.close();
    }
  }
}
