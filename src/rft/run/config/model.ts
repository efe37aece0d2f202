// The `model` section of the run config (Trinity's ModelConfig): the policy model's folder, its token lengths, dtype,
// critic and LoRA adapter — the schema with its defaults, the lengths derived from one another (Trinity's
// ModelConfigValidator._check_model_len, without its silent clamping), and the LoRA settings. The policy model is read
// by the explorer and the trainer alike and src/model (the layer below src/rft) knows no config, so this section sits
// with the composition. Written in the config language of src/rft/config/.
import { join } from 'node:path';
import { z } from 'zod';
import type { ReportProblem } from '../../config/errors.js';
import { bool, DTYPES, intIn, MAX_TOKENS, nonEmpty, num, numIn, str } from '../../config/value-schemas.js';
import type { StageSettings } from '../../settings.js';
import { fileErrorDetail, pathExists, readRegularFile } from '../../../util/index.js';

/** A LoRA adapter on the policy (Trinity: model.lora_configs[0]; PEFT's names in adapter_config.json). */
export const LoraSchema = z.strictObject({
  // rank, alpha, target_modules null: Trinity's defaults (lora_rank 32, lora_alpha 32, all-linear) for a new
  // adapter; with `path`, the adapter's own (a value set here must match its adapter_config.json)
  rank: intIn(1, 4096).nullable().default(null), // [1, 4096]
  alpha: numIn(0, 1e6, true).nullable().default(null), // (0, 1e6]
  dropout: num(z.number().min(0).lt(1)).default(0), // [0, 1); PEFT lora_dropout 0
  target_modules: z
    .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
    .nullable()
    .default(null),
  path: str().nullable().default(null), // an existing PEFT adapter folder; null: a new adapter
  name: nonEmpty().nullable().default(null), // served under this name on external servers; null: the run's name
});

/**
 * Trinity's LoRA key, model.lora_configs: a list of adapters of which Trinity supports one (config.py LoRAConfig).
 * It becomes model.lora (resolveModel): name → name, path → path (null: a new adapter, which is what Trinity's
 * "dummy" adapter at path null is: PEFT's initialisation, B = 0, so it starts as the base model), lora_rank → rank,
 * lora_alpha → alpha, target_modules ('all-linear' or a list of module names); unset, these are Trinity's defaults
 * (32, 32, all-linear) for a new adapter and the folder's own with a path (Trinity passes its defaults to vLLM, which
 * loads the adapter as saved). base_model_name, lora_dtype and exclude_modules have no counterpart here:
 * src/rft/config/refusals.ts accepts their defaults only.
 */
export const TrinityLoraSchema = z.strictObject({
  name: nonEmpty().nullable().default(null),
  path: str().nullable().default(null),
  base_model_name: str().nullable().default(null),
  lora_rank: intIn(1, 4096).nullable().default(null), // [1, 4096]
  lora_alpha: numIn(0, 1e6, true).nullable().default(null), // (0, 1e6]
  lora_dtype: nonEmpty().default('auto'),
  // null: Trinity's 'all-linear' for a new adapter; with a path, the folder's own (as lora_rank and lora_alpha)
  target_modules: z
    .union([z.string().min(1), z.array(z.string().min(1)).min(1)])
    .nullable()
    .default(null),
  exclude_modules: str().nullable().default(null),
});

export const ModelSchema = z.strictObject({
  model_path: nonEmpty(), // required: a Hugging Face model folder
  critic_model_path: str().nullable().default(null), // null: the critic starts from the policy's weights
  max_prompt_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_model_len - max_response_tokens, or half of it
  max_response_tokens: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_model_len - max_prompt_tokens
  max_model_len: intIn(1, MAX_TOKENS).nullable().default(null), // [1, 2^20]; derived: max_prompt_tokens + max_response_tokens
  // Trinity's default: a rollout prompt over max_prompt_tokens becomes a masked placeholder experience, not a failure
  // (src/rft/workflow/prompt-truncation.ts); false: such a prompt is generated from as it is while it fits max_model_len
  enable_prompt_truncation: bool().default(true),
  dtype: z.enum(DTYPES).default('bfloat16'), // Trinity rollout_model.dtype bfloat16
  lora: LoraSchema.nullable().default(null), // null: full fine-tuning
  lora_configs: z.array(TrinityLoraSchema).min(1).nullable().default(null), // Trinity's form of `lora` (one adapter)
});

export type LoraConfig = z.output<typeof LoraSchema>;
export type ModelConfig = Omit<
  z.output<typeof ModelSchema>,
  'critic_model_path' | 'max_prompt_tokens' | 'max_response_tokens' | 'max_model_len' | 'lora_configs'
> & {
  /** null: the critic starts from the stage's policy weights (Trinity: critic_model_path defaults to model_path). */
  critic_model_path: string | null;
  max_prompt_tokens: number;
  max_response_tokens: number;
  max_model_len: number;
};

