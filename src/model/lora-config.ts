// LoRA's configuration: PEFT's LoraConfig (the part this implementation has), which projections of a CausalLM it
// selects (target_modules / exclude_modules / layers_to_transform, matched as PEFT's check_target_module_exists), and
// the adapter folder's adapter_config.json (read, checked and written in PEFT's format). The adapters themselves are
// in lora.ts.
//
// Mixture of experts (qwen2_moe, qwen3_moe): each expert's projections are modules of their own, named as in
// save_pretrained's per-expert layout and PEFT's adapters for transformers 4 (each expert an nn.Linear):
//   model.layers.{i}.mlp.experts.{e}.{gate,up,down}_proj      model.layers.{i}.mlp.shared_expert.{gate,up,down}_proj
// so `gate_proj` (a list entry matches a name it ends) selects every expert's, the shared expert's and the dense
// layers' gate_proj, and a regex can pick some (`.*\.experts\.\d+\.down_proj`). The routers (mlp.gate,
// mlp.shared_expert_gate) are not adaptable: PEFT 0.21 cannot put LoRA on transformers 5's router either, and
// 'all-linear' here means the seven projection names below.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileErrorDetail, readRegularFile } from '../util/index.js';
import { expectedWeights } from './hf-weights.js';
import type { CausalLM } from './transformer.js';

/** The projections LoRA can adapt ('all-linear' = all of them; lm_head is never adapted, as in PEFT). */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const;

/** PEFT's LoraConfig, the part this implementation has (camelCase of adapter_config.json's keys). */
export interface LoraConfig {
  r: number;
  loraAlpha: number;
  loraDropout: number;
  /**
   * Which projections: a list of names, each matching a module that it names or ends (`q_proj` matches
   * model.layers.3.self_attn.q_proj), 'all-linear', or a regular expression over the whole module name (as PEFT).
   */
  targetModules: readonly string[] | string;
  /** Modules to leave out, with the same matching; null for none. */
  excludeModules: readonly string[] | string | null;
  /** Only these layer indices; null for all. */
  layersToTransform: readonly number[] | null;
  /** scale = alpha / sqrt(r) instead of alpha / r. */
  useRslora: boolean;
  /** Written to adapter_config.json (default: the model's source folder). */
  baseModelNameOrPath: string | null;
}

export class LoraAdapterError extends Error {
  constructor(file: string, detail: string) {
    super(`${file}: ${detail}`);
    this.name = 'LoraAdapterError';
  }
}

export const ADAPTER_CONFIG_FILE = 'adapter_config.json';
export const ADAPTER_WEIGHTS_FILE = 'adapter_model.safetensors';

const DEFAULTS: Omit<LoraConfig, 'baseModelNameOrPath'> = {
  r: 8,
  loraAlpha: 8,
  loraDropout: 0,
  targetModules: ['q_proj', 'v_proj'], // PEFT's default for Llama and Qwen
  excludeModules: null,
  layersToTransform: null,
  useRslora: false,
};

/** PEFT's names of a module's adapter tensors in adapter_model.safetensors. */
export function loraTensorNames(module: string): { a: string; b: string } {
  return { a: `base_model.model.${module}.lora_A.weight`, b: `base_model.model.${module}.lora_B.weight` };
}

// ---------------------------------------------------------------------------------------------------------------
// which modules

/** Every projection of the model: HF module name → [out, in]. */
function projections(model: CausalLM): Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  for (const [name, shape] of expectedWeights(model.config)) {
    const m = /^(model\.layers\.\d+\.(?:self_attn|mlp|mlp\.experts\.\d+|mlp\.shared_expert)\.\w+_proj)\.weight$/.exec(name);
    if (m !== null) out.set(m[1] as string, shape as [number, number]);
  }
  return out;
}

/** PEFT's check_target_module_exists: a regex must match the whole name; a list entry must equal it or end its path. */
function matches(module: string, pattern: readonly string[] | string): boolean {
  if (typeof pattern === 'string') return new RegExp(`^(?:${pattern})$`).test(module);
  return pattern.some((t) => module === t || module.endsWith(`.${t}`));
}

