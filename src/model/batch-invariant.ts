// Batch-invariant forward (the model's bitwise on-policy mode, trainer.bitwise_on_policy): a sequence's logits do not
// depend on what else is in the batch, on its row, on padding, or on whether its prefix came from a KV cache (a decode
// step) or a full forward (training), so the sampler's log-probs and the trainer's are the same bits.
//
// What otherwise differs between the engine's forward and the trainer's on the CPU, and what this mode runs instead:
//   projections   BLAS (sgemm picks blocking and kernels by the row count) vs torch.packedLinear for 1-64 rows
//                 → torch.packedLinear for every row count: each output is one float32 FMA chain over k in order
//   attention     decode: torch.decodeAttention over the cache; training: batched products or libtorch's flash kernel
//                 → torch.decodeAttention for every query, one query per kernel row, keys at the same cache positions
//                   (key i of a sequence at position i: left padding is cut off per row) and the key count rounded up to
//                   a multiple of 8 (the kernel scores keys 8 at a time and a ragged tail in another order; masked keys
//                   add exact zeros); rows packed without pads (./packed-attention.ts, use_remove_padding) the same way,
//                   segment by segment: a continuation's keys are its prompt's, then its own, at their sequence positions
//   RMSNorm       torch.decodeRmsNorm (one pass per row) vs ATen's rms_norm → torch.decodeRmsNorm on both sides
//   RoPE cos/sin  computed per forward from the positions (ATen's vectorized cos and its scalar tail round
//                 differently, and which elements fall in the tail depends on the batch) → read from a table made in
//                 fixed chunks of positions (./rope.ts)
//   SiLU, sigmoid ATen's vectorized exp and its scalar loop (a call's last elements, short of two vectors, and each
//                 thread's share's) round differently, and which elements those are follows the tensor's size
//                 → invariantElementwise: calls padded to whole vector steps, each small enough for one thread
// Arithmetic ops (residual adds, the SwiGLU product, the rotary products: correctly rounded on either path) and the
// softmaxes over the vocabulary or the experts (one row at a time) are the same per element or row whatever the batch.
// Mixtures of experts (./moe.ts): the router's and experts' products fixed-order, so a token's routing and its experts'
// outputs do not depend on which tokens share its experts' runs; its k weighted outputs are added in routing rank order
// (index_put_'s accumulation order follows the batch on several threads).
//
// Gradients: the fixed-order kernels have no autograd, so a forward that records one computes the ordinary op too and
// takes its value from the kernel and its gradient from the ordinary op:
//   out = ordinary − detach(ordinary) + fixed          (ordinary − detach(ordinary) is exactly 0; same function, so
//                                                       the gradient is the ordinary op's)
// That is one extra forward per projection and attention in a training forward (bench/README.md, bench:on-policy).
// LoRA: an adapted projection's value is one fixed-order product over the folded weight W + scale B A, the merged
// weights' bits that the engine samples with (./linear.ts, ./lora.ts). Not covered: dynamic NTK RoPE (its frequencies
// follow the longest position in the batch; refused), and CPUs without AVX2/FMA (refused).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { PackedPass } from './packed-attention.js';

/** Whether this machine runs the batch-invariant forward (its kernels: the CPU's AVX2/FMA ones). */
export const batchInvariantSupported = (device: string): boolean => device === 'cpu' && torch.packedLinearSupported();

/** Whether autograd would record an op on these tensors. */
const recordsGradients = (...tensors: (Tensor | null)[]): boolean =>
  torch.isGradEnabled() && tensors.some((t) => t?.requiresGrad === true);

/**
 * `fixed()`'s value with `ordinary`'s gradient when autograd records (see the header), else `fixed()` alone.
 * `fixed` runs without gradients on detached inputs.
 */
export function fixedValue(inputs: (Tensor | null)[], ordinary: () => Tensor, fixed: () => Tensor): Tensor {
  if (!recordsGradients(...inputs)) return fixed();
  const y = ordinary();
  const value = torch.noGrad(fixed);
  return y.sub(y.detach()).add(value);
}

/** RMSNorm with the one-pass kernel's bits: y = weight * x * rsqrt(mean(x^2) + eps) (ordinary: ATen's, as transformers). */
export function invariantRmsNorm(x: Tensor, weight: Tensor, eps: number, ordinary: () => Tensor): Tensor {
  return fixedValue([x, weight], ordinary, () => torch.decodeRmsNorm(x.detach(), weight.detach(), eps));
}

