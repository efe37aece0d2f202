// Rotary position embeddings (RoPE) as transformers computes them: inverse frequencies for each rope type of
// modeling_rope_utils (default, linear, dynamic NTK, llama3, yarn), step by step in float32 so that inv_freq matches
// bit for bit, and their application to queries and keys:
//
//   freqs = pos * inv_freq                  [B, T, headDim/2]      inv_freq_i = theta^(-2i/headDim) (default)
//   emb = cat(freqs, freqs)                 [B, T, headDim]
//   rope(x) = x * cos(emb) * s + rotate_half(x) * sin(emb) * s      rotate_half(x) = [-x2, x1], s = attention scaling
import type { DType, Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import type { ModelConfig, RopeConfig } from './config.js';

/** Inverse frequencies [headDim/2] (float32) and the cos/sin scale, for sequences up to `seqLen` (dynamic only). */
export function ropeInverseFrequencies(
  rope: RopeConfig,
  headDim: number,
  maxPositionEmbeddings: number,
  seqLen?: number,
): { invFreq: Tensor; attentionScaling: number } {
  return torch.scope(() => {
    const dim = headDim;
    const exponents = torch.arange(0, dim, 2).float().div(dim); // [dim/2]: 0, 2/dim, 4/dim, ...
    const powerOf = (base: number) => torch.full(exponents.shape, base).pow(exponents); // base ** exponents
    const s = rope.scaling;
    switch (s.type) {
      case 'default':
        return { invFreq: powerOf(rope.theta).reciprocal(), attentionScaling: 1 };
      case 'linear':
        return { invFreq: powerOf(rope.theta).reciprocal().div(s.factor), attentionScaling: 1 };
      case 'dynamic': {
        // base' = base * (factor * L / maxPos - (factor - 1)) ** (dim / (dim - 2)), L = max(seqLen, maxPos)
        const length = Math.max(seqLen ?? maxPositionEmbeddings, maxPositionEmbeddings);
        const base = rope.theta * ((s.factor * length) / maxPositionEmbeddings - (s.factor - 1)) ** (dim / (dim - 2));
        return { invFreq: powerOf(base).reciprocal(), attentionScaling: 1 };
      }
      case 'llama3': {
        // wavelengths above original/lowFreqFactor are divided by factor, below original/highFreqFactor kept,
        // and in between interpolated by smooth = (original / wavelen - low) / (high - low).
        const invFreq = powerOf(rope.theta).reciprocal();
        const lowFreqWavelen = s.originalMaxPositionEmbeddings / s.lowFreqFactor;
        const highFreqWavelen = s.originalMaxPositionEmbeddings / s.highFreqFactor;
        const wavelen = invFreq.reciprocal().mul(2 * Math.PI);
        const scaled = torch.where(wavelen.gt(lowFreqWavelen), invFreq.div(s.factor), invFreq);
        const smooth = wavelen
          .reciprocal()
          .mul(s.originalMaxPositionEmbeddings)
          .sub(s.lowFreqFactor)
          .div(s.highFreqFactor - s.lowFreqFactor);
        const smoothed = smooth.neg().add(1).mul(scaled).div(s.factor).add(smooth.mul(scaled));
        const medium = wavelen.lt(highFreqWavelen).logicalNot().logicalAnd(wavelen.gt(lowFreqWavelen).logicalNot());
        return { invFreq: torch.where(medium, smoothed, scaled), attentionScaling: 1 };
      }
      case 'yarn': {
        const mscale = (scale: number, m = 1) => (scale <= 1 ? 1 : 0.1 * m * Math.log(scale) + 1);
        const attentionScaling =
          s.attentionFactor ??
          (s.mscale && s.mscaleAllDim ? mscale(s.factor, s.mscale) / mscale(s.factor, s.mscaleAllDim) : mscale(s.factor));
        // dimension index at which a wavelength completes `rotations` turns over the original context
        const correctionDim = (rotations: number) =>
          (dim * Math.log(s.originalMaxPositionEmbeddings / (rotations * 2 * Math.PI))) / (2 * Math.log(rope.theta));
        let low = correctionDim(s.betaFast);
        let high = correctionDim(s.betaSlow);
        if (s.truncate) {
          low = Math.floor(low);
          high = Math.ceil(high);
        }
        low = Math.max(low, 0);
        high = Math.min(high, dim - 1);
        if (low === high) high += 0.001;
        const posFreqs = powerOf(rope.theta);
        const extrapolation = posFreqs.reciprocal();
        const interpolation = posFreqs.mul(s.factor).reciprocal();
        const ramp = torch
          .arange(0, dim / 2, 1, { dtype: 'float32' })
          .sub(low)
          .div(high - low)
          .clamp(0, 1);
        const extrapolationFactor = ramp.neg().add(1);
        const invFreq = interpolation.mul(extrapolationFactor.neg().add(1)).add(extrapolation.mul(extrapolationFactor));
        return { invFreq, attentionScaling };
      }
    }
  });
}

/**
 * cos, sin [B, 1, T, headDim] for integer positions [B, T]: emb = cat(freqs, freqs), freqs = pos * inv_freq; sin comes
 * with its first half negated, so that rotate_half(x) * sin(emb) = roll(x, headDim/2) * sin (see applyRotary).
 */
function rotaryCosSin(invFreq: Tensor, attentionScaling: number, positions: Tensor, dtype: DType): { cos: Tensor; sin: Tensor } {
  const freqs = positions.float().unsqueeze(-1).mul(invFreq).unsqueeze(1); // [B, 1, T, headDim/2], float32
  return cosSinOfAngles(freqs, attentionScaling, dtype);
}

/**
 * cos, sin [..., headDim] of rotation angles [..., headDim/2] (float32), laid out for applyRotary: emb = cat(freqs,
 * freqs), sin with its first half negated. Also serves the multimodal RoPE (./vision/mrope.ts), whose angles mix axes.
 */
export function cosSinOfAngles(freqs: Tensor, attentionScaling: number, dtype: DType): { cos: Tensor; sin: Tensor } {
  const scale = (t: Tensor) => (attentionScaling === 1 ? t : t.mul(attentionScaling));
  const cos = scale(freqs.cos());
  const sin = scale(freqs.sin());
  return { cos: torch.cat([cos, cos], -1).to(dtype), sin: torch.cat([sin.neg(), sin], -1).to(dtype) };
}

/** x * cos + rotate_half(x) * sin(emb), rotate_half(x) = [-x2, x1] = roll(x, half) * [-1, 1] (the sign is in `sin`). */
export function applyRotary(x: Tensor, cos: Tensor, sin: Tensor): Tensor {
  return x.mul(cos).add(x.roll(x.size(-1) / 2, -1).mul(sin));
}

/** Positions per chunk of the batch-invariant mode's table (RotaryEmbedding.tableCosSin). */
const TABLE_CHUNK = 256;

/**
 * A model's RoPE tables: inv_freq computed once and kept, except for dynamic NTK scaling, whose base grows with the
 * longest position past maxPositionEmbeddings (as transformers).
 */
export class RotaryEmbedding {
  readonly #config: Pick<ModelConfig, 'rope' | 'headDim' | 'maxPositionEmbeddings'>;
  readonly #device: string;
  #fixed: { invFreq: Tensor; attentionScaling: number } | null = null;
  /** cos, sin [positions, headDim] float32 for positions 0.. (batch-invariant mode, see tableCosSin). */
  #table: { cos: Tensor; sin: Tensor } | null = null;

  constructor(config: Pick<ModelConfig, 'rope' | 'headDim' | 'maxPositionEmbeddings'>, device: string) {
    this.#config = config;
    this.#device = device;
  }

  /** cos, sin [B, 1, T, headDim] in `dtype` for integer positions [B, T] (see rotaryCosSin). */
  cosSin(positions: Tensor, dtype: DType): { cos: Tensor; sin: Tensor } {
    const { invFreq, attentionScaling } = this.#inverseFrequencies(positions);
    return rotaryCosSin(invFreq, attentionScaling, positions, dtype);
  }

  /**
   * cosSin's values read from a table of positions (the batch-invariant mode, ./batch-invariant.ts): computed per
   * forward, an element's cos and sin take ATen's vectorized or scalar code by where it falls in the batch's tensor,
   * and the two round differently. The table covers positions 0 .. `limit` − 1 (a bound on `positions`, known without
   * reading them back), grown in chunks of TABLE_CHUNK positions that are each computed alike, so a position's entry
   * does not depend on the table's size. Dynamic NTK scaling is refused (its frequencies follow the longest position).
   */
  tableCosSin(positions: Tensor, dtype: DType, limit: number): { cos: Tensor; sin: Tensor } {
    if (this.#config.rope.scaling.type === 'dynamic')
      throw new Error('the batch-invariant forward does not take dynamic NTK RoPE (its frequencies follow the batch)');
    const have = this.#table?.cos.size(0) ?? 0;
    if (limit > have) {
      const { invFreq, attentionScaling } = this.#inverseFrequencies(positions);
      const chunks = Array.from({ length: Math.ceil((limit - have) / TABLE_CHUNK) }, (_, c) => {
        const first = have + c * TABLE_CHUNK;
        const chunk = torch.arange(first, first + TABLE_CHUNK, 1, { device: this.#device }).view([1, TABLE_CHUNK]);
        return rotaryCosSin(invFreq, attentionScaling, chunk, 'float32'); // [1, 1, TABLE_CHUNK, headDim]
      });
      const grown = (old: Tensor | undefined, part: 'cos' | 'sin') =>
        torch.keep(torch.cat([...(old ? [old] : []), ...chunks.map((c) => c[part].view([TABLE_CHUNK, -1]))], 0));
      const table = { cos: grown(this.#table?.cos, 'cos'), sin: grown(this.#table?.sin, 'sin') };
      this.#table?.cos.dispose();
      this.#table?.sin.dispose();
      this.#table = table;
    }
    const [batch, length] = positions.shape as [number, number];
    const index = positions.reshape([-1]);
    const read = (table: Tensor) => table.indexSelect(0, index).view([batch, 1, length, -1]).to({ dtype });
    const table = this.#table as { cos: Tensor; sin: Tensor };
    return { cos: read(table.cos), sin: read(table.sin) };
  }

  /** inv_freq for these positions: fixed, except dynamic NTK which grows with the longest position (as transformers). */
  #inverseFrequencies(positions: Tensor): { invFreq: Tensor; attentionScaling: number } {
    const { rope, headDim, maxPositionEmbeddings } = this.#config;
    const compute = (seqLen?: number) => {
      const r = ropeInverseFrequencies(rope, headDim, maxPositionEmbeddings, seqLen);
      const device = this.#device;
      return device === 'cpu' ? r : { invFreq: r.invFreq.to({ device }), attentionScaling: r.attentionScaling };
    };
    if (rope.scaling.type === 'dynamic') {
      const seqLen = positions.max().item() + 1;
      if (seqLen > maxPositionEmbeddings) return compute(seqLen);
    }
    if (this.#fixed === null) {
      const r = compute();
      this.#fixed = { invFreq: torch.keep(r.invFreq), attentionScaling: r.attentionScaling };
    }
    return this.#fixed;
  }

  /** Frees the kept inv_freq (computed again if used after). */
  dispose(): void {
    this.#fixed?.invFreq.dispose();
    this.#fixed = null;
    this.#table?.cos.dispose();
    this.#table?.sin.dispose();
    this.#table = null;
  }
}
