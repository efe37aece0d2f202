// Free functions: joins, layers (linear, embedding, norms, attention, cross-entropy), sampling, autograd control,
// and runtime settings. Methods on Tensor cover the rest.
import type { Generator } from './creation.js';
import { type BlasInfo, native, type SdpBackend, type SdpBackendChoice } from './native.js';
import { fromHandle, operand, type Tensor } from './tensor.js';

type TensorOrNumber = Tensor | number;

export function cat(tensors: readonly Tensor[], dim = 0): Tensor {
  return fromHandle(
    native.cat(
      tensors.map((t) => t.handle),
      dim,
    ),
  );
}

export function stack(tensors: readonly Tensor[], dim = 0): Tensor {
  return fromHandle(
    native.stack(
      tensors.map((t) => t.handle),
      dim,
    ),
  );
}

/** condition ? a : b, elementwise with broadcasting; a and b may be numbers. */
export function where(condition: Tensor, a: TensorOrNumber, b: TensorOrNumber): Tensor {
  return fromHandle(native.where(condition.handle, operand(a), operand(b)));
}

export function matmul(a: Tensor, b: Tensor): Tensor {
  return a.matmul(b);
}

/**
 * y = x W^T + b, with W of shape [out, in] as in torch.nn.Linear and Hugging Face checkpoints. Like matmul, mm and
 * bmm: bfloat16 on a CPU without a fast libtorch bf16 product (cpuHasBf16Matmul false) runs in float32 on widened
 * copies and rounds the result to bf16 once (gradients too), as oneDNN's bf16 product accumulates in float32.
 */
export function linear(x: Tensor, weight: Tensor, bias?: Tensor | null): Tensor {
  return fromHandle(native.linear(x.handle, weight.handle, bias?.handle ?? null));
}

/**
 * True when this CPU runs packedLinear (x86-64 with AVX2 and FMA). Elsewhere use linear.
 */
export function packedLinearSupported(): boolean {
  return native.packedLinearSupported();
}

/**
 * Attention of one query per row over a cache, for decode steps on the CPU (native/src/kernels.cpp): q [B, H, 1, d],
 * k and v [B, KV, L, d] (H a multiple of KV: query head h reads kv head floor(h / (H / KV))), mask bool [B or 1, 1, 1,
 * L] (true = attend) or null; softmax(scale q k^T) v, [B, H, 1, d]. float32 or bfloat16 (q, k and v alike: bf16 is
 * widened as it is read, computed in float32 and rounded once), the last dimension of q, k and v contiguous, no
 * autograd; runs where packedLinearSupported(). Equals scaledDotProductAttention up to float32 rounding, the same bits
 * on any thread count.
 */
export function decodeAttention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | null, scale: number): Tensor {
  return fromHandle(native.decodeAttention(q.handle, k.handle, v.handle, mask?.handle ?? null, scale));
}

/**
 * RMSNorm of the last dimension in one pass, for inference on the CPU (native/src/kernels.cpp): x * rsqrt(mean(x^2) +
 * eps) * weight, x [..., n] and weight [n] both float32 or both bfloat16 (bf16 as transformers' RMSNorm rounds it:
 * the normalized row rounded, times the weight, rounded); no autograd; runs where packedLinearSupported(). Equals
 * rmsNorm(x, [n], weight, eps) up to float32 rounding, the same bits on any thread count; libtorch's CPU rmsNorm is
 * ~10 ATen ops (~9 us a call even for one row).
 */
export function decodeRmsNorm(x: Tensor, weight: Tensor, eps: number): Tensor {
  return fromHandle(native.decodeRmsNorm(x.handle, weight.handle, eps));
}

/**
 * Rotary embedding in one pass, for inference on the CPU (native/src/kernels.cpp): x * cos + roll(x, d / 2) * sin
 * (the model's applyRotary: sin carries rotate_half's sign), x [B, H, T, d], cos and sin [B or 1, 1, T, d], all
 * float32 or all bfloat16, last dimensions contiguous; no autograd; runs where packedLinearSupported(). The same bits
 * as those ATen ops (products and sums rounded alike, no FMA; in bf16 each rounded to bf16), and the strides they
 * would give the output.
 */
export function decodeRotary(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
  return fromHandle(native.decodeRotary(x.handle, cos.handle, sin.handle));
}

