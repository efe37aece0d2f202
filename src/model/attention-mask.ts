// The attention mask of a padded batch without a cache (a cache builds its own, see ./kv-cache.ts).
//
//   mask[b, 0, i, j] = (real[b, j] && j <= i) || j == i          true = attend
// The diagonal lets a pad query see itself, so no row of the softmax is all-masked and no NaN can reach real tokens.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

/** [B, T] bool (true = real token) → [B, 1, T, T] bool: causal over real keys, plus the diagonal. */
export function causalPadMask(real: Tensor): Tensor {
  const [batch, seqLen] = real.shape as [number, number];
  const index = torch.arange(seqLen, { device: real.device });
  const query = index.view([seqLen, 1]);
  const causal = index.view([1, seqLen]).le(query); // [T, T]
  return real
    .view([batch, 1, 1, seqLen])
    .logicalAnd(causal)
    .logicalOr(index.view([1, seqLen]).eq(query));
}
