// The PPO critic: a value head on a CausalLM trunk (verl's critic: a [1, hidden] head in place of the LM head, the
// trunk initialised from the policy's weights, or from another model folder: Trinity-RFT's model.critic_model_path,
// which must share the policy's tokenizer). For inputIds [B, L]:
//   V[b, t] = w · h[b, t] + c          h = final normed hidden state (forward with output 'hidden'), w [1, hidden]
// V[b, t] values the state after tokens[:t+1], so the value of response token j sits at position j − 1, as its
// log-prob does (see ../trainer/train-batch.ts). Trained with PPO's clipped value loss (verl compute_value_loss):
//   V_clip = clamp(V, V_old − ε_v, V_old + ε_v)                       ε_v = cliprange_value
//   vf_loss = ½ · aggregate(max((V − R)², (V_clip − R)²), mask, loss_agg_mode)      R = GAE returns
// Metrics: vf_loss, vf_clipfrac (share of tokens where the clipped term is larger), vpred_mean.
import type { ModelDType } from '../../model/index.js';
import { packedTrunkInput, type RowPacking } from '../../model/packed-rows.js';
import type { CausalLM } from '../../model/transformer.js';
import { CausalLM as CausalLMClass } from '../../model/transformer.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { aggregateLoss, type LossAggMode } from './loss-agg.js';
import type { Metrics } from './metrics.js';
import { maskedMean } from './utils.js';

export interface ValueLossOptions {
  cliprangeValue: number;
  lossAggMode: LossAggMode;
}

export const VALUE_LOSS_DEFAULTS: Readonly<ValueLossOptions> = { cliprangeValue: 0.5, lossAggMode: 'token-mean' };

export interface ValueLossInput {
  /** [B, T] current value predictions (require grad). */
  values: Tensor;
  /** [B, T] the predictions the advantages were computed with. */
  oldValues: Tensor;
  /** [B, T] value targets. */
  returns: Tensor;
  actionMask: Tensor;
}

export function clippedValueLoss(
  input: ValueLossInput,
  options: Partial<ValueLossOptions> = {},
): { loss: Tensor; metrics: Metrics } {
  const { cliprangeValue, lossAggMode } = { ...VALUE_LOSS_DEFAULTS, ...options };
  return torch.scope(() => {
    const { values, returns, actionMask: mask } = input;
    const oldValues = input.oldValues.detach();
    const clipped = values.minimum(oldValues.add(cliprangeValue)).maximum(oldValues.sub(cliprangeValue));
    const unclippedLoss = values.sub(returns).square();
    const clippedLoss = clipped.sub(returns).square();
    const loss = aggregateLoss(unclippedLoss.maximum(clippedLoss), mask, lossAggMode).mul(0.5);
    const metrics = torch.noGrad(() => ({
      vf_loss: loss.detach(),
      vf_clipfrac: maskedMean(clippedLoss.gt(unclippedLoss).to({ dtype: values.dtype }), mask),
      vpred_mean: maskedMean(values, mask),
    }));
    return { loss, metrics };
  });
}

export interface CriticInitOptions {
  /** Seed of the head's N(0, 0.02) initialisation. */
  seed?: number;
}

/** A value model: its own trunk (a copy of the policy's weights) and a scalar head. Owns its tensors. */
export class Critic {
  readonly trunk: CausalLM;
  /** [1, hidden] */
  readonly headWeight: Tensor;
  /** [1] */
  readonly headBias: Tensor;

  constructor(trunk: CausalLM, headWeight: Tensor, headBias: Tensor) {
    const hidden = trunk.config.hiddenSize;
    if (headWeight.ndim !== 2 || headWeight.size(0) !== 1 || headWeight.size(1) !== hidden) {
      throw new TypeError(`Critic: head weight must be [1, ${hidden}], got [${headWeight.shape.join(', ')}]`);
    }
    this.trunk = trunk;
    this.headWeight = torch.keep(headWeight);
    this.headBias = torch.keep(headBias);
  }

  /** A critic whose trunk starts from `policy`'s weights (copied, trainable) with a fresh head. */
  static fromPolicy(policy: CausalLM, options: CriticInitOptions = {}): Critic {
    const weights = torch.noGrad(
      () => new Map([...policy.parameters()].map(([name, t]) => [name, torch.keep(t.detach().clone().requiresGrad_(true))])),
    );
    return Critic.withFreshHead(new CausalLMClass(policy.config, weights), options);
  }

