// Mixed precision the way verl's FSDP workers train by default (MixedPrecision(param_dtype=bf16, reduce_dtype=fp32)
// over float32 parameters): forward and backward run on a bf16 copy of the weights, the optimizer and its state work
// on float32 master weights.
//
//   after each micro-batch's backward   master.grad += float32(compute.grad);  compute.grad = none
//   (all-reduce, clipping)              on master.grad (float32)
//   optimizer step                      AdamW(master)                       (float32 moments)
//   after the step                      compute ← bf16(master)
//
// Why: bf16 keeps 8 significant bits, so an update |Δw| < 2^-9·|w| applied to a bf16 weight rounds away to nothing;
// kept in a float32 master weight it stays and adds up over steps. The compute copy is what the rollout engine is
// handed (bf16 weights, by reference).
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';

export class MasterWeights {
  /**
   * `compute[i]` is the low-precision copy of `master[i]` (same shape; both trainable leaves; the optimizer holds
   * `master`). Both stay owned by the caller.
   */
  constructor(
    readonly compute: readonly Tensor[],
    readonly master: readonly Tensor[],
  ) {
    if (compute.length !== master.length)
      throw new Error(`master weights: ${compute.length} compute tensors for ${master.length} master tensors`);
    compute.forEach((c, i) => {
      const m = master[i] as Tensor;
      if (c.shape.join(',') !== m.shape.join(','))
        throw new Error(`master weights: tensor ${i} is [${c.shape}] in compute and [${m.shape}] in master`);
    });
  }

  /** Moves the compute weights' gradients (from the backward just run) into the master weights', in their dtype. */
  accumulateGradients(): void {
    torch.noGrad(() =>
      torch.scope(() => {
        this.compute.forEach((c, i) => {
          const g = c.grad;
          if (g === null) return;
          const m = this.master[i] as Tensor;
          const mg = m.grad;
          if (mg === null) m.grad = g.to({ dtype: m.dtype, copy: true });
          else mg.add_(g);
          c.grad = null;
        });
      }),
    );
  }

  /** Copies the master weights into the compute weights (rounded to their dtype), after an optimizer step. */
  publish(): void {
    torch.noGrad(() => {
      this.compute.forEach((c, i) => {
        c.copy_(this.master[i] as Tensor);
      });
    });
  }
}