/**
 * In place: buffer[slots[b], h, positions[b, t], :] = source[b, h, t, :] (native/src/kernels.cpp), buffer [S, H, L, D]
 * with its last dimension contiguous, slots int64 [B], positions int64 [B, T], source [B, H, T, D] of the buffer's
 * dtype; CPU only, no autograd. The KV cache's write of a step's keys and values: equal to
 * buffer.indexPut_([slots.unsqueeze(1), null, positions], source.transpose(1, 2)), in one pass of row copies instead
 * of ATen's indexing (~6 us a call at decode shapes). An index out of range is an error naming it.
 */
export function writeCacheRows(buffer: Tensor, slots: Tensor, positions: Tensor, source: Tensor): void {
  native.writeCacheRows(buffer.handle, slots.handle, positions.handle, source.handle);
}

/**
 * True when libtorch sends bfloat16 matmuls on this CPU to oneDNN (x86 with AVX512 BW/VL/DQ, its own test, and
 * oneDNN enabled); without, its bf16 products are reference loops (~1-2 GFLOP/s for some layouts), so packedLinear
 * is the bf16 product of the inference layout at any row count, and linear/matmul/mm/bmm run bf16 in float32.
 */
export function cpuHasBf16Matmul(): boolean {
  return native.cpuHasBf16Matmul();
}

/**
 * True when libtorch's float32 products (BLAS) run AVX2 code on this CPU although it has AVX-512 and packedLinear takes
 * its AVX-512 path, so that packedLinear is ahead of BLAS at any row count (bench/README.md): MKL held to AVX2 by
 * MKL_ENABLE_INSTRUCTIONS, or by its vendor check on CPUs not made by Intel when TRINITY_MKL_AVX512=off (blasInfo).
 * False under ATEN_CPU_CAPABILITY=avx2 (the kernel holds to AVX2 too).
 */
export function blasHoldsToAvx2(): boolean {
  return native.blasHoldsToAvx2();
}

/**
 * libtorch's float32 BLAS on this CPU: MKL on x86 builds, which takes its AVX-512 code only where its vendor check
 * says Intel; the addon answers that check from the CPU's features (native/src/blas.cpp), so on AMD CPUs with AVX-512
 * training's and prefill's products run at the CPU's full width (bench/README.md, "MKL's vendor check").
 */
export function blasInfo(): BlasInfo {
  return native.blasInfo();
}

/**
 * libtorch's oneDNN switch (PyTorch's torch.backends.mkldnn.enabled; on by default). Off, libtorch's bf16 products
 * are its reference loops, as on a CPU without AVX-512: benchmarks and tests run such a CPU with it.
 */
export function setMkldnnEnabled(enabled: boolean): void {
  if (typeof enabled !== 'boolean') throw new TypeError(`setMkldnnEnabled: expected a boolean, got ${String(enabled)}`);
  native.setMkldnnEnabled(enabled);
}

export function mkldnnEnabled(): boolean {
  return native.mkldnnEnabled();
}

/** The path packedLinear takes on this CPU now. */
export type PackedLinearIsa = 'avx512bf16' | 'avx512' | 'avx2';

/**
 * The path packedLinear takes for weights of `dtype` on this CPU now: 'avx512' where present, else 'avx2'; for
 * bfloat16, 'avx512bf16' (AVX512-BF16 dot products: twice the multiply-adds) where the CPU has them ('none': no
 * kernel).
 */
export function packedLinearIsa(dtype: 'float32' | 'bfloat16' = 'float32'): PackedLinearIsa | 'none' {
  return native.packedLinearIsa(dtype);
}

/**
 * The widest path packedLinear may take ('auto': the widest the CPU has). 'avx512' and 'avx2' give the same bits;
 * 'avx512bf16' (bf16 only) sums two products per instruction, so its float32 sums can differ by rounding. For
 * comparing the paths' speed on one machine.
 */
export function setPackedLinearIsa(isa: 'auto' | 'avx512' | 'avx2'): void {
  native.setPackedLinearIsa(isa);
}

/**
 * A float32 or bfloat16 CPU weight [out, in] rearranged for packedLinear: [ceil(out / 16), in, 16], 16-column panels
 * (zero rows past `out`). A copy: pack again after the weight changed (Tensor.version tells).
 */
export function packLinear(weight: Tensor): Tensor {
  return fromHandle(native.packLinear(weight.handle));
}

/** packLinear into an existing packed weight of the same shape (packLinear(weight)'s), in place. */
export function packLinear_(weight: Tensor, packed: Tensor): Tensor {
  native.packLinear_(weight.handle, packed.handle);
  return packed;
}

/**
 * linear(x, W, bias) on the CPU with W packed by packLinear (x, W and bias of one dtype: float32 or bfloat16): a
 * kernel for few rows (decoding) that streams the weight at memory speed where BLAS does not (native/src/kernels.cpp).
 * Inference only: nothing requires grad. Equal to linear up to float32 rounding; bfloat16 accumulates in float32
 * and rounds the output once, as a bf16 GEMM does.
 */
