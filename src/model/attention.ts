// Attention as the models run it: softmax(q k^T / sqrt(d) + mask) v, grouped-query heads included.
//
//   q [B, H, S, d], k and v [B, KV, L, d] (H a multiple of KV: query head h reads kv head floor(h / (H / KV)), as
//   transformers' repeat_kv), mask bool [B or 1, 1, S, L] (true = attend) or causal → [B, H, S, d]
//
// Two implementations, chosen by size. libtorch's fused CPU kernel (scaled_dot_product_attention: flash attention,
// memory O(S)) costs ~14x more than the plain product on the short, many-row attention of a GRPO batch (256 rows of
// 6 queries over 20 keys: 26 ms vs 1.9 ms forward + backward, 2 threads), and ties around S·L = 64·64; past that
// the fused kernel wins (256 x 256: 18 ms vs 47 ms) and its memory stays O(S) instead of O(S·L). One-query decode
// steps tie or favour the fused kernel. So float32 attention on the CPU with 2 <= S and S·L <= SHORT_ATTENTION runs as
// two batched products and a softmax; everything else takes the fused kernel. Both are the same function up to float32
// rounding (~1e-7). Not for bfloat16: the engine's one-query decode steps take the fused kernel, and a training
// forward through the plain products (float32 inside or not) drifted from it by 0.011 nats per token against 0.007
// with the fused kernel on both sides (test/engine/rollout-engine.test.ts's bf16 budget). Not on CUDA, whose fused
// kernels are fast at every size.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

/** Query x key positions up to which attention runs as plain products (see the header). */
export const SHORT_ATTENTION = 64 * 64;

/** softmax(q k^T / sqrt(d) + mask) v; `mask` null = causal (query i sees keys 0..i; S = L). */
export function attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null): Tensor {
  const [batch, heads, queries, headDim] = q.shape as [number, number, number, number];
  const [, kvHeads, keys] = k.shape as [number, number, number, number];
  const short = queries >= 2 && queries * keys <= SHORT_ATTENTION && q.dtype === 'float32' && q.device === 'cpu';
  if (!short) {
    return mask === null
      ? torch.scaledDotProductAttention(q, k, v, { causal: true })
      : torch.scaledDotProductAttention(q, k, v, { mask });
  }
  const group = heads / kvHeads;
  const allowed = mask ?? torch.ones([queries, keys], { dtype: 'bool', device: q.device }).tril(0).view([1, 1, queries, keys]);
  // [B, KV, group * S, d] x [B, KV, d, L]: each kv head's group of query heads in one product, no copies of k or v
  const scores = q
    .reshape([batch, kvHeads, group * queries, headDim])
    .matmul(k.transpose(-1, -2))
    .mul(1 / Math.sqrt(headDim))
    .view([batch, kvHeads, group, queries, keys]);
  const weights = scores.maskedFill(allowed.unsqueeze(2).logicalNot(), Number.NEGATIVE_INFINITY).softmax(-1);
  return weights
    .view([batch, kvHeads, group * queries, keys])
    .matmul(v)
    .view([batch, heads, queries, headDim]);
}
