// Data-Juicer recipes in Trinity-RFT's configs: the operator `{name: data_juicer, args: {config_path: recipe.yaml}}` in
// either pipeline (and the task pipeline's own config_path). A recipe is Data-Juicer's YAML,
//
//   process:
//     - llm_quality_score_filter: {api_or_hf_model: qwen2.5-32b-instruct, input_keys: [prompt, response]}
//     - document_deduplicator: {lowercase: true}
//
// Data-Juicer is Python and does not run here; its operators that have a built-in counterpart (the task operators of
// the same name, src/rft/data/task-pipeline/operators, listed in DATA_JUICER_COUNTERPARTS) run in their place and take
// Data-Juicer's argument names (api_or_hf_model, field_names, ...). A recipe naming any operator without a counterpart
// is refused as a whole, naming exactly those operators, by `trinity config check` and before a run starts
// (src/rft/run/config/pipeline-checks.ts), not midway.
import YAML from 'yaml';
import { fileErrorDetail, readRegularFile } from '../../util/index.js';
import { resolveArgs } from '../../util/module-args.js';
import { TASK_OPERATORS } from './task-pipeline/operators/index.js';
import type { TaskOperatorModule } from './task-pipeline/types.js';

/** The operator name that stands for a Data-Juicer recipe (Trinity's DataJuicerOperator). */
export const DATA_JUICER_OPERATOR = 'data_juicer';

/** Which pipeline a recipe runs in: the experience pipeline runs each explore step, so no operator waits for a person. */
export type RecipePipeline = 'task' | 'experience';

/** Counterparts that run in the task pipeline only, and why. */
const TASK_PIPELINE_ONLY: Readonly<Record<string, string>> = {
  human_preference_annotation_mapper: 'it waits for a person to rate each pair: the task pipeline only',
};

/** Data-Juicer operators that run here: each is the built-in task operator of the same name. */
export const DATA_JUICER_COUNTERPARTS: readonly string[] = [
  'document_deduplicator',
  'document_minhash_deduplicator',
  'text_length_filter',
  'llm_quality_score_filter',
  'llm_difficulty_score_filter',
  'llm_rewrite_mapper',
  'human_preference_annotation_mapper',
];

export class DataJuicerRecipeError extends Error {
  override name = 'DataJuicerRecipeError';
}

/** One operator of a recipe, as the pipelines run it: a built-in's name and its arguments. */
export interface RecipeOperator {
  name: string;
  args: Record<string, unknown>;
}

/** One recipe operator resolved: its module and checked options (what the experience pipeline runs). */
export interface ResolvedRecipeOperator extends RecipeOperator {
  /** `<recipe file> process[i] <name>`, for errors and metrics. */
  where: string;
  module: TaskOperatorModule<Record<string, unknown>>;
  options: Record<string, unknown>;
}

/**
 * The operators of the Data-Juicer recipe `file`, each mapped to its counterpart here with its arguments checked;
 * DataJuicerRecipeError naming every problem (the file unreadable, no `process` list, an entry that is not
 * `{op_name: {args}}`, operators without a counterpart, arguments the counterpart does not take, and in the experience
 * pipeline an operator that runs in the task pipeline only).
 */