/** The three lengths derived from one another: max_model_len = max_prompt_tokens + max_response_tokens. */
export function resolveModel(m: z.output<typeof ModelSchema>, problem: ReportProblem): ModelConfig {
  let maxModelLen = m.max_model_len;
  let maxPrompt = m.max_prompt_tokens;
  let maxResponse = m.max_response_tokens;
  if (maxModelLen !== null && maxPrompt !== null && maxResponse !== null && maxPrompt + maxResponse > maxModelLen) {
    problem(
      'model.max_model_len',
      `max_prompt_tokens + max_response_tokens (${maxPrompt} + ${maxResponse}) exceeds max_model_len (${maxModelLen})`,
    );
  }
  if (maxModelLen === null) {
    if (maxPrompt !== null && maxResponse !== null) maxModelLen = maxPrompt + maxResponse;
    else problem('model.max_model_len', 'cannot be derived: set it, or both max_prompt_tokens and max_response_tokens');
  }
  if (maxModelLen !== null) {
    if (maxPrompt === null && maxResponse === null) {
      maxPrompt = Math.floor(maxModelLen / 2);
      maxResponse = maxModelLen - maxPrompt;
    } else if (maxPrompt === null && maxResponse !== null) {
      if (maxResponse >= maxModelLen) {
        problem('model.max_response_tokens', `(${maxResponse}) leaves no room for the prompt in max_model_len (${maxModelLen})`);
      }
      maxPrompt = Math.max(1, maxModelLen - maxResponse);
    } else if (maxResponse === null && maxPrompt !== null) {
      if (maxPrompt >= maxModelLen) {
        problem('model.max_prompt_tokens', `(${maxPrompt}) leaves no room for a response in max_model_len (${maxModelLen})`);
      }
      maxResponse = Math.max(1, maxModelLen - maxPrompt);
    }
  }
  const { lora_configs: trinityLoras, ...model } = m;
  const trinityLora = loraFromTrinity(trinityLoras, m.lora !== null, problem);
  return {
    ...model,
    lora: m.lora ?? trinityLora,
    max_model_len: maxModelLen ?? 0,
    max_prompt_tokens: maxPrompt ?? 0,
    max_response_tokens: maxResponse ?? 0,
  };
}

/** model.lora_configs (Trinity's form, see TrinityLoraSchema) as model.lora; null when it is not set. */
function loraFromTrinity(
  loras: z.output<typeof TrinityLoraSchema>[] | null,
  loraSet: boolean,
  problem: ReportProblem,
): LoraConfig | null {
  if (loras === null) return null;
  if (loraSet) {
    problem('model.lora_configs', "is Trinity's form of model.lora: set one of them");
    return null;
  }
  if (loras.length > 1) {
    problem('model.lora_configs', `lists ${loras.length} adapters; one is supported (as in Trinity-RFT): keep one`);
  }
  const [first] = loras as [z.output<typeof TrinityLoraSchema>];
  const targets = first.target_modules;
  if (typeof targets === 'string' && targets !== 'all-linear') {
    problem(
      'model.lora_configs.0.target_modules',
      `got '${targets}': a string other than 'all-linear' is a PEFT regular expression over module paths, which is ` +
        "not supported here: list the module names (e.g. ['q_proj', 'v_proj']) or use 'all-linear'",
    );
  }
  return {
    rank: first.lora_rank,
    alpha: first.lora_alpha,
    dropout: 0, // PEFT's lora_dropout default; Trinity's LoRAConfig has no dropout
    target_modules: targets,
    path: first.path,
    name: first.name,
  };
}

/** LoRA settings: unset rank/alpha/target_modules are Trinity's defaults for a new adapter, the adapter's own with a path. */
export function loraSettings(lora: LoraConfig): NonNullable<StageSettings['lora']> {
  const fresh = lora.path === null;
  const targets = lora.target_modules ?? (fresh ? 'all-linear' : null);
  return {
    rank: lora.rank ?? (fresh ? 32 : null),
    alpha: lora.alpha ?? (fresh ? 32 : null),
    dropout: lora.dropout,
    adapterName: lora.name,
    targetModules: targets === null || Array.isArray(targets) ? targets : targets === 'all-linear' ? 'all-linear' : [targets],
  };
}

/**
 * The model folders a stage reads, checked before it runs: the policy's (`policyPath`: the folder the stage starts
 * from, null where none is read) and the critic's have config.json, a LoRA adapter has adapter_config.json. Returns
 * the policy's vocab_size where it says one.
 */
export function checkModelFolders(model: ModelConfig, policyPath: string | null, report: ReportProblem): number | null {
  let vocabSize: number | null = null;
  if (policyPath !== null) {
    const config = readModelConfig(policyPath);
    if (typeof config === 'string') report('model.model_path', config);
    else if (typeof config.vocab_size === 'number') vocabSize = config.vocab_size;
  }
  if (model.critic_model_path !== null) {
    const critic = readModelConfig(model.critic_model_path);
    if (typeof critic === 'string') report('model.critic_model_path', critic);
  }
  const adapter = model.lora?.path ?? null;
  if (adapter !== null) {
    const adapterConfig = presence(join(adapter, 'adapter_config.json'));
    if (typeof adapterConfig === 'string') report('model.lora.path', adapterConfig);
    else if (!adapterConfig) report('model.lora.path', `${adapter} is not a PEFT adapter folder (no adapter_config.json)`);
  }
  return vocabSize;
}

/** config.json of a model folder as an object, or why it cannot be read. */
function readModelConfig(dir: string): Record<string, unknown> | string {
  const file = join(dir, 'config.json');
  const folder = presence(dir);
  if (folder !== true) return folder || `model folder ${dir} does not exist`;
  const configFile = presence(file);
  if (configFile !== true) return configFile || `${dir} is not a Hugging Face model folder (no config.json)`;
  try {
    const value: unknown = JSON.parse(readRegularFile(file, 'utf8')); // a FIFO here would block the run for ever
    if (value === null || typeof value !== 'object' || Array.isArray(value)) return `${file} does not hold a JSON object`;
    return value as Record<string, unknown>;
  } catch (error) {
    return `${file} cannot be read: ${fileErrorDetail(error)}`;
  }
}

/**
 * Whether `path` exists: true, false where nothing is there, or why it cannot be looked at (a symlink loop, no
 * permission: `path: too many levels of symbolic links`), which existsSync would call missing.
 */
export function presence(path: string): boolean | string {
  try {
    return pathExists(path);
  } catch (error) {
    return `${path}: ${fileErrorDetail(error)}`;
  }
}
