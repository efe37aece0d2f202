// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv 2106.09685) on the projections
// of a CausalLM, as PEFT's LoraConfig computes it and in PEFT's file format.
//
//   y = x W^T + b + scale * B A dropout(x)^T       A [r, in]  = kaiming-uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in))
//                                                  B [out, r] = 0, so a new adapter starts as the base model
//   scale = alpha / r        (rsLoRA, Kalajdzievski 2023, arXiv 2312.03732: alpha / sqrt(r))
//   merge: W += scale * B A in place; unmerge: W -= scale * B A
//
// Adapters are float32 by default whatever the model dtype (PEFT's autocast_adapter_dtype): x is cast to their dtype
// and the sum back to the model's. While adapters are attached the base weights are frozen (requiresGrad false).
//
// Dropout (PEFT's lora_dropout, nn.Dropout on the LoRA branch's input) acts in training mode only (train(); the
// default is eval), and not while the adapters are merged or disabled:
//   dropout(x) = x * (keep / (1 - p)),   keep = U[0, 1) < 1 - p     (torch.dropout: bernoulli(1 - p), then / (1 - p))
// Its random numbers form a counter-based stream: draw n (one per adapted projection per forward, in forward order)
// takes U from a fresh generator seeded with splitmix64(dropoutSeed, n). The stream's whole state is therefore
// { seed, draws } (randomState()): saved with a checkpoint it makes a resumed run draw the masks the interrupted one
// would have, and restored before a recomputed layer (activation checkpointing) it redraws the same masks.
//
// Files (PEFT's save_pretrained / from_pretrained): adapter_config.json (peft_type LORA, r, lora_alpha, ...) and
// adapter_model.safetensors with base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r], where
// <module> is the Hugging Face module name, e.g. model.layers.0.self_attn.q_proj.
//
//   const lora = LoraModel.attach(model, { r: 16, loraAlpha: 32, targetModules: 'all-linear' });
//   const optimizer = new torch.AdamW([...lora.loraParameters().values()]);
//   lora.train(); model.forward(ids) ...; lora.eval()         // the adapters run inside the model's projections
//   const ref = lora.withAdaptersDisabled(() => model.forward(ids));   // the base model: the KL reference
//   lora.save(dir); LoraModel.load(otherModel, dir);
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { expectedWeights } from './hf-weights.js';
import type { LinearAdapter } from './linear.js';
import type { CausalLM, ModelDType } from './transformer.js';

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

export interface LoraOptions extends Partial<LoraConfig> {
  /** true (PEFT's default): B = 0, a no-op until trained. false: B kaiming-uniform like A (PEFT's init_lora_weights=False). */
  initLoraWeights?: boolean;
  /** Seed for A (and B when initLoraWeights is false); default: libtorch's global generator. */
  seed?: number;
  /** Adapter dtype (default float32). */
  dtype?: ModelDType;
  /** Adapters require gradients (default true). */
  trainable?: boolean;
  /** Seed of the dropout stream (default: `seed`, else drawn from libtorch's global generator). */
  dropoutSeed?: number;
}

export interface LoadLoraOptions {
  dtype?: ModelDType;
  trainable?: boolean;
  /**
   * The dropout to train with, in place of adapter_config.json's lora_dropout (a training setting, not part of what
   * the adapter computes; what save() then writes).
   */
  loraDropout?: number;
  /** Seed of the dropout stream (default: drawn from libtorch's global generator). */
  dropoutSeed?: number;
}

/** The dropout stream's state (see the header): its seed and how many masks it has drawn. */
export interface LoraDropoutState {
  seed: number;
  draws: number;
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
// one adapted projection

/** Models that carry a LoraModel's adapters (one set at a time). */
const withAdapters = new WeakSet<CausalLM>();

/** Shared by all adapters of one LoraModel. */
interface LoraState {
  enabled: boolean;
  merged: boolean;
  training: boolean;
  dropout: DropoutStream;
}

const U64 = (1n << 64n) - 1n;
/** Generator seeds stay below 2^63 (the addon reads them as int64). */
const SEED_MASK = (1n << 63n) - 1n;

/** splitmix64's output n for `seed` (Steele, Lea, Flood 2014): well-mixed 64-bit values from (seed, n). */
function splitmix64(seed: number, n: number): bigint {
  let z = (BigInt.asUintN(64, BigInt(seed)) + BigInt(n + 1) * 0x9e3779b97f4a7c15n) & U64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & U64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & U64;
  return z ^ (z >> 31n);
}

/** The counter-based stream of dropout masks (see the header). */
class DropoutStream {
  #seed: number | null;
  draws = 0;

