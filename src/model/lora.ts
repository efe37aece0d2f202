// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv 2106.09685) on the projections
// of a CausalLM, as PEFT's LoraConfig computes it and in PEFT's file format.
//
//   y = x W^T + b + scale * B A dropout(x)^T       A [r, in]  = kaiming-uniform(a = sqrt(5)) = U(-1/sqrt(in), 1/sqrt(in))
//                                                  B [out, r] = 0, so a new adapter starts as the base model
//   scale = alpha / r        (rsLoRA, Kalajdzievski 2023, arXiv 2312.03732: alpha / sqrt(r))
//   merge: W += scale * B A in place; unmerge: W -= scale * B A
//
// Batch-invariant mode (./batch-invariant.ts, trainer.bitwise_on_policy): the rollout engine samples with the merged
// weights W + scale B A, so the trainer's projection takes its value from that one weight too (foldedWeight, used by
// ./linear.ts), B A made by the fixed-order kernel on both sides (delta); merge() then keeps the base weights and
// unmerge() puts them back bit for bit ((W + D) - D is not always W in floating point, and a drifted W would fold to
// other bits than the engine was sent).
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
//
// Neighbours: lora-config.ts (LoraConfig, which projections it selects, adapter_config.json) and lora-dropout.ts (the
// dropout stream).
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DType, Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { LinearAdapter } from './linear.js';
import {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  adaptedModules,
  adapterConfigJson,
  type LoraConfig,
  LoraAdapterError,
  loraTensorNames,
  parseAdapterConfig,
  resolveConfig,
  validateConfig,
} from './lora-config.js';
import { checkDropoutState, DropoutStream, type LoraDropoutState } from './lora-dropout.js';
import type { CausalLM, ModelDType } from './transformer.js';

export {
  ADAPTER_CONFIG_FILE,
  ADAPTER_WEIGHTS_FILE,
  LORA_TARGETS,
  type LoraConfig,
  LoraAdapterError,
  loraTensorNames,
  readAdapterConfig,
  targetedModules,
} from './lora-config.js';
export type { LoraDropoutState } from './lora-dropout.js';

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

class LoraLinear implements LinearAdapter {
  constructor(
    readonly a: Tensor, // [r, in]
    readonly b: Tensor, // [out, r]
    readonly scale: number,
    readonly dropout: number,
    readonly state: LoraState,
  ) {}

  get stochastic(): boolean {
    return this.state.enabled && !this.state.merged && this.state.training && this.dropout > 0;
  }

  get parameters(): readonly Tensor[] {
    return [this.a, this.b];
  }

  /** W + scale * B A with the fixed-order B A (the merged weight's bits), while the adapter adds a fixed product. */
  foldedWeight(weight: Tensor): Tensor | null {
    if (!this.state.enabled || this.state.merged || this.stochastic) return null;
    return torch.scope(() => weight.add(this.delta(weight.dtype, true)));
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

  /**
   * scale * B A [out, in] in W's dtype. fixedOrder (the batch-invariant mode): (B A)[o, i] one FMA chain over r in
   * order, torch.packedLinear with B's rows as its input and A^T as its weight; else BLAS.
   */
  delta(dtype: DType, fixedOrder = false): Tensor {
    return torch.scope(() => {
      const product = fixedOrder
        ? torch.packedLinear(this.b.detach(), torch.packLinear(this.a.detach().t().contiguous()), null, this.a.size(1))
        : this.b.matmul(this.a);
      return product.mul(this.scale).to({ dtype });
    });
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
  /** Batch-invariant mode: the base weights as they were before merge(), which unmerge() restores. */
  #beforeMerge: Tensor[] | null = null;
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
        this.#adapters.set(module, new LoraLinear(a, b, this.scale, config.loraDropout, this.#state));
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
    if (this.base.batchInvariant)
      this.#beforeMerge = torch.noGrad(() => this.#baseWeights().map((w) => torch.keep(w.detach().clone())));
    this.#applyDeltas(1);
    this.#state.merged = true;
  }

  /** W -= scale * B A: back to the base weights (up to rounding; exactly in the batch-invariant mode). */
  unmerge(): void {
    this.#checkAttached();
    if (!this.#state.merged) return;
    const before = this.#beforeMerge;
    if (before === null) this.#applyDeltas(-1);
    else
      torch.noGrad(() => {
        for (const [i, w] of this.#baseWeights().entries()) w.copy_(before[i] as Tensor);
      });
    this.#dropBeforeMerge();
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
    const configFile = join(dir, ADAPTER_CONFIG_FILE);
    const weightsFile = join(dir, ADAPTER_WEIGHTS_FILE);
    writeFileSync(configFile, `${JSON.stringify(adapterConfigJson(this.config), null, 2)}\n`);
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
      // (a fully sharded trainer freed the base tensors it sharded: nothing to restore on those)
      for (const [p, requiresGrad] of this.#frozen) if (!p.isDisposed) p.requiresGrad_(requiresGrad);
    }
    this.#frozen.clear();
    this.#dropBeforeMerge();
    this.#freeAdapters();
    withAdapters.delete(this.base);
    this.#attached = false;
    return this.base;
  }

  /** Merges the adapters into the base weights for good and takes them out (PEFT's merge_and_unload). */
  mergeAndUnload(): CausalLM {
    this.merge();
    this.#state.merged = false; // keep the merged weights: unload() must not subtract the deltas
    this.#dropBeforeMerge();
    return this.unload();
  }

  dispose(): void {
    this.unload();
  }

  #applyDeltas(sign: 1 | -1): void {
    torch.noGrad(() =>
      torch.scope(() => {
        const weights = this.#baseWeights();
        for (const [i, adapter] of [...this.#adapters.values()].entries()) {
          const weight = weights[i] as Tensor;
          const delta = adapter.delta(weight.dtype, this.base.batchInvariant);
          if (sign === 1) weight.add_(delta);
          else weight.sub_(delta);
        }
      }),
    );
  }

  /**
   * The adapted projections' base weights W, in adapter order, as the model reads them now: a fully sharded trainer
   * (../rft/trainer/fsdp.ts) swaps them for gathered copies while a layer runs, so they are looked up at each use.
   */
  #baseWeights(): Tensor[] {
    const parameters = this.base.parameters();
    return this.modules.map((module) => parameters.get(`${module}.weight`) as Tensor);
  }

  #dropBeforeMerge(): void {
    for (const t of this.#beforeMerge ?? []) t.dispose();
    this.#beforeMerge = null;
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
