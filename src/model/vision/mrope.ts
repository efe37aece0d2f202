// The multimodal RoPE (M-RoPE) of Qwen2.5-VL and Qwen3-VL: every token has three positions, temporal, height and
// width, as transformers' get_rope_index computes them, and the rotary angles take each frequency from one of the
// three (mrope_section, ./config.ts; mrope_interleaved, ./config-qwen3-vl.ts).
//
// Positions of one row (its real tokens; pads get 0). A run of text tokens counts up from the current position p on
// all three axes; a run of image tokens is one image of llm grid t x h x w (the patch grid / spatial_merge_size):
//   token (i, j, k) of the image: (p + i, p + j, p + k)                       i < t, j < h, k < w, row-major
// and the text after it starts at p + max(h, w) (transformers 5's rule; the same as max position + 1 for images).
//   rope delta of the row = max position + 1 - real tokens: a decode step at text position n takes n + delta on all
//   three axes. A text-only row's positions are 0..n-1 on every axis: ordinary RoPE.
//
// Angles: freqs_a = pos_a * inv_freq (a = t, h, w), [headDim/2]; frequency j takes the axis mropeAxes says; then
// cos/sin of cat(freqs, freqs) as ordinary RoPE (../rope.ts). Qwen2.5-VL's sections are contiguous: axis t for
// j < s_t, h for j < s_t + s_h, w after. Qwen3-VL's interleave (mrope_interleaved): h for j % 3 == 1 and j < 3 s_h,
// w for j % 3 == 2 and j < 3 s_w, t otherwise. Qwen3-VL's get_rope_index is Qwen2.5-VL's for images.
import type { DType, Tensor } from '../../torch/index.js';
import * as torch from '../../torch/index.js';
import type { ModelConfig } from '../config.js';
import { cosSinOfAngles, ropeInverseFrequencies } from '../rope.js';

/** What the M-RoPE functions read of a vision-language config. */
interface PlaceholderConfig {
  imageTokenId: number;
  vision: { spatialMergeSize: number };
}

/** An image's patch grid as the processor made it: frames (t), patch rows (h), patch columns (w). */
export type GridTHW = readonly [number, number, number];

/** The language tokens an image becomes: t * h * w patches merged by spatial_merge_size² (one token per merge block). */
export const imageTokenCount = (grid: GridTHW, spatialMergeSize: number): number =>
  (grid[0] * grid[1] * grid[2]) / (spatialMergeSize * spatialMergeSize);

export interface RopeIndex {
  /** [3, B, T] int64: temporal, height and width positions (pads 0). */
  positions: Tensor;
  /** Per row: max position + 1 - real tokens; the offset of a decode step's position after this prompt. */
  ropeDeltas: number[];
}

/**
 * get_rope_index: the 3-D positions of a batch whose image token runs (imageTokenId) are the images of `grids` in
 * order (row by row). `mask` rows: 1 = real token (default all real). Errors name the row and the image when a run
 * does not match its image's token count or the images run out or are left over.
 */
export function ropeIndex(
  ids: readonly (readonly number[])[],
  mask: readonly (readonly number[])[] | null,
  grids: readonly GridTHW[],
  config: PlaceholderConfig,
): { positions: number[][][]; ropeDeltas: number[] } {
  const merge = config.vision.spatialMergeSize;
  const positions: number[][][] = [0, 1, 2].map(() => ids.map((row) => row.map(() => 0)));
  const ropeDeltas: number[] = [];
  let image = 0;
  ids.forEach((row, b) => {
    const real = row.flatMap((_, t) => ((mask?.[b]?.[t] ?? 1) !== 0 ? [t] : []));
    let p = 0;
    let maxPosition = -1;
    const axisRows = positions.map((axis) => axis[b] as number[]);
    const put = (t: number, axes: [number, number, number]) => {
      axisRows.forEach((axisRow, a) => {
        axisRow[t] = axes[a] as number;
      });
      maxPosition = Math.max(maxPosition, ...axes);
    };
    for (let r = 0; r < real.length; ) {
      const t0 = real[r] as number;
      if (row[t0] !== config.imageTokenId) {
        put(t0, [p, p, p]);
        p += 1;
        r += 1;
        continue;
      }
      let run = 0;
      while (r + run < real.length && row[real[r + run] as number] === config.imageTokenId) run++;
      const grid = grids[image];
      if (grid === undefined)
        throw new RangeError(`row ${b}: image tokens at position ${t0}, but only ${grids.length} image grid(s) were given`);
      const [gt, gh, gw] = [grid[0], grid[1] / merge, grid[2] / merge];
      if (run !== gt * gh * gw)
        throw new RangeError(
          `row ${b}: a run of ${run} image tokens at position ${t0}, but image ${image} (grid ${grid.join('x')}) makes ${gt * gh * gw}`,
        );
      for (let i = 0; i < gt; i++)
        for (let j = 0; j < gh; j++)
          for (let k = 0; k < gw; k++) put(real[r + (i * gh + j) * gw + k] as number, [p + i, p + j, p + k]);
      p += Math.max(gh, gw);
      r += run;
      image += 1;
    }
    ropeDeltas.push(maxPosition + 1 - real.length);
  });
  if (image !== grids.length) throw new RangeError(`${grids.length} image grids given, but the token ids hold ${image} image(s)`);
  return { positions, ropeDeltas };
}