export function adaptedModules(model: CausalLM, config: LoraConfig): Map<string, [number, number]> {
  const all = projections(model);
  const selected = new Map<string, [number, number]>();
  for (const [module, shape] of all) {
    if (!matches(module, config.targetModules)) continue;
    if (config.excludeModules !== null && matches(module, config.excludeModules)) continue;
    const layer = Number(/^model\.layers\.(\d+)\./.exec(module)?.[1]);
    if (config.layersToTransform !== null && !config.layersToTransform.includes(layer)) continue;
    selected.set(module, shape);
  }
  if (selected.size === 0) {
    throw new RangeError(
      `LoRA: target_modules ${JSON.stringify(config.targetModules)} match no projection of this ${model.config.architecture} ` +
        `(its projections: ${LORA_TARGETS.join(', ')} in model.layers.0-${model.config.numHiddenLayers - 1}` +
        `${model.config.moe ? ", the experts' mlp.experts.{e}.{gate,up,down}_proj" : ''})`,
    );
  }
  return selected;
}

export function resolveConfig(model: CausalLM, options: Partial<LoraConfig>): LoraConfig {
  const targetModules = options.targetModules ?? DEFAULTS.targetModules;
  const config: LoraConfig = {
    r: options.r ?? DEFAULTS.r,
    loraAlpha: options.loraAlpha ?? DEFAULTS.loraAlpha,
    loraDropout: options.loraDropout ?? DEFAULTS.loraDropout,
    targetModules: targetModules === 'all-linear' ? [...LORA_TARGETS] : targetModules,
    excludeModules: options.excludeModules ?? DEFAULTS.excludeModules,
    layersToTransform: options.layersToTransform ?? DEFAULTS.layersToTransform,
    useRslora: options.useRslora ?? DEFAULTS.useRslora,
    baseModelNameOrPath: options.baseModelNameOrPath ?? model.sourceDir,
  };
  validateConfig(config, 'LoRA config');
  return config;
}

export function validateConfig(c: LoraConfig, where: string): void {
  const fail = (detail: string): never => {
    throw new RangeError(`${where}: ${detail}`);
  };
  if (!Number.isInteger(c.r) || c.r < 1) fail(`r must be a positive integer, got ${c.r}`);
  if (typeof c.loraAlpha !== 'number' || !Number.isFinite(c.loraAlpha)) fail(`lora_alpha must be a number, got ${c.loraAlpha}`);
  if (typeof c.loraDropout !== 'number' || !(c.loraDropout >= 0 && c.loraDropout < 1))
    fail(`lora_dropout must be in [0, 1), got ${c.loraDropout}`);
  for (const [key, value] of [
    ['target_modules', c.targetModules],
    ['exclude_modules', c.excludeModules],
  ] as const) {
    if (value === null && key === 'exclude_modules') continue;
    if (typeof value === 'string') {
      try {
        new RegExp(value);
      } catch (error) {
        fail(`${key} '${value}' is not a valid regular expression: ${(error as Error).message}`);
      }
    } else if (
      !Array.isArray(value) ||
      value.some((v) => typeof v !== 'string') ||
      (key === 'target_modules' && value.length === 0)
    )
      fail(`${key} must be a non-empty list of module names, 'all-linear' or a regular expression`);
  }
  if (
    c.layersToTransform !== null &&
    (!Array.isArray(c.layersToTransform) || c.layersToTransform.some((l) => !Number.isInteger(l)))
  )
    fail('layers_to_transform must be a list of layer indices or null');
}

// ---------------------------------------------------------------------------------------------------------------
// adapter_config.json

// PEFT features this implementation does not have: present with a non-empty value, they are errors.
const UNSUPPORTED_KEYS = [
  'use_dora',
  'lora_bias',
  'fan_in_fan_out',
  'modules_to_save',
  'rank_pattern',
  'alpha_pattern',
  'layer_replication',
  'target_parameters',
  'trainable_token_indices',
  'alora_invocation_tokens',
  'use_qalora',
  'use_bdlora',
  'arrow_config',
] as const;

function isEmpty(value: unknown): boolean {
  if (value === null || value === undefined || value === false) return true;
  if (Array.isArray(value)) return value.length === 0;
  return typeof value === 'object' && Object.keys(value).length === 0;
}