export function packedLinear(x: Tensor, packed: Tensor, bias: Tensor | null, outFeatures: number): Tensor {
  return fromHandle(native.packedLinear(x.handle, packed.handle, bias?.handle ?? null, outFeatures));
}

/** Rows of `weight` [vocab, dim] picked by integer `indices`. */
export function embedding(weight: Tensor, indices: Tensor): Tensor {
  return fromHandle(native.embedding(weight.handle, indices.handle));
}

/** y = x / sqrt(mean(x^2 over the last dims) + eps) * weight (Zhang & Sennrich 2019). */
export function rmsNorm(x: Tensor, normalizedShape: readonly number[], weight?: Tensor | null, eps?: number): Tensor {
  return fromHandle(native.rmsNorm(x.handle, [...normalizedShape], weight?.handle ?? null, eps ?? null));
}

export function layerNorm(
  x: Tensor,
  normalizedShape: readonly number[],
  weight?: Tensor | null,
  bias?: Tensor | null,
  eps = 1e-5,
): Tensor {
  return fromHandle(native.layerNorm(x.handle, [...normalizedShape], weight?.handle ?? null, bias?.handle ?? null, eps));
}

export interface AttentionOptions {
  /** Boolean mask (true = attend) or additive float mask, broadcastable to [batch, heads, q, k]. */
  mask?: Tensor | null;
  dropout?: number;
  /** Causal masking (query i sees keys <= i, aligned at the top-left as in PyTorch). */
  causal?: boolean;
  /** Defaults to 1/sqrt(head_dim). */
  scale?: number;
}

/**
 * softmax(q k^T * scale + mask) v over q [batch, heads, q, dim], k/v [batch, kvHeads, k, dim].
 * Grouped-query attention: when kvHeads < heads (heads a multiple of kvHeads), each group of heads shares a k/v head.
 */
export function scaledDotProductAttention(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions = {}): Tensor {
  const gqa = q.ndim >= 3 && k.ndim >= 3 && q.size(-3) !== k.size(-3);
  return fromHandle(
    native.scaledDotProductAttention(
      q.handle,
      k.handle,
      v.handle,
      options.mask?.handle ?? null,
      options.dropout ?? 0,
      options.causal ?? false,
      options.scale ?? null,
      gqa,
    ),
  );
}

/**
 * The kernel scaledDotProductAttention would run for these arguments, by libtorch's own rules for the device, dtype,
 * shapes, mask and switches (at::_fused_sdp_choice): 'flash', 'efficient' (memory-efficient attention), 'cudnn',
 * 'math' (the unfused fallback: scores materialised, grouped k/v heads copied per query head) or 'overrideable';
 * libtorch's error when every kernel that could run is switched off. Grouped-query inputs (fewer k/v heads) are asked
 * about as such.
 */
export function sdpBackend(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  options: Pick<AttentionOptions, 'mask' | 'causal'> = {},
): SdpBackendChoice {
  const gqa = q.ndim >= 3 && k.ndim >= 3 && q.size(-3) !== k.size(-3);
  return native.sdpBackend(q.handle, k.handle, v.handle, options.mask?.handle ?? null, options.causal ?? false, gqa);
}

const SDP_BACKENDS: readonly SdpBackend[] = ['flash', 'efficient', 'math', 'cudnn'];

function checkSdpBackend(caller: string, backend: SdpBackend): void {
  if (!SDP_BACKENDS.includes(backend))
    throw new RangeError(`${caller}: expected one of ${SDP_BACKENDS.join(', ')}, got ${String(backend)}`);
}

/**
 * Switches one of libtorch's attention kernels on or off for this process (PyTorch's
 * torch.backends.cuda.enable_flash_sdp, enable_mem_efficient_sdp, enable_math_sdp, enable_cudnn_sdp; all on by
 * default). They also steer the CPU's choice (flash or math there).
 */
export function setSdpBackendEnabled(backend: SdpBackend, enabled: boolean): void {
  checkSdpBackend('setSdpBackendEnabled', backend);
  if (typeof enabled !== 'boolean') throw new TypeError(`setSdpBackendEnabled: expected a boolean, got ${String(enabled)}`);
  native.setSdpBackendEnabled(backend, enabled);
}

export function sdpBackendEnabled(backend: SdpBackend): boolean {
  checkSdpBackend('sdpBackendEnabled', backend);
  return native.sdpBackendEnabled(backend);
}