/** Elements per ATen call in invariantElementwise: at most one parallel task's (at::internal::GRAIN_SIZE). */
const ELEMENTWISE_CHUNK = 32768;
/** ATen's vectorized loops take 2 vectors a step (64 bf16 elements with AVX-512): a multiple leaves no scalar tail. */
const VECTOR_STEP = 64;

/**
 * `op` (an elementwise function: silu, sigmoid) over x with bits that do not depend on x's size (see the header):
 * x flattened, padded with zeros to a multiple of VECTOR_STEP and cut into calls of ELEMENTWISE_CHUNK elements, so
 * every element takes the vectorized loop in a call that one thread runs. Differentiable (cat and narrow).
 */
export function invariantElementwise(x: Tensor, op: (t: Tensor) => Tensor): Tensor {
  const count = x.numel;
  const padded = Math.ceil(count / VECTOR_STEP) * VECTOR_STEP;
  let flat = x.contiguous().reshape([count]);
  if (padded > count) flat = torch.cat([flat, torch.zeros([padded - count], { dtype: x.dtype, device: x.device })]);
  const calls: Tensor[] = [];
  for (let start = 0; start < padded; start += ELEMENTWISE_CHUNK)
    calls.push(op(flat.narrow(0, start, Math.min(ELEMENTWISE_CHUNK, padded - start))));
  return (calls.length === 1 ? (calls[0] as Tensor) : torch.cat(calls, 0)).narrow(0, 0, count).view(x.shape);
}

/** silu(x) = x · sigmoid(x), or sigmoid(x): batch-invariant (invariantElementwise) when `invariant`, else ATen's. */
export function activation(x: Tensor, op: 'silu' | 'sigmoid', invariant: boolean): Tensor {
  const apply = (t: Tensor) => (op === 'silu' ? t.silu() : t.sigmoid());
  return invariant ? invariantElementwise(x, apply) : apply(x);
}

/** Keys per decodeAttention call rounded up to this (see the header). */
const KEY_MULTIPLE = 8;

/**
 * softmax(q k^T / sqrt(d) + mask) v through torch.decodeAttention one query per kernel row, independent of the batch:
 *   q [B, H, S, d], k and v [B, KV, L, d], mask bool [B or 1, 1, S, L] (true = attend) or null (causal, S = L),
 *   rowStarts: per row, the first position of its sequence (left padding before it; null: all 0). Row b's queries
 *   and keys from rowStarts[b] on are attended as a sequence of their own; its queries before that give zeros.
 * `ordinary` gives the gradient when autograd records (see fixedValue).
 */
export function invariantAttention(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  mask: Tensor | null,
  rowStarts: readonly number[] | null,
  ordinary: () => Tensor,
): Tensor {
  return fixedValue([q, k, v], ordinary, () => fixedOrderAttention(q.detach(), k.detach(), v.detach(), mask, rowStarts));
}

function fixedOrderAttention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null, rowStarts: readonly number[] | null): Tensor {
  const [batch, heads, queries, headDim] = q.shape as [number, number, number, number];
  const keys = k.size(2);
  const scale = 1 / Math.sqrt(headDim);
  const allowed = mask ?? torch.ones([queries, keys], { dtype: 'bool', device: q.device }).tril(0).view([1, 1, queries, keys]);
  if (queries === 1 && (rowStarts === null || rowStarts.every((s) => s === 0))) {
    // a decode step: one kernel call over the batch, as the engine's eager path makes it
    const padded = padKeys(k, v, allowed.expand([batch, 1, 1, keys]));
    return torch.decodeAttention(q.contiguous(), padded.k, padded.v, padded.mask, scale);
  }
  const rows = Array.from({ length: batch }, (_, b) => {
    const first = rowStarts?.[b] ?? 0;
    const length = queries - first;
    const before = torch.zeros([first, heads, 1, headDim], { dtype: q.dtype, device: q.device });
    if (length <= 0) return before.permute([2, 1, 0, 3]);
    // row b's queries and keys from its start: a sequence of its own
    const keyCount = keys - first;
    const rowMask = allowed
      .select(0, allowed.size(0) === 1 ? 0 : b)
      .select(0, 0)
      .narrow(0, first, length)
      .narrow(1, first, keyCount);
    const attended = sequenceAttention(
      q.select(0, b).narrow(1, first, length),
      k.select(0, b).narrow(1, first, keyCount),
      v.select(0, b).narrow(1, first, keyCount),
      rowMask,
      scale,
    );
    return (first === 0 ? attended : torch.cat([before, attended], 0)).permute([2, 1, 0, 3]); // [1, H, S, d]
  });
  return torch.cat(rows, 0);
}