  /**
   * A critic whose trunk is the model in `dir` (Trinity-RFT's critic_model_path; trainable) with a fresh head. Its
   * vocabulary must cover `policy`'s token ids. It loads onto `options.device` (default: the CPU), where the policy is.
   */
  static load(dir: string, policy: CausalLM, options: CriticInitOptions & { dtype?: ModelDType; device?: string } = {}): Critic {
    const trunk = CausalLMClass.load(dir, {
      ...(options.dtype ? { dtype: options.dtype } : {}),
      ...(options.device && options.device !== 'cpu' ? { device: options.device } : {}),
      requiresGrad: true,
    });
    if (trunk.config.vocabSize < policy.config.vocabSize) {
      trunk.dispose();
      throw new Error(
        `critic model ${dir}: vocabulary of ${trunk.config.vocabSize} tokens, smaller than the policy's ` +
          `${policy.config.vocabSize}; the critic reads the policy's token ids (use a model with the same tokenizer)`,
      );
    }
    return Critic.withFreshHead(trunk, options);
  }

  /** `trunk` (owned) with a head drawn from N(0, 0.02) (seed: options.seed, default 0) and a zero bias. */
  static withFreshHead(trunk: CausalLM, options: CriticInitOptions = {}): Critic {
    const generator = new torch.Generator(options.seed ?? 0);
    const dtype = trunk.dtype;
    const device = trunk.parameters().get('model.embed_tokens.weight')?.device ?? 'cpu';
    const headWeight = torch.scope(() =>
      torch.randn([1, trunk.config.hiddenSize], { generator }).mul(0.02).to({ dtype, device }).requiresGrad_(true),
    );
    const headBias = torch.zeros([1], { dtype, device, requiresGrad: true });
    return new Critic(trunk, headWeight, headBias);
  }

  /** Every weight by name (trunk.<Hugging Face name>, head.weight, head.bias), for checkpoints. */
  namedTensors(): Map<string, Tensor> {
    const out = new Map<string, Tensor>();
    for (const [name, t] of this.trunk.parameters()) out.set(`trunk.${name}`, t);
    out.set('head.weight', this.headWeight);
    out.set('head.bias', this.headBias);
    return out;
  }

  /** Copies saved weights (namedTensors() of a critic of the same shape) into this one; names every mismatch. */
  loadNamedTensors(saved: ReadonlyMap<string, Tensor>, where: string): void {
    const own = this.namedTensors();
    const missing = [...own.keys()].filter((n) => !saved.has(n));
    const extra = [...saved.keys()].filter((n) => !own.has(n));
    if (missing.length > 0 || extra.length > 0) {
      throw new Error(
        `${where}: critic weights do not match the critic (missing: ${missing.slice(0, 4).join(', ') || 'none'}; ` +
          `unexpected: ${extra.slice(0, 4).join(', ') || 'none'})`,
      );
    }
    torch.noGrad(() => {
      for (const [name, t] of own) {
        const source = saved.get(name) as Tensor;
        if (source.shape.join(',') !== t.shape.join(','))
          throw new Error(`${where}: critic tensor '${name}' is [${source.shape.join(', ')}], expected [${t.shape.join(', ')}]`);
        t.copy_(source);
      }
    });
  }

  /** Every trainable tensor: the trunk's parameters and the head. */
  parameters(): Tensor[] {
    return [...this.trunk.parameters().values(), this.headWeight, this.headBias];
  }

  /**
   * inputIds [B, L] → values [B, L] (float32). Records autograd when grad mode is on. `packed`: the rows run packed
   * without pads (../../model/packed-rows.ts) and only the positions from promptWidth − 1 on are computed: values
   * [B, L − 1], zeros before them.
   */
  values(inputIds: Tensor, attentionMask?: Tensor, packed?: RowPacking): Tensor {
    return torch.scope(() => {
      if (packed !== undefined) {
        const input = packedTrunkInput(inputIds, packed);
        const hidden = input.headHidden(this.trunk.forward(input.ids, { ...input.forward, output: 'hidden' }));
        return input.unpack(torch.linear(hidden, this.headWeight, this.headBias).squeeze(-1).float());
      }
      const hidden = this.trunk.forward(inputIds, { ...(attentionMask ? { attentionMask } : {}), output: 'hidden' });
      return torch.linear(hidden, this.headWeight, this.headBias).squeeze(-1).float();
    });
  }

  dispose(): void {
    this.trunk.dispose();
    this.headWeight.dispose();
    this.headBias.dispose();
  }
}