export function readDataJuicerRecipe(file: string, pipeline: RecipePipeline = 'task'): ResolvedRecipeOperator[] {
  let recipe: unknown;
  try {
    recipe = YAML.parse(readRegularFile(file, 'utf8'));
  } catch (error) {
    throw new DataJuicerRecipeError(`Data-Juicer recipe ${file}: cannot be read: ${fileErrorDetail(error)}`);
  }
  const steps = (recipe as { process?: unknown } | null)?.process;
  if (!Array.isArray(steps) || steps.length === 0)
    throw new DataJuicerRecipeError(`Data-Juicer recipe ${file}: expected a 'process' list of {operator_name: {args}}`);
  const problems: string[] = [];
  const missing: string[] = [];
  const out: ResolvedRecipeOperator[] = [];
  for (const [i, entry] of steps.entries()) {
    const keys = entry !== null && typeof entry === 'object' && !Array.isArray(entry) ? Object.keys(entry) : [];
    if (keys.length !== 1) {
      problems.push(`process[${i}] is not {operator_name: {args}}`);
      continue;
    }
    const name = keys[0] as string;
    const where = `Data-Juicer recipe ${file} process[${i}] ${name}`;
    if (!DATA_JUICER_COUNTERPARTS.includes(name)) {
      missing.push(`process[${i}] ${name}`);
      continue;
    }
    const taskOnly = TASK_PIPELINE_ONLY[name];
    if (pipeline === 'experience' && taskOnly !== undefined) {
      problems.push(`process[${i}] ${name} does not run in the experience pipeline: ${taskOnly}`);
      continue;
    }
    const given: unknown = (entry as Record<string, unknown>)[name] ?? {};
    if (given === null || typeof given !== 'object' || Array.isArray(given)) {
      problems.push(`process[${i}] ${name}: its arguments must be a mapping`);
      continue;
    }
    const args = given as Record<string, unknown>;
    const module = TASK_OPERATORS.get(name) as TaskOperatorModule<Record<string, unknown>>;
    try {
      out.push({ name, args, where, module, options: resolveArgs(where, module.defaults, args) });
    } catch (error) {
      problems.push((error as Error).message.replace(`Data-Juicer recipe ${file} `, ''));
    }
  }
  if (missing.length > 0)
    problems.unshift(
      `Data-Juicer operators with no counterpart here: ${missing.join(', ')} (those that run here: ` +
        `${DATA_JUICER_COUNTERPARTS.join(', ')}; or write the step as an operator module, docs/data-pipelines.md)`,
    );
  if (problems.length > 0) throw new DataJuicerRecipeError(`Data-Juicer recipe ${file}: ${problems.join('; ')}`);
  return out;
}

/** The recipe file of a `data_juicer` operator's arguments; DataJuicerRecipeError for any other argument. */
export function recipeFileOf(args: Readonly<Record<string, unknown>>, where: string): string {
  const { config_path: snake, configPath: camel, ...rest } = args;
  const file = snake ?? camel;
  const extra = Object.keys(rest);
  if (extra.length > 0)
    throw new DataJuicerRecipeError(
      `${where}: takes config_path (a Data-Juicer recipe) only; unknown argument(s) ${extra.join(', ')} ` +
        '(list the operators in the recipe, or as operators of the pipeline)',
    );
  if (typeof file !== 'string' || file === '') throw new DataJuicerRecipeError(`${where}: args.config_path is required`);
  return file;
}

/**
 * The task pipeline's operators with each `data_juicer` entry replaced by its recipe's operators (built-ins);
 * DataJuicerRecipeError naming the entry and the recipe's problems.
 */
export function expandDataJuicer(operators: readonly RecipeOperator[], where: string): RecipeOperator[] {
  return operators.flatMap((op, i) => {
    if (op.name !== DATA_JUICER_OPERATOR) return [op];
    const file = recipeFileOf(op.args, `${where}.operators.${i}`);
    return readDataJuicerRecipe(file).map(({ name, args }) => ({ name, args }));
  });
}

/** A pipeline's operators as they will run: each `data_juicer` entry's recipe resolved, at the key that names it. */
export interface PipelineRecipes {
  /** `data_processor.<pipeline>_pipeline.operators.<i>.args.config_path` and the recipe's operators. */
  recipes: { path: string; operators: ResolvedRecipeOperator[] }[];
  /** The recipes that do not read or map, at the key that names each. */
  problems: { path: string; message: string }[];
}

/** The recipes of every `data_juicer` operator of a pipeline's `operators` (the pre-run checks read them). */
export function pipelineRecipes(operators: readonly RecipeOperator[], pipeline: RecipePipeline): PipelineRecipes {
  const out: PipelineRecipes = { recipes: [], problems: [] };
  const at = `data_processor.${pipeline}_pipeline`;
  for (const [i, op] of operators.entries()) {
    if (op.name !== DATA_JUICER_OPERATOR) continue;
    const path = `${at}.operators.${i}.args.config_path`;
    try {
      // the experience operator's other argument (num_process) is checked with its arguments when it is created
      const { num_process: _snake, numProcess: _camel, ...recipeArgs } = op.args;
      const args = pipeline === 'experience' ? recipeArgs : op.args;
      out.recipes.push({ path, operators: readDataJuicerRecipe(recipeFileOf(args, `${at}.operators.${i}`), pipeline) });
    } catch (error) {
      if (!(error instanceof DataJuicerRecipeError)) throw error;
      out.problems.push({ path, message: error.message });
    }
  }
  return out;
}