/** The LoRA config of a PEFT adapter folder (its adapter_config.json, checked as load() checks it). */
export function readAdapterConfig(dir: string, model: CausalLM): LoraConfig {
  const file = join(dir, ADAPTER_CONFIG_FILE);
  if (!existsSync(file)) throw new LoraAdapterError(file, 'not found: not a PEFT adapter folder');
  return parseAdapterConfig(file, model);
}

/** adapter_config.json as PEFT writes it for this config (save()'s file; PEFT's defaults for the features not here). */
export function adapterConfigJson(c: LoraConfig): Record<string, unknown> {
  return {
    alpha_pattern: {},
    auto_mapping: null,
    base_model_name_or_path: c.baseModelNameOrPath,
    bias: 'none',
    exclude_modules: c.excludeModules === null ? null : c.excludeModules,
    fan_in_fan_out: false,
    inference_mode: true,
    init_lora_weights: true,
    layer_replication: null,
    layers_pattern: null,
    layers_to_transform: c.layersToTransform,
    loftq_config: {},
    lora_alpha: c.loraAlpha,
    lora_bias: false,
    lora_dropout: c.loraDropout,
    megatron_config: null,
    megatron_core: 'megatron.core',
    modules_to_save: null,
    peft_type: 'LORA',
    r: c.r,
    rank_pattern: {},
    revision: null,
    target_modules: c.targetModules,
    task_type: 'CAUSAL_LM',
    use_dora: false,
    use_rslora: c.useRslora,
  };
}

/** The projections of `model` that `targetModules` names ('all-linear' for all), before exclusions, in model order. */
export function targetedModules(model: CausalLM, targetModules: readonly string[] | string): string[] {
  const pattern = targetModules === 'all-linear' ? LORA_TARGETS : targetModules;
  return [...projections(model).keys()].filter((module) => matches(module, pattern));
}

export function parseAdapterConfig(file: string, model: CausalLM): LoraConfig {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readRegularFile(file, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new LoraAdapterError(file, `cannot read JSON: ${fileErrorDetail(error)}`);
  }
  if (raw === null || typeof raw !== 'object' || Array.isArray(raw)) throw new LoraAdapterError(file, 'expected a JSON object');
  if (raw.peft_type !== 'LORA')
    throw new LoraAdapterError(file, `peft_type is ${JSON.stringify(raw.peft_type)}, expected "LORA"`);
  for (const key of UNSUPPORTED_KEYS) {
    if (!isEmpty(raw[key])) throw new LoraAdapterError(file, `${key} = ${JSON.stringify(raw[key])} is not supported`);
  }
  if (raw.bias !== undefined && raw.bias !== 'none')
    throw new LoraAdapterError(file, `bias = ${JSON.stringify(raw.bias)} is not supported (only "none")`);
  if (raw.layers_pattern !== undefined && !isEmpty(raw.layers_pattern) && raw.layers_pattern !== 'layers')
    throw new LoraAdapterError(file, `layers_pattern = ${JSON.stringify(raw.layers_pattern)} is not supported`);
  if (raw.target_modules === null || raw.target_modules === undefined)
    throw new LoraAdapterError(file, 'target_modules is missing: name the adapted modules');
  const layers = raw.layers_to_transform;
  const config: LoraConfig = {
    r: raw.r as number,
    loraAlpha: (raw.lora_alpha ?? DEFAULTS.loraAlpha) as number,
    loraDropout: (raw.lora_dropout ?? 0) as number,
    targetModules: raw.target_modules === 'all-linear' ? [...LORA_TARGETS] : (raw.target_modules as string[] | string),
    excludeModules: (raw.exclude_modules ?? null) as string[] | string | null,
    layersToTransform:
      layers === null || layers === undefined ? null : typeof layers === 'number' ? [layers] : (layers as number[]),
    useRslora: raw.use_rslora === true,
    baseModelNameOrPath: typeof raw.base_model_name_or_path === 'string' ? raw.base_model_name_or_path : model.sourceDir,
  };
  try {
    validateConfig(config, 'adapter config');
  } catch (error) {
    throw new LoraAdapterError(file, (error as Error).message);
  }
  return config;
}