  /** Without a seed, one is drawn from libtorch's global generator when first needed (so torch.manualSeed governs it). */
  constructor(seed: number | null) {
    this.#seed = seed;
  }

  get seed(): number {
    this.#seed ??= torch.scope(() => torch.randint(0, 2 ** 31 - 1, [1]).item());
    return this.#seed;
  }

  set seed(seed: number) {
    this.#seed = seed;
  }

  /** keep [shape] (bool): U[0, 1) < 1 - p from the stream's next generator. */
  nextKeepMask(shape: readonly number[], p: number, device: string): Tensor {
    const generator = new torch.Generator(splitmix64(this.seed, this.draws) & SEED_MASK, device);
    this.draws++;
    return torch.rand(shape, { dtype: 'float32', device, generator }).lt(1 - p);
  }
}

function checkDropoutState(state: unknown, where: string): LoraDropoutState {
  const s = (state ?? {}) as Partial<Record<keyof LoraDropoutState, unknown>>;
  if (typeof s.seed !== 'number' || !Number.isSafeInteger(s.seed))
    throw new RangeError(`${where}: seed must be an integer, got ${JSON.stringify(s.seed)}`);
  if (typeof s.draws !== 'number' || !Number.isSafeInteger(s.draws) || s.draws < 0)
    throw new RangeError(`${where}: draws must be a non-negative integer, got ${JSON.stringify(s.draws)}`);
  return { seed: s.seed, draws: s.draws };
}

class LoraLinear implements LinearAdapter {
  constructor(
    readonly weight: Tensor, // the base W [out, in], for merging
    readonly a: Tensor, // [r, in]
    readonly b: Tensor, // [out, r]
    readonly scale: number,
    readonly dropout: number,
    readonly state: LoraState,
  ) {}

  get stochastic(): boolean {
    return this.state.enabled && !this.state.merged && this.state.training && this.dropout > 0;
  }

  /** base + scale * B(A(dropout(x))), computed in the adapter dtype, returned in the base output's dtype. */
  forward(x: Tensor, base: Tensor): Tensor {
    if (!this.state.enabled || this.state.merged) return base;
    let h = x.to({ dtype: this.a.dtype });
    if (this.state.training && this.dropout > 0) {
      const keep = this.state.dropout.nextKeepMask(h.shape, this.dropout, h.device);
      h = h.mul(keep.to({ dtype: h.dtype }).div(1 - this.dropout));
    }
    return base.add(torch.linear(torch.linear(h, this.a), this.b).mul(this.scale)).to({ dtype: base.dtype });
  }

