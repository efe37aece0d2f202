// The inference layout: how a model meant for decoding keeps its weights (see WeightLayout), and which of its
// projections run on the packed-weight kernel (torch.packedLinear, native/src/kernels.cpp) instead of BLAS.
//
//   qkv_proj     = [q_proj; k_proj; v_proj]   [(heads + 2 kvHeads) headDim, hidden], column-major
//   gate_up_proj = [gate_proj; up_proj]       [2 intermediate, hidden], column-major
//   o_proj, down_proj, lm_head               column-major (a tied lm_head is embed_tokens, so that too)
// q_proj ... up_proj stay parameters under their Hugging Face names: views into the fused matrices.
// A mixture of experts' sparse layers keep their router and experts row-major and unfused; the experts' products
// (a few rows each in a decode step) run torch.packedLinear on packed copies like the other projections.
import type { DType, Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { ModelConfig } from './config.js';
import type { Linear } from './linear.js';

/**
 * How parameters sit in memory. 'training': one contiguous tensor per Hugging Face weight. 'inference': each layer's
 * q|k|v weights are one matrix and gate|up another, and every projection matrix (and an untied lm_head) is stored
 * transposed, i.e. column-major; the parameters stay views with Hugging Face names, shapes and values (save, copy_
 * and LoRA work unchanged). A layer then runs 4 matmuls instead of 7, and a product with one row per sequence
 * (decoding) reads the weights in storage order, which CPU BLAS streams faster. On a CPU with AVX2, products of 1 to
 * PACKED_MAX_ROWS rows (decoding) run torch.packedLinear instead, on a packed copy of each fused matrix and of the LM
 * head, which streams a weight faster than BLAS does for so few rows; prefill (more rows) stays with BLAS where BLAS
 * multiplies at the CPU's full width (see packedRowLimit). The copies cost the weights' size again, made on first use.
 * Measurements: bench/README.md (bench:model, bench:packed-linear).
 */
export type WeightLayout = 'training' | 'inference';

/** Rows per product up to which a packed weight is used (decoding; see WeightLayout). */
const PACKED_MAX_ROWS = 64;

/** What decides where the inference layout's products run on a CPU with torch.packedLinear (see packedRowLimit). */
export interface PackedRowsCpu {
  /** libtorch multiplies bfloat16 fast here (torch.cpuHasBf16Matmul: oneDNN). */
  bf16Matmul: boolean;
  /** torch.packedLinearIsa('float32'). */
  float32Isa: torch.PackedLinearIsa | 'none';
  /** libtorch's float32 BLAS runs AVX2 code on this AVX-512 CPU (torch.blasHoldsToAvx2: MKL held to AVX2). */
  blasHoldsToAvx2: boolean;
}

/** This CPU's answers (they follow libtorch's settings: ATEN_CPU_CAPABILITY, oneDNN's switch). */
export const packedRowsCpu = (): PackedRowsCpu => ({
  bf16Matmul: torch.cpuHasBf16Matmul(),
  float32Isa: torch.packedLinearIsa('float32'),
  blasHoldsToAvx2: torch.blasHoldsToAvx2(),
});

/**
 * Rows per product up to which the inference layout runs torch.packedLinear for weights of `dtype`: PACKED_MAX_ROWS
 * (decoding; prefill goes to libtorch) unless libtorch's product is the slower one at any row count: bfloat16 without
 * a fast libtorch bf16 product (its reference loops; where oneDNN has one, the kernel's AVX512-BF16 dot products are
 * ahead up to ~48 rows and about even at 64), and float32 where the kernel runs AVX-512 and libtorch's BLAS holds to
 * AVX2 (MKL capped by MKL_ENABLE_INSTRUCTIONS, or MKL's own vendor check on AMD CPUs with TRINITY_MKL_AVX512=off: at
 * 1,024 rows the kernel measured ~2x its AVX2 sgemm on Zen 5, and 0.75-1.0x its AVX-512 one, bench/README.md).
 */
export function packedRowLimit(dtype: DType, cpu: PackedRowsCpu): number {
  const anyRows =
    dtype === 'bfloat16' ? !cpu.bf16Matmul : dtype === 'float32' && cpu.float32Isa === 'avx512' && cpu.blasHoldsToAvx2;
  return anyRows ? Number.POSITIVE_INFINITY : PACKED_MAX_ROWS;
}

/** Column-major copy [out, in] of row-major weights stacked along dim 0 (one matrix for several projections). */
const columnMajor = (weights: Tensor[]): Tensor =>
  (weights.length === 1 ? (weights[0] as Tensor) : torch.cat(weights, 0)).t().contiguous().t();

/**
 * Rewrites `parameters` (Hugging Face names) in the inference layout (see WeightLayout); returns, per layer, the
 * fused q|k|v and gate|up projections. The replaced tensors are disposed.
 */
export function fuseForInference(config: ModelConfig, parameters: Map<string, Tensor>): { qkv: Linear; gateUp: Linear | null }[] {
  const get = (name: string) => parameters.get(name) as Tensor;
  /** One column-major matrix for `modules`; each module's weight (and bias) becomes a view into it. */
  const fuse = (modules: string[]): Linear =>
    torch.noGrad(() => {
      const weights = modules.map((m) => get(`${m}.weight`));
      const weight = torch.keep(columnMajor(weights));
      const hasBias = parameters.has(`${modules[0]}.bias`);
      const bias = hasBias ? torch.keep(torch.cat(modules.map((m) => get(`${m}.bias`)))) : null;
      let offset = 0;
      modules.forEach((m, i) => {
        const rows = (weights[i] as Tensor).size(0);
        for (const [suffix, fused] of [
          ['weight', weight],
          ['bias', bias],
        ] as const) {
          if (fused === null) continue;
          const old = get(`${m}.${suffix}`);
          parameters.set(`${m}.${suffix}`, torch.keep(fused.narrow(0, offset, rows)));
          old.dispose();
        }
        offset += rows;
      });
      return { weight, bias, adapter: null, packed: null };
    });
  const layers = Array.from({ length: config.numHiddenLayers }, (_, i) => {
    const l = `model.layers.${i}`;
    const qkv = fuse([`${l}.self_attn.q_proj`, `${l}.self_attn.k_proj`, `${l}.self_attn.v_proj`]);
    fuse([`${l}.self_attn.o_proj`]).weight.dispose();
    if (config.moe?.sparseLayers[i]) return { qkv, gateUp: null };
    const gateUp = fuse([`${l}.mlp.gate_proj`, `${l}.mlp.up_proj`]);
    fuse([`${l}.mlp.down_proj`]).weight.dispose();
    return { qkv, gateUp };
  });
  // the LM head reads its matrix in storage order too; a tied one is the embedding, whose lookups then gather
  // strided columns (one row of hidden values per token, against a vocabulary-sized product per decoded row)
  fuse([config.tieWordEmbeddings ? 'model.embed_tokens' : 'lm_head']).weight.dispose();
  return layers;
}

/**
 * Gives each projection a packed weight for torch.packedLinear when the weights are on a CPU that runs it (made on
 * first use; see ./linear.ts). Returns the projections that got one, whose packed weights the caller disposes.
 */
export function attachPackedWeights(projections: readonly Linear[], dtype: DType, device: string): Linear[] {
  if (device !== 'cpu' || !torch.packedLinearSupported()) return [];
  const maxRows = packedRowLimit(dtype, packedRowsCpu());
  for (const l of projections) l.packed = { weight: null, version: -1, maxRows, fixedOrder: false };
  return [...projections];
}
