// The auxiliary models of the run config (explorer.auxiliary_models: Trinity's InferenceModelConfig where it
// applies): judges, reward models and teachers the explorer's workflows and rewards call by name — the schema with its
// defaults, the rules between its keys (embedded or external, unique names), and the settings startAuxiliaryModels
// (./index.ts) reads. Written in the config language of src/rft/config/.
import { z } from 'zod';
import { resolveDevice } from '../../torch/index.js';
import type { ReportProblem } from '../config/errors.js';
import { bool, DTYPES, deviceSetting, ENGINE_TYPES, intIn, MAX_SLOTS, MAX_TOKENS, str } from '../config/value-schemas.js';
import type { AuxiliaryModelSettings } from './index.js';

/** explorer.auxiliary_models[i] (Trinity's InferenceModelConfig where it applies): a judge, reward model or teacher. */
export const AuxiliaryModelSchema = z.strictObject({
  name: str().nullable().default(null), // null: auxiliary_<index>; workflows and rewards ask for it by this name
  model_path: str().nullable().default(null), // embedded: required (a Hugging Face folder); openai: its tokenizer, optional
  engine_type: z.enum(ENGINE_TYPES).default('embedded'), // Trinity vllm; openai: an external OpenAI-compatible server
  engine_num: intIn(1, 64).default(1), // [1, 64] embedded engines (each its own thread and slots); openai: 1
  slots: intIn(1, MAX_SLOTS).nullable().default(null), // [1, 4096] embedded only; null: 8
  max_model_len: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20] embedded only; null: min(max_position_embeddings, 2048)
  dtype: z.enum(DTYPES).nullable().default(null), // embedded only; null: model.dtype
  device: deviceSetting(), // embedded only; auto: cuda when a GPU is visible, else cpu
  base_url: str().nullable().default(null), // openai only (…/v1)
  api_key: str().nullable().default(null), // openai only; null: $OPENAI_API_KEY if set
  model_name: str().nullable().default(null), // openai only; null: model_path
  // embedded only: Qwen3's chat-template switch, passed to every render of this model's chat template (its judge
  // prompts) as the variable enable_thinking, as explorer.rollout_model.enable_thinking is the rollout model's;
  // null: not passed (the template's default)
  enable_thinking: bool().nullable().default(null),
});

export type AuxiliaryModelConfig = z.output<typeof AuxiliaryModelSchema>;

/**
 * The rules of explorer.auxiliary_models: names differ, each key belongs to its engine_type, and (`singleStageRun`:
 * a one-stage run that runs by itself) a mode that explores nothing has none.
 */
export function checkAuxiliaryModels(
  models: readonly AuxiliaryModelConfig[],
  { mode, singleStageRun }: { mode: string; singleStageRun: boolean },
  problem: ReportProblem,
): void {
  const auxiliaryNames = new Map<string, number>();
  for (const [i, aux] of models.entries()) {
    const at = `explorer.auxiliary_models.${i}`;
    const name = aux.name ?? `auxiliary_${i}`;
    const earlier = auxiliaryNames.get(name);
    if (earlier !== undefined)
      problem(`${at}.name`, `'${name}' is also the name of explorer.auxiliary_models.${earlier}: names must differ`);
    auxiliaryNames.set(name, i);
    if (aux.engine_type === 'embedded') {
      if (aux.model_path === null)
        problem(`${at}.model_path`, 'is required with engine_type embedded (a Hugging Face model folder)');
      for (const key of ['base_url', 'api_key', 'model_name'] as const)
        if (aux[key] !== null) problem(`${at}.${key}`, "is only used with engine_type 'openai'");
    } else {
      if (aux.base_url === null) problem(`${at}.base_url`, 'is required with engine_type openai (the server, …/v1)');
      if (aux.engine_num !== 1)
        problem(`${at}.engine_num`, 'an external endpoint is one server: set 1 (put several behind a load balancer)');
      for (const key of ['slots', 'max_model_len', 'dtype'] as const)
        if (aux[key] !== null) problem(`${at}.${key}`, "is only used with engine_type 'embedded'; the server has its own");
      if (aux.enable_thinking !== null)
        problem(
          `${at}.enable_thinking`,
          "is only used with engine_type 'embedded': an external server renders its own chat template (set it there)",
        );
      if (aux.device !== 'auto')
        problem(`${at}.device`, 'places an embedded engine; an external server runs where it was started: remove it');
    }
  }
  const explores = mode === 'both' || mode === 'explore' || mode === 'bench';
  if (models.length > 0 && singleStageRun && !explores)
    problem('explorer.auxiliary_models', `are called by the explorer's workflows; mode ${mode} runs none: remove them`);
}

/**
 * explorer.auxiliary_models (checked above) as settings; their devices are resolved where they run (`explores`: this
 * process runs the explorer, rank 0 of a mode that explores), `dtype` the model's where a model sets none.
 */
export function auxiliaryModelSettings(
  models: readonly AuxiliaryModelConfig[],
  { dtype, numThreads, explores }: { dtype: (typeof DTYPES)[number]; numThreads: number; explores: boolean },
): AuxiliaryModelSettings[] {
  return models.map((aux, i): AuxiliaryModelSettings => {
    const name = aux.name ?? `auxiliary_${i}`;
    if (aux.engine_type === 'openai')
      return {
        type: 'openai',
        name,
        baseUrl: aux.base_url as string,
        apiKey: aux.api_key ?? process.env.OPENAI_API_KEY ?? null,
        modelName: aux.model_name ?? (aux.model_path as string),
        modelPath: aux.model_path,
      };
    const key = `explorer.auxiliary_models.${i}.device`;
    return {
      type: 'embedded',
      name,
      modelPath: aux.model_path as string,
      engineNum: aux.engine_num,
      slots: aux.slots ?? 8,
      maxLength: aux.max_model_len ?? undefined,
      dtype: aux.dtype ?? dtype,
      device: explores ? resolveDevice(aux.device, { key }) : 'cpu',
      numThreads,
      chatTemplateVariables: aux.enable_thinking === null ? {} : { enable_thinking: aux.enable_thinking },
    };
  });
}