  /** scale * B A [out, in] in W's dtype. */
  delta(): Tensor {
    return torch.scope(() => this.b.matmul(this.a).mul(this.scale).to({ dtype: this.weight.dtype }));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// the adapters of a model

export class LoraModel {
  readonly base: CausalLM;
  /** The resolved config: targetModules is the list of names given, or the projection names 'all-linear' stands for. */
  readonly config: LoraConfig;
  /** scale = alpha / r (or alpha / sqrt(r)). */
  readonly scale: number;
  readonly #adapters: Map<string, LoraLinear>;
  readonly #state: LoraState;
  /** requiresGrad of each base parameter before attach, restored by unload(). */
  readonly #frozen = new Map<Tensor, boolean>();
  #attached = true;

  private constructor(
    base: CausalLM,
    config: LoraConfig,
    makeWeights: (module: string, outFeatures: number, inFeatures: number) => { a: Tensor; b: Tensor },
    trainable: boolean,
    dropoutSeed: number | undefined,
  ) {
    if (withAdapters.has(base)) throw new Error('LoRA: this model already has adapters attached; unload() them first');
    if (dropoutSeed !== undefined) checkDropoutState({ seed: dropoutSeed, draws: 0 }, 'LoRA dropoutSeed');
    this.#state = { enabled: true, merged: false, training: false, dropout: new DropoutStream(dropoutSeed ?? null) };
    const modules = adaptedModules(base, config);
    this.base = base;
    this.config = config;
    this.scale = config.useRslora ? config.loraAlpha / Math.sqrt(config.r) : config.loraAlpha / config.r;
    this.#adapters = new Map();
    const parameters = base.parameters();
    try {
      for (const [module, [outFeatures, inFeatures]] of modules) {
        const { a, b } = makeWeights(module, outFeatures, inFeatures);
        torch.keep(a).requiresGrad_(trainable);
        torch.keep(b).requiresGrad_(trainable);
        const weight = parameters.get(`${module}.weight`) as Tensor;
        this.#adapters.set(module, new LoraLinear(weight, a, b, this.scale, config.loraDropout, this.#state));
      }
    } catch (error) {
      this.#freeAdapters();
      throw error;
    }
    for (const p of parameters.values()) {
      this.#frozen.set(p, p.requiresGrad);
      p.requiresGrad_(false);
    }
    for (const [module, adapter] of this.#adapters) base.setAdapter(module, adapter);
    withAdapters.add(base);
  }

  /** New adapters on `model` (A random, B zero unless initLoraWeights is false), as get_peft_model(model, LoraConfig). */
  static attach(model: CausalLM, options: LoraOptions = {}): LoraModel {
    const config = resolveConfig(model, options);
    const dtype = options.dtype ?? 'float32';
    const generator = options.seed === undefined ? undefined : new torch.Generator(options.seed);
    const device = model.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    // kaiming_uniform_(w, a=sqrt(5)) on [fanOut, fanIn]: bound = sqrt(6 / ((1 + a^2) fanIn)) = 1 / sqrt(fanIn)
    const kaimingUniform = (shape: [number, number]) =>
      torch.scope(() => {
        const bound = 1 / Math.sqrt(shape[1]);
        const t = torch.empty(shape, { dtype: 'float32' }).uniform_(-bound, bound, generator);
        return t.to({ dtype, device });
      });
    return new LoraModel(
      model,
      config,
      (_, outFeatures, inFeatures) => {
        const a = kaimingUniform([config.r, inFeatures]);
        const b =
          options.initLoraWeights === false
            ? kaimingUniform([outFeatures, config.r])
            : torch.zeros([outFeatures, config.r], { dtype, device });
        return { a, b };
      },
      options.trainable ?? true,
      options.dropoutSeed ?? options.seed,
    );
  }

  /** Adapters saved in PEFT format (by PEFT or by save()) on `model`, as PeftModel.from_pretrained(model, dir). */
  static load(model: CausalLM, dir: string, options: LoadLoraOptions = {}): LoraModel {
    const configFile = join(dir, ADAPTER_CONFIG_FILE);
    const weightsFile = join(dir, ADAPTER_WEIGHTS_FILE);
    if (!existsSync(configFile)) throw new LoraAdapterError(configFile, 'not found: not a PEFT adapter folder');
    if (!existsSync(weightsFile)) {
      const detail = existsSync(join(dir, 'adapter_model.bin'))
        ? 'not found (adapter_model.bin is a pickle: save the adapter with safe_serialization=True)'
        : 'not found';
      throw new LoraAdapterError(weightsFile, detail);
    }
    const config = parseAdapterConfig(configFile, model);
    if (options.loraDropout !== undefined) {
      config.loraDropout = options.loraDropout;
      validateConfig(config, 'LoRA loraDropout');
    }
    const dtype = options.dtype ?? 'float32';
    const device = model.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    const tensors = torch.loadSafetensors(weightsFile, { dtype, ...(device === 'cpu' ? {} : { device }) });
    try {
      // every module the config selects has its A and B with the right shapes, and nothing else is in the file
      const expected = new Map<string, [number, number]>();
      for (const [module, [outFeatures, inFeatures]] of adaptedModules(model, config)) {
        const names = loraTensorNames(module);
        expected.set(names.a, [config.r, inFeatures]);
        expected.set(names.b, [outFeatures, config.r]);
      }
      for (const [name, shape] of expected) {
        const t = tensors.get(name);
        if (t === undefined) throw new LoraAdapterError(weightsFile, `missing tensor '${name}' (expected [${shape.join(', ')}])`);
        if (t.ndim !== 2 || t.shape[0] !== shape[0] || t.shape[1] !== shape[1])
          throw new LoraAdapterError(
            weightsFile,
            `tensor '${name}' has shape [${t.shape.join(', ')}], expected [${shape.join(', ')}]`,
          );
      }
      const unexpected = [...tensors.keys()].filter((n) => !expected.has(n));
      if (unexpected.length > 0) {
        const listed = unexpected.slice(0, 4).map((n) => `'${n}'`);
        if (unexpected.length > 4) listed.push(`and ${unexpected.length - 4} more`);
        throw new LoraAdapterError(
          weightsFile,
          `unexpected tensors ${listed.join(', ')}: not adapters of the modules target_modules selects in ${configFile}`,
        );
      }
      const get = (name: string) => tensors.get(name) as Tensor;
      return new LoraModel(
        model,
        config,
        (module) => {
          const names = loraTensorNames(module);
          return { a: get(names.a), b: get(names.b) };
        },
        options.trainable ?? true,
        options.dropoutSeed,
      );
    } catch (error) {
      for (const t of tensors.values()) t.dispose();
      throw error;
    }
  }

  /** The adapter parameters under PEFT's names (base_model.model.<module>.lora_A.weight ...), in model order. */
  loraParameters(): Map<string, Tensor> {
    this.#checkAttached();
    const out = new Map<string, Tensor>();
    for (const [module, adapter] of this.#adapters) {
      const names = loraTensorNames(module);
      out.set(names.a, adapter.a);
      out.set(names.b, adapter.b);
    }
    return out;
  }

  /** The adapted modules, by Hugging Face module name. */
  get modules(): string[] {
    return [...this.#adapters.keys()];
  }

  /** Training mode turns dropout on (PEFT follows module.train()/eval(); the default here is eval). */
  train(mode = true): this {
    this.#state.training = mode;
    return this;
  }

  eval(): this {
    return this.train(false);
  }

  get training(): boolean {
    return this.#state.training;
  }

  /** The dropout stream's state: a checkpoint saves it so that a resumed run draws the same masks. */
  randomState(): LoraDropoutState {
    const { seed, draws } = this.#state.dropout;
    return { seed, draws };
  }

  /** Continues the dropout stream from a randomState() (checked; `where` names its source in errors). */
  setRandomState(state: LoraDropoutState, where = 'LoRA dropout state'): void {
    const checked = checkDropoutState(state, where);
    this.#state.dropout.seed = checked.seed;
    this.#state.dropout.draws = checked.draws;
  }

  get merged(): boolean {
    return this.#state.merged;
  }

  /** W += scale * B A for every adapted projection; forward() then skips the adapters (same outputs, faster). */
  merge(): void {
    this.#checkAttached();
    if (this.#state.merged) return;
    if (!this.#state.enabled) throw new Error('LoraModel.merge: adapters are disabled (inside withAdaptersDisabled)');
    this.#applyDeltas(1);
    this.#state.merged = true;
  }

  /** W -= scale * B A: back to the base weights (up to rounding). */
  unmerge(): void {
    this.#checkAttached();
    if (!this.#state.merged) return;
    this.#applyDeltas(-1);
    this.#state.merged = false;
  }

  /**
   * Runs `fn` (synchronous) with the adapters switched off: the model is the base model, e.g. the reference policy
   * for a KL term. Merged adapters must be unmerged first.
   */
  withAdaptersDisabled<T>(fn: () => T): T {
    this.#checkAttached();
    if (this.#state.merged) throw new Error('LoraModel.withAdaptersDisabled: the adapters are merged; unmerge() first');
    const previous = this.#state.enabled;
    this.#state.enabled = false;
    try {
      const result = fn();
      if (result instanceof Promise)
        throw new TypeError('withAdaptersDisabled takes a synchronous function: the adapters are back on after it returns');
      return result;
    } finally {
      this.#state.enabled = previous;
    }
  }

  /** Writes adapter_config.json and adapter_model.safetensors in PEFT's format; returns the paths written. */
  save(dir: string): string[] {
    this.#checkAttached();
    mkdirSync(dir, { recursive: true });
    const c = this.config;
    const config = {
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
    const configFile = join(dir, ADAPTER_CONFIG_FILE);
    const weightsFile = join(dir, ADAPTER_WEIGHTS_FILE);
    writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);
    torch.saveSafetensors(weightsFile, this.loraParameters(), { format: 'pt' });
    return [configFile, weightsFile];
  }

  /**
   * Takes the adapters out of the model (unmerging first if merged), restores the base parameters' requiresGrad and
   * frees the adapter tensors; returns the base model. Idempotent.
   */
  unload(): CausalLM {
    if (!this.#attached) return this.base;
    if (!this.base.isDisposed) {
      this.unmerge();
      for (const module of this.#adapters.keys()) this.base.setAdapter(module, null);
      for (const [p, requiresGrad] of this.#frozen) p.requiresGrad_(requiresGrad);
    }
    this.#frozen.clear();
    this.#freeAdapters();
    withAdapters.delete(this.base);
    this.#attached = false;
    return this.base;
  }

  /** Merges the adapters into the base weights for good and takes them out (PEFT's merge_and_unload). */
  mergeAndUnload(): CausalLM {
    this.merge();
    this.#state.merged = false; // keep the merged weights: unload() must not subtract the deltas
    return this.unload();
  }

  dispose(): void {
    this.unload();
  }

  #applyDeltas(sign: 1 | -1): void {
    torch.noGrad(() =>
      torch.scope(() => {
        for (const adapter of this.#adapters.values()) {
          const delta = adapter.delta();
          if (sign === 1) adapter.weight.add_(delta);
          else adapter.weight.sub_(delta);
        }
      }),
    );
  }

  #freeAdapters(): void {
    for (const adapter of this.#adapters.values()) {
      adapter.a.dispose();
      adapter.b.dispose();
    }
    this.#adapters.clear();
  }

  #checkAttached(): void {
    if (!this.#attached) throw new Error('LoraModel: the adapters were unloaded');
  }
}

// ---------------------------------------------------------------------------------------------------------------
// which modules

/** Every projection of the model: HF module name → [out, in]. */
function projections(model: CausalLM): Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  for (const [name, shape] of expectedWeights(model.config)) {
    const m = /^(model\.layers\.\d+\.(?:self_attn|mlp)\.\w+_proj)\.weight$/.exec(name);
    if (m !== null) out.set(m[1] as string, shape as [number, number]);
  }
  return out;
}

/** PEFT's check_target_module_exists: a regex must match the whole name; a list entry must equal it or end its path. */
function matches(module: string, pattern: readonly string[] | string): boolean {
  if (typeof pattern === 'string') return new RegExp(`^(?:${pattern})$`).test(module);
  return pattern.some((t) => module === t || module.endsWith(`.${t}`));
}

function adaptedModules(model: CausalLM, config: LoraConfig): Map<string, [number, number]> {
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
        `(its projections: ${LORA_TARGETS.join(', ')} in model.layers.0-${model.config.numHiddenLayers - 1})`,
    );
  }
  return selected;
}

function resolveConfig(model: CausalLM, options: LoraOptions): LoraConfig {
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

function validateConfig(c: LoraConfig, where: string): void {
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

/** The projections of `model` that `targetModules` names ('all-linear' for all), before exclusions, in model order. */
export function targetedModules(model: CausalLM, targetModules: readonly string[] | string): string[] {
  const pattern = targetModules === 'all-linear' ? LORA_TARGETS : targetModules;
  return [...projections(model).keys()].filter((module) => matches(module, pattern));
}

function parseAdapterConfig(file: string, model: CausalLM): LoraConfig {
  let raw: Record<string, unknown>;
  try {
    raw = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (error) {
    throw new LoraAdapterError(file, `cannot read JSON: ${(error as Error).message}`);
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
