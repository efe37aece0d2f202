// A projection as the model runs it: y = x W^T + b, plus an optional adapter (LoRA) on top,
//   y = adapter.forward(x, x W^T + b)
// through BLAS (torch.linear), or, for the inference layout's small products, through torch.packedLinear on a packed
// copy of W (native/src/kernels.cpp; see ./inference-layout.ts for when a projection gets one). In the batch-invariant
// mode (./batch-invariant.ts) every product runs the packed kernel, whatever its row count, with BLAS's gradient; a
// projection with an adapter then takes its value from one fixed-order product over the folded weight
//   y = x (W + scale B A)^T + b      (B A by the fixed-order kernel too: LoraLinear.foldedWeight)
// which is what the rollout engine computes over the merged weights the trainer sends it (LoraModel.merge), so the
// sampler's log-probs equal the trainer's with LoRA as without; the gradient is the adapter's ordinary one.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { fixedValue } from './batch-invariant.js';

/** Something added to a projection's output, e.g. a LoRA adapter (./lora.ts): y = adapter.forward(x, x W^T + b). */
export interface LinearAdapter {
  forward(x: Tensor, base: Tensor): Tensor;
  /** True while forward() draws random numbers (dropout in training): recomputation would then differ. */
  readonly stochastic: boolean;
  /**
   * The batch-invariant mode's weight (see the header): W' with x W'^T + b = forward(x, x W^T + b) in exact arithmetic
   * (LoRA: W + scale B A), the same bits the merged weights have; made without gradients. Null while forward() adds
   * nothing (adapters off or merged) or is no fixed function of x (dropout drawing masks): the projection then runs
   * the base product fixed-order and forward() on it. `weight` is the projection's W now.
   */
  foldedWeight(weight: Tensor): Tensor | null;
  /** The tensors whose gradients forward() records (LoRA's A and B). */
  readonly parameters: readonly Tensor[];
}

/** One projection: weight [out, in] and bias [out] (Hugging Face's), an adapter, and a packed copy of the weight. */
export interface Linear {
  weight: Tensor;
  bias: Tensor | null;
  adapter: LinearAdapter | null;
  /** Inference layout on a CPU that runs torch.packedLinear: the weight packed for it (see packedWeight). */
  packed: PackedWeight | null;
}

/** A weight packed for torch.packedLinear, made on first use and again after the weight was written (its version). */
export interface PackedWeight {
  weight: Tensor | null;
  version: number;
  /** Products of more rows go to BLAS (prefill); Infinity for bfloat16 where libtorch's bf16 product is slow. */
  maxRows: number;
  /** Batch-invariant mode: every product's value comes from the kernel, also under autograd (BLAS gives the gradient). */
  fixedOrder: boolean;
}

/** A projection over `weight` and `bias` with no adapter and no packed copy. */
export const plainLinear = (weight: Tensor, bias: Tensor | null = null): Linear => ({
  weight,
  bias,
  adapter: null,
  packed: null,
});

export function linear(x: Tensor, l: Linear): Tensor {
  // the kernel has no autograd: a forward that records it (trainable LoRA on an inference-layout model) takes BLAS
  let y: Tensor;
  if (l.packed?.fixedOrder && l.adapter !== null && !l.adapter.stochastic) {
    const { weight, bias, adapter } = l;
    const folded = torch.noGrad(() => adapter.foldedWeight(weight));
    if (folded !== null) {
      const out = fixedValue(
        [x, weight, bias, ...adapter.parameters],
        () => adapter.forward(x, torch.linear(x, weight, bias)),
        () => torch.scope(() => torch.packedLinear(x.detach(), torch.packLinear(folded), bias?.detach() ?? null, weight.size(0))),
      );
      folded.dispose();
      return out;
    }
  }
  if (l.packed?.fixedOrder) {
    const { weight, bias } = l;
    y = fixedValue(
      [x, weight, bias],
      () => torch.linear(x, weight, bias),
      () => torch.packedLinear(x.detach(), packedWeight(l), bias?.detach() ?? null, weight.size(0)),
    );
  } else if (l.packed !== null && x.numel / x.size(-1) <= l.packed.maxRows && !x.requiresGrad)
    y = torch.packedLinear(x, packedWeight(l), l.bias, l.weight.size(0));
  else y = torch.linear(x, l.weight, l.bias);
  return l.adapter === null ? y : l.adapter.forward(x, y);
}

/** Gives l a packed copy that every product runs on (the batch-invariant mode), or takes it away (`on` false). */
export function fixedOrderCopy(l: Linear, on: boolean): void {
  if (on) l.packed = { weight: null, version: -1, maxRows: Number.POSITIVE_INFINITY, fixedOrder: true };
  else {
    l.packed?.weight?.dispose();
    l.packed = null;
  }
}

/**
 * l's packed weight, packed again when l.weight's storage was written since (a weight sync, a LoRA merge): into the
 * same tensor, so that captured steps holding it (../engine/decode-steps.ts) read the new weights.
 */
export function packedWeight(l: Linear): Tensor {
  const packed = l.packed as PackedWeight;
  const version = l.weight.version;
  if (packed.weight === null) {
    packed.weight = torch.noGrad(() => torch.keep(torch.packLinear(l.weight)));
    packed.version = version;
  } else if (packed.version !== version) {
    torch.noGrad(() => torch.packLinear_(l.weight, packed.weight as Tensor));
    packed.version = version;
  }
  return packed.weight;
}