export interface CrossEntropyOptions {
  ignoreIndex?: number;
  reduction?: 'none' | 'mean' | 'sum';
  labelSmoothing?: number;
}

/** Cross-entropy of logits [N, C] against class indices [N] (torch.nn.functional.cross_entropy). */
export function crossEntropy(logits: Tensor, target: Tensor, options: CrossEntropyOptions = {}): Tensor {
  const reduction = { none: 0, mean: 1, sum: 2 }[options.reduction ?? 'mean'];
  return fromHandle(
    native.crossEntropy(logits.handle, target.handle, options.ignoreIndex ?? -100, reduction, options.labelSmoothing ?? 0),
  );
}

export function einsum(equation: string, ...operands: Tensor[]): Tensor {
  return fromHandle(
    native.einsum(
      equation,
      operands.map((t) => t.handle),
    ),
  );
}

export function outer(a: Tensor, b: Tensor): Tensor {
  return fromHandle(native.outer(a.handle, b.handle));
}

/** Draws `numSamples` indices per row from (unnormalised, non-negative) `probs`. */
export function multinomial(
  probs: Tensor,
  numSamples: number,
  options: { replacement?: boolean; generator?: Generator } = {},
): Tensor {
  return fromHandle(
    native.multinomial(probs.handle, numSamples, options.replacement ?? false, options.generator?.handle ?? null),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// autograd control (grad mode is thread-local: it applies to the thread, main or worker, that calls these)

function withGradMode<T>(enabled: boolean, fn: () => T): T {
  const previous = native.setGradEnabled(enabled);
  try {
    const result = fn();
    if (result instanceof Promise) {
      throw new TypeError('noGrad/enableGrad take a synchronous function: grad mode cannot follow an await');
    }
    return result;
  } finally {
    native.setGradEnabled(previous);
  }
}

/** Runs fn with gradient recording off (inference, optimizer updates, cache writes). */
export function noGrad<T>(fn: () => T): T {
  return withGradMode(false, fn);
}

export function enableGrad<T>(fn: () => T): T {
  return withGradMode(true, fn);
}

export function isGradEnabled(): boolean {
  return native.isGradEnabled();
}

export function setGradEnabled(enabled: boolean): void {
  native.setGradEnabled(enabled);
}

/** torch.autograd.grad: gradients of sum(outputs) w.r.t. inputs, without touching the inputs' .grad. */
export function grad(
  outputs: Tensor | readonly Tensor[],
  inputs: readonly Tensor[],
  options: { gradOutputs?: readonly Tensor[]; retainGraph?: boolean; createGraph?: boolean } = {},
): (Tensor | null)[] {
  const outs = Array.isArray(outputs) ? (outputs as readonly Tensor[]) : [outputs as Tensor];
  return native
    .gradOf(
      outs.map((t) => t.handle),
      inputs.map((t) => t.handle),
      options.gradOutputs ? options.gradOutputs.map((t) => t.handle) : null,
      options.retainGraph ?? null,
      options.createGraph ?? false,
    )
    .map((g) => (g === null ? null : fromHandle(g)));
}

// ---------------------------------------------------------------------------------------------------------------
// runtime

/** Intra-op threads for the calling thread's ops (OpenMP threads belong to the thread that sets them). */
export function setNumThreads(n: number): void {
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`setNumThreads: expected a positive integer, got ${n}`);
  native.setNumThreads(n);
}

export function getNumThreads(): number {
  return native.getNumThreads();
}

export const cuda = {
  isAvailable: (): boolean => native.cudaDeviceCount() > 0,
  deviceCount: (): number => native.cudaDeviceCount(),
};

/** Native tensor handles alive in this process (all threads): a leak detector for tests. */
export function liveTensorCount(): number {
  return native.liveHandleCount();
}

/** The C allocator's settings for tensor memory (native/src/core.cpp, "the C allocator"). */
export interface AllocatorTuning {
  /** glibc's malloc keeps blocks under mmapThreshold in its heap and up to trimThreshold bytes of free heap top. */
  applied: boolean;
  mmapThreshold: number | null;
  trimThreshold: number | null;
  /** Why not applied (the process's own malloc settings, another C library); null when applied. */
  reason: string | null;
}

/**
 * How the addon set up malloc for this process when it loaded: on glibc, blocks under 128 MiB stay in the heap and up
 * to 1 GiB of free heap is kept, so that a training step does not fault in its activations afresh each time.
 */
export function allocatorTuning(): AllocatorTuning {
  return native.allocatorTuning();
}

export function buildInfo(): { torchVersion: string; config: string; parallel: string } {
  return native.buildInfo();
}