/**
 * Attention over packed rows (./packed-attention.ts) with the bits of the padded batch's: each segment's queries
 * attend, one per kernel row, over its context's keys then its own (key i of the sequence at kernel position i), as
 * that sequence does in a padded row or the engine's cache. q [1, H, T, d], k and v [1, KV, T, d] → [1, T, H·d] in
 * packed order, as packedAttention gives it (its `ordinary`, for the gradient).
 */
export function invariantPackedAttention(q: Tensor, k: Tensor, v: Tensor, pass: PackedPass, ordinary: () => Tensor): Tensor {
  return fixedValue([q, k, v], ordinary, () => {
    const [, heads, tokens, headDim] = q.shape as [number, number, number, number];
    const [packedQ, packedK, packedV] = [q, k, v].map((t) => t.detach().select(0, 0)) as [Tensor, Tensor, Tensor];
    const outputs = pass.segments.map(({ start, length, contextStart, contextLength }) => {
      const sequence = (t: Tensor) =>
        contextLength === 0
          ? t.narrow(1, start, length)
          : torch.cat([t.narrow(1, contextStart, contextLength), t.narrow(1, start, length)], 1);
      // query j (sequence position contextLength + j) sees keys 0 .. contextLength + j
      const allowed = torch.ones([length, contextLength + length], { dtype: 'bool', device: q.device }).tril(contextLength);
      const attended = sequenceAttention(
        packedQ.narrow(1, start, length),
        sequence(packedK),
        sequence(packedV),
        allowed,
        1 / Math.sqrt(headDim),
      );
      return attended.reshape([length, heads * headDim]);
    });
    return torch.cat(outputs, 0).view([1, tokens, heads * headDim]);
  });
}

/**
 * One sequence's attention through torch.decodeAttention, one query per kernel row: q [H, S, d] over k and v
 * [KV, L, d] (key i at sequence position i), allowed bool [S, L] → [S, H, 1, d]. The keys are padded to a multiple of
 * KEY_MULTIPLE (zero keys, masked) and shared by every kernel row without a copy.
 */
function sequenceAttention(q: Tensor, k: Tensor, v: Tensor, allowed: Tensor, scale: number): Tensor {
  const [, queries, headDim] = q.shape as [number, number, number];
  const padded = padKeys(k, v, allowed);
  const keyCount = padded.k.size(1);
  const perQuery = (t: Tensor) => t.unsqueeze(0).expand([queries, t.size(0), keyCount, headDim]);
  const rowQueries = q.permute([1, 0, 2]).unsqueeze(2).contiguous(); // [S, H, 1, d]
  return torch.decodeAttention(
    rowQueries,
    perQuery(padded.k),
    perQuery(padded.v),
    padded.mask.view([queries, 1, 1, keyCount]),
    scale,
  );
}

/**
 * Each row's first real token, for a mask [B, T] whose real tokens are one run per row (left and right padding);
 * read back to the host. The batch-invariant forward attends from there (./batch-invariant.ts).
 */
export function sequenceStarts(real: Tensor): number[] {
  return (real.toArray() as boolean[][]).map((row, b) => {
    const first = row.indexOf(true);
    const end = row.lastIndexOf(true) + 1;
    if (first >= 0 && row.slice(first, end).includes(false))
      throw new TypeError(
        `forward: the batch-invariant forward needs each row's real tokens in one run; row ${b} has a pad inside`,
      );
    return Math.max(first, 0);
  });
}

/** Keys and values [..., L, d] and their mask [..., L] with L rounded up to KEY_MULTIPLE (zero keys, masked). */
function padKeys(k: Tensor, v: Tensor, mask: Tensor): { k: Tensor; v: Tensor; mask: Tensor } {
  const keys = k.size(-2);
  const extra = (KEY_MULTIPLE - (keys % KEY_MULTIPLE)) % KEY_MULTIPLE;
  if (extra === 0) return { k, v, mask };
  const pad = (t: Tensor, dim: number, value: number | boolean) => {
    const shape = [...t.shape];
    shape[dim] = extra;
    return torch.cat([t, torch.full(shape, value, { dtype: t.dtype, device: t.device })], dim);
  };
  return { k: pad(k, k.ndim - 2, 0), v: pad(v, v.ndim - 2, 0), mask: pad(mask, mask.ndim - 1, false) };
}
