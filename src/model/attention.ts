// Attention as the models run it: softmax(q k^T / sqrt(d) + mask) v, grouped-query heads included.
//
//   q [B, H, S, d], k and v [B, KV, L, d] (H a multiple of KV: query head h reads kv head floor(h / (H / KV)), as
//   transformers' repeat_kv), mask bool [B or 1, 1, S, L] (true = attend) or causal → [B, H, S, d]
//
// Two implementations, chosen by size. libtorch's fused CPU kernel (scaled_dot_product_attention: flash attention,
// memory O(S)) costs ~14x more than the plain product on the short, many-row attention of a GRPO batch (256 rows of
// 6 queries over 20 keys: 26 ms vs 1.9 ms forward + backward, 2 threads), and ties around S·L = 64·64; past that
// the fused kernel wins (256 x 256: 18 ms vs 47 ms) and its memory stays O(S) instead of O(S·L). So float32 attention
// on the CPU with 2 <= S and S·L <= SHORT_ATTENTION runs as two batched products and a softmax; everything else takes
// the fused kernel, but for one-query steps without gradients (decode steps), which take torch.decodeAttention
// (native/src/kernels.cpp): both libtorch paths cost ~80-100 us a call at decode shapes whatever their size, against
// a few microseconds of arithmetic (bench/README.md). All are the same function up to float32 rounding (~1e-7). Not
// on CUDA, whose fused kernels are fast at every size.
//
// Grouped heads (KV < H) and the fused kernels: libtorch picks the kernel by its own rules, and where none of its
// fused kernels takes the call it runs the math kernel, which copies k and v once per query head and keeps the [S, L]
// scores (on CUDA in PyTorch 2.13 and before: flash attention takes grouped heads but no mask and no float32,
// memory-efficient attention masks and float32 but no grouped heads; so every padded batch and every decode step over
// the masked KV cache went to the math kernel, and a training forward kept O(S·L) scores per head per layer; later
// versions' memory-efficient kernel takes grouped heads, and then libtorch's choice is not math). So when
// libtorch's choice (torch.sdpBackend) is the math kernel, a one-query decode step runs as the plain products above
// (k and v read once, no per-head copies; half and bf16 in float32, as the math kernel computes them) and anything longer gets the fused kernel on k and v widened to one head per query
// head, as transformers does (its repeat_kv). On the CPU libtorch's flash kernel takes grouped heads and masks, so
// nothing changes there unless it is switched off (torch.setSdpBackendEnabled).
//
// bfloat16 on the CPU runs in float32: q, k and v are widened (exact), attention runs as above, the output is rounded
// to bf16 once. libtorch's bf16 CPU kernel is slow at the engine's and GRPO's shapes (2 threads, 14 query heads over 2
// kv heads of 64: a decode step of 32 rows over 64 keys 3.8-4.7 vs 0.5 ms per layer, 256 rows of 12 tokens forward +
// backward 167 vs 16 ms, 4 x 64 tokens 7.4 vs 2.6 ms), and its results depend on the shape: a decode step and a
// training forward over the same tokens disagreed by 0.0054 nats per token on average, against 0.0001-0.0009 now
// (test/engine/rollout-engine.test.ts's bf16 budget) — the PPO ratio takes the engine's log-probs as π_old. The cost:
// long sequences, where the bf16 kernel was ahead (4 x 256 tokens forward 16 vs 9.5-12.6 ms, forward + backward
// even; 1 x 1024 forward + backward 75-78 vs 54-58 ms), and float32 copies of q, k and v in memory (saved for the
// backward while training). A decode step's one query takes torch.decodeAttention on the bf16 cache as it is: it
// widens keys and values as it reads them, the same arithmetic and bits as the widened path, without copying every
// layer's cache prefix to float32 each step.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

/** Query x key positions up to which attention runs as plain products (see the header). */
export const SHORT_ATTENTION = 64 * 64;

/** softmax(q k^T / sqrt(d) + mask) v; `mask` null = causal (query i sees keys 0..i; S = L). */
export function attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null): Tensor {
  const [, heads, queries] = q.shape as [number, number, number, number];
  const [, kvHeads, keys] = k.shape as [number, number, number, number];
  const onCpu = q.device === 'cpu';
  const kernelDtype = q.dtype === 'float32' || q.dtype === 'bfloat16';
  if (queries === 1 && onCpu && kernelDtype && !recordsGradients(q, k, v) && torch.packedLinearSupported()) {
    // (null is causal: one query sees key 0 only, so it takes the kernel only over one key). bf16 reads the cache as
    // it is, widening in registers: the bits of the float32 kernel on widened copies, rounded once
    const oneQueryMask = mask === null ? keys === 1 : mask.dtype === 'bool' && mask.size(1) === 1 && mask.size(2) === 1;
    const rowsContiguous = [q, k, v].every((t) => t.strides[3] === 1 && t.dtype === q.dtype);
    if (oneQueryMask && rowsContiguous) return torch.decodeAttention(q, k, v, mask, 1 / Math.sqrt(q.size(3)));
  }
  if (q.dtype === 'bfloat16' && onCpu) {
    return attention(q.float(), k.float(), v.float(), mask).to({ dtype: q.dtype });
  }
  const cpuFloat = q.dtype === 'float32' && onCpu;
  const short = queries >= 2 && queries * keys <= SHORT_ATTENTION && cpuFloat;
  if (short) return groupedProducts(q, k, v, mask);
  const options = mask === null ? { causal: true } : { mask };
  if (heads !== kvHeads && torch.sdpBackend(q, k, v, options) === 'math') {
    // no fused kernel takes these grouped heads (on CUDA: flash attention takes no mask and no float32, the
    // memory-efficient kernel no grouped heads); the math kernel would copy k and v for every query head and keep
    // the [S, L] scores. A decode step's one query reads k and v once in plain products; more queries get the fused
    // kernel over k and v widened to one head per query head, as transformers does
    if (queries === 1) {
      // in float32 for half and bf16, as the math kernel (and the fused kernels' sums) would have it
      if (q.dtype !== 'bfloat16' && q.dtype !== 'float16') return groupedProducts(q, k, v, mask);
      return groupedProducts(q.float(), k.float(), v.float(), mask).to({ dtype: q.dtype });
    }
    return torch.scaledDotProductAttention(q, perQueryHead(k, heads), perQueryHead(v, heads), options);
  }
  return torch.scaledDotProductAttention(q, k, v, options);
}

/** Whether autograd would record an op on these tensors. */
const recordsGradients = (...tensors: Tensor[]): boolean => torch.isGradEnabled() && tensors.some((t) => t.requiresGrad);

/** Attention as two batched products and a softmax, each kv head's group of query heads in one product. */
function groupedProducts(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null): Tensor {
  const [batch, heads, queries, headDim] = q.shape as [number, number, number, number];
  const [, kvHeads, keys] = k.shape as [number, number, number, number];
  const group = heads / kvHeads;
  const allowed = mask ?? torch.ones([queries, keys], { dtype: 'bool', device: q.device }).tril(0).view([1, 1, queries, keys]);
  // [B, KV, group * S, d] x [B, KV, d, L]: no copies of k or v
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

/** k or v [B, KV, L, d] → [B, heads, L, d]: kv head j serves query heads j·group .. (j+1)·group − 1 (repeat_kv). */
function perQueryHead(t: Tensor, heads: number): Tensor {
  const [batch, kvHeads, keys, headDim] = t.shape as [number, number, number, number];
  return t
    .unsqueeze(2)
    .expand([batch, kvHeads, heads / kvHeads, keys, headDim])
    .reshape([batch, heads, keys, headDim]);
}