/** ropeIndex over tensors: ids and mask [B, T] → positions [3, B, T] int64 and the rope deltas. */
export function ropeIndexOf(ids: Tensor, mask: Tensor | null, grids: readonly GridTHW[], config: PlaceholderConfig): RopeIndex {
  const { positions, ropeDeltas } = ropeIndex(
    ids.toArray() as number[][],
    mask === null ? null : (mask.long().toArray() as number[][]),
    grids,
    config,
  );
  return { positions: torch.tensor(positions, { dtype: 'int64', device: ids.device }), ropeDeltas };
}

/** The axis (0 t, 1 h, 2 w) each of the headDim / 2 frequencies takes its position from (see the header). */
export function mropeAxes(section: readonly [number, number, number], interleaved: boolean): number[] {
  const [st, sh, sw] = section;
  return Array.from({ length: st + sh + sw }, (_, j) => {
    if (!interleaved) return j < st ? 0 : j < st + sh ? 1 : 2;
    return j % 3 === 1 && j < 3 * sh ? 1 : j % 3 === 2 && j < 3 * sw ? 2 : 0;
  });
}

/**
 * The language model's M-RoPE tables: cos, sin [B, 1, T, headDim] in `dtype` for positions [3, B, T] (applyRotary's
 * layout). inv_freq is the default RoPE's, computed once.
 */
export class MultimodalRotaryEmbedding {
  readonly #invFreq: Tensor;
  /** [headDim / 2] bool: the frequencies that take the height (width) position; the others the temporal one. */
  readonly #isHeight: Tensor;
  readonly #isWidth: Tensor;

  constructor(
    config: { text: ModelConfig; mropeSection: readonly [number, number, number]; mropeInterleaved?: boolean },
    device: string,
  ) {
    const { invFreq } = ropeInverseFrequencies(config.text.rope, config.text.headDim, config.text.maxPositionEmbeddings);
    this.#invFreq = torch.keep(device === 'cpu' ? invFreq : invFreq.to({ device }));
    const axes = mropeAxes(config.mropeSection, config.mropeInterleaved ?? false);
    const mask = (axis: number) =>
      torch.keep(
        torch.tensor(
          axes.map((a) => (a === axis ? 1 : 0)),
          { dtype: 'bool', device },
        ),
      );
    this.#isHeight = mask(1);
    this.#isWidth = mask(2);
  }

  cosSin(positions: Tensor, dtype: DType): { cos: Tensor; sin: Tensor } {
    const freqs = positions.float().unsqueeze(-1).mul(this.#invFreq); // [3, B, T, headDim/2]
    const [t, h, w] = [0, 1, 2].map((a) => freqs.select(0, a)) as [Tensor, Tensor, Tensor];
    const angles = torch.where(this.#isWidth, w, torch.where(this.#isHeight, h, t));
    return cosSinOfAngles(angles.unsqueeze(1), 1, dtype);
  }

  dispose(): void {
    this.#invFreq.dispose();
    this.#isHeight.dispose();
    this.#isWidth.dispose();
  }
}
