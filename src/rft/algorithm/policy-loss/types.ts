// What policy loss functions take and give. Per-token tensors are [B, T]; `logprob` carries the gradient.
import type { Tensor } from '../../../torch/index.js';
import type { AlgorithmModule } from '../registry.js';

export interface PolicyLossInput {
  /** [B, T] log π_θ(y_t | ·) of the current policy (requires grad). */
  logprob: Tensor;
  /** [B, T] 1 (or true) on the tokens that count. */
  actionMask: Tensor;
  /** [B, T] log-probs of the policy that sampled the tokens (π_old). */
  oldLogprob?: Tensor;
  /** [B, T] advantages. */
  advantages?: Tensor;
  /** [B, T] log-probs of the reference policy (dpo). */
  refLogprob?: Tensor;
  /** [B] bool: rows that are expert (SFT) data (mix, mix_chord). */
  expertMask?: Tensor;
  /** Global training step (mix_chord's μ schedule). */
  step?: number;
}

export interface PolicyLossResult {
  /** Scalar loss to minimise. */
  loss: Tensor;
  metrics: Record<string, number>;
}

export type PolicyLossModule<Options extends object> = AlgorithmModule<PolicyLossInput, Options, PolicyLossResult>;

export function need<K extends keyof PolicyLossInput>(
  input: PolicyLossInput,
  field: K,
  module: string,
): NonNullable<PolicyLossInput[K]> {
  const value = input[field];
  if (value === undefined || value === null) throw new Error(`policy_loss_fn '${module}' needs input.${String(field)}`);
  return value as NonNullable<PolicyLossInput[K]>;
}
