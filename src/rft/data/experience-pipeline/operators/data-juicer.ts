// `data_juicer` (Trinity-RFT's DataJuicerOperator) with `config_path`: a Data-Juicer recipe over each explore step's
// experiences, run by the built-in counterparts of its operators (../../data-juicer.ts; a recipe naming one without a
// counterpart is refused before the run starts). As Trinity converts experiences for Data-Juicer, each experience is a
// row {prompt, response} (its prompt and response text); the recipe's operators see those rows:
//   - a filter that drops a row drops its experience;
//   - the fields an operator adds to a row (llm_quality_score, llm_quality_record, ...) are added to the experience's
//     info, where reward_shaping_mapper reads a stats_key;
//   - a mapper that rewrites the text (llm_rewrite_mapper) changes nothing of the experience: its tokens were sampled.
// LLM operators call an endpoint or one of the run's auxiliary models (`auxiliary_model`); nothing samples the policy
// model here. Each operator's counts (unscored, parse_failures, ...) are metrics
// experience_pipeline/data_juicer/<op>/<key>.
import type { Experience } from '../../../experience.js';
import { readDataJuicerRecipe, recipeFileOf } from '../../data-juicer.js';
import type { TaskOperatorContext, TaskRow } from '../../task-pipeline/types.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export interface DataJuicerOptions {
  /** The Data-Juicer recipe (YAML with a `process` list); relative to the config file. */
  configPath: string;
  /** Experiences an operator works on at once where it waits on a model (the task pipeline's num_process). */
  numProcess: number;
}

const NAME = 'data_juicer';
/** Which experience a row stands for; operators copy rows with their fields, so it survives them. */
const EXPERIENCE_INDEX = '__experience_index';
/** The fields of a row before the operators: what they add besides these goes into the experience's info. */
const ROW_FIELDS: ReadonlySet<string> = new Set(['prompt', 'response', EXPERIENCE_INDEX]);

/** The row Data-Juicer sees for an experience: its prompt and response text. */
function rowOf(e: Experience, index: number): TaskRow {
  const prompt = e.promptText ?? e.messages?.find((m) => m.role === 'user')?.content ?? '';
  return { prompt, response: e.responseText ?? '', [EXPERIENCE_INDEX]: index };
}

export const dataJuicer: ExperienceOperatorModule<DataJuicerOptions> = {
  description: "runs a Data-Juicer recipe's operators (their built-in counterparts) over the experiences",
  defaults: { configPath: '', numProcess: 4 },
  create: (options, setup) => {
    if (!Number.isInteger(options.numProcess) || options.numProcess < 1)
      throw new Error(`${NAME}: num_process must be an integer >= 1, got ${options.numProcess}`);
    const file = recipeFileOf({ config_path: options.configPath }, NAME);
    const operators = readDataJuicerRecipe(file, 'experience');
    return {
      async process(experiences, { step }) {
        let rows: TaskRow[] = experiences.map(rowOf);
        const metrics: Record<string, number> = {};
        for (const [i, op] of operators.entries()) {
          const context: TaskOperatorContext = {
            name: op.where,
            position: i + 1,
            taskset: { name: `experiences of explore step ${step}`, path: file, format: { promptKey: 'prompt' } },
            textKey: 'response',
            workDir: setup.baseDir, // nothing that runs here writes files (the annotation operator is refused)
            seed: step,
            numProcess: options.numProcess,
            baseDir: setup.baseDir,
            model: () => Promise.reject(new Error(`${op.where}: the experience pipeline has no model to sample`)),
            auxiliaryModels: setup.auxiliaryModels(),
            log: setup.log,
            progress: () => {},
            count: (key, amount = 1) => {
              metrics[`${op.name}/${key}`] = (metrics[`${op.name}/${key}`] ?? 0) + amount;
            },
            emit: () => {},
          };
          rows = await op.module.run(rows, op.options, context);
        }
        const seen = new Set<number>();
        const out: Experience[] = [];
        for (const row of rows) {
          const index = row[EXPERIENCE_INDEX];
          const experience = typeof index === 'number' ? experiences[index] : undefined;
          if (experience === undefined || seen.has(index as number)) continue;
          seen.add(index as number);
          const added = Object.entries(row).filter(([key]) => !ROW_FIELDS.has(key));
          out.push(
            added.length === 0 ? experience : { ...experience, info: { ...experience.info, ...Object.fromEntries(added) } },
          );
        }
        return { experiences: out, metrics };
      },
    };
  },
};

registerExperienceOperator(NAME, dataJuicer);
