// Bicubic resizing of 8-bit images exactly as Pillow computes it (Image.resize(..., BICUBIC), libImaging/Resample.c),
// which the Qwen2-VL image processor of transformers calls: the same output bytes, so pixel values equal theirs.
//
// Separable: a horizontal pass (when the width changes) then a vertical pass (when the height changes), each an 8-bit
// image. Per output sample xx of a pass over `inSize` samples to `outSize`:
//   scale = inSize / outSize; filterscale = max(scale, 1) (downscaling widens the filter: antialiasing)
//   support = 2 * filterscale; center = (xx + 0.5) * scale
//   taps x in [trunc(center - support + 0.5) clamped to 0, trunc(center + support + 0.5) clamped to inSize)
//   w_x = cubic((x - center + 0.5) / filterscale), normalised to sum 1, then fixed point: k_x = round(w_x * 2^22)
//         (rounded half away from zero, as C's (int)(w ± 0.5))
//   out = clamp((2^21 + sum_x in_x * k_x) >> 22, 0, 255)
//   cubic(x) = (a+2)|x|³ - (a+3)|x|² + 1 for |x| < 1; a|x|³ - 5a|x|² + 8a|x| - 4a for |x| < 2; else 0; a = -0.5
const PRECISION_BITS = 22; // 32 - 8 - 2, as Pillow

function cubic(x: number): number {
  const a = -0.5;
  const t = Math.abs(x);
  if (t < 1) return ((a + 2) * t - (a + 3)) * t * t + 1;
  if (t < 2) return (((t - 5) * t + 8) * t - 4) * a;
  return 0;
}

/**
 * Pillow's precompute_coeffs + normalize_coeffs_8bpc: per output sample xx, its first tap firsts[xx], its tap count
 * counts[xx] and fixed-point weights[xx * taps + k] (taps: the widest sample's count).
 */
function coefficients(
  inSize: number,
  outSize: number,
): { firsts: Int32Array; counts: Int32Array; weights: Float64Array; taps: number } {
  const scale = inSize / outSize;
  const filterscale = Math.max(scale, 1);
  const support = 2 * filterscale;
  const taps = Math.ceil(support) * 2 + 1;
  const firsts = new Int32Array(outSize);
  const counts = new Int32Array(outSize);
  const weights = new Float64Array(outSize * taps);
  for (let xx = 0; xx < outSize; xx++) {
    const center = (xx + 0.5) * scale;
    const first = Math.max(Math.trunc(center - support + 0.5), 0);
    const count = Math.min(Math.trunc(center + support + 0.5), inSize) - first;
    let sum = 0;
    for (let x = 0; x < count; x++) {
      const w = cubic((x + first - center + 0.5) / filterscale);
      weights[xx * taps + x] = w;
      sum += w;
    }
    for (let x = 0; x < count; x++) {
      const normalised = sum !== 0 ? (weights[xx * taps + x] as number) / sum : (weights[xx * taps + x] as number);
      weights[xx * taps + x] = Math.trunc(
        normalised < 0 ? -0.5 + normalised * 2 ** PRECISION_BITS : 0.5 + normalised * 2 ** PRECISION_BITS,
      );
    }
    firsts[xx] = first;
    counts[xx] = count;
  }
  return { firsts, counts, weights, taps };
}

/** One pass over `pixels` (rows x cols x channels, row-major) along rows (axis 0) or columns (axis 1). */
function resamplePass(
  pixels: Uint8Array,
  [rows, cols, channels]: [number, number, number],
  axis: 0 | 1,
  outSize: number,
): Uint8Array {
  const { firsts, counts, weights, taps } = coefficients(axis === 0 ? rows : cols, outSize);
  const [outRows, outCols] = axis === 0 ? [outSize, cols] : [rows, outSize];
  const out = new Uint8Array(outRows * outCols * channels);
  const half = 1 << (PRECISION_BITS - 1);
  const unit = 2 ** PRECISION_BITS;
  const tapStride = axis === 0 ? cols * channels : channels; // from one tap's byte to the next along the pass
  for (let r = 0; r < outRows; r++)
    for (let c = 0; c < outCols; c++) {
      const xx = axis === 0 ? r : c;
      const first = firsts[xx] as number;
      const count = counts[xx] as number;
      const firstByte = axis === 0 ? (first * cols + c) * channels : (r * cols + first) * channels;
      const outByte = (r * outCols + c) * channels;
      for (let ch = 0; ch < channels; ch++) {
        let sum = half;
        for (let k = 0; k < count; k++)
          sum += (pixels[firstByte + k * tapStride + ch] as number) * (weights[xx * taps + k] as number);
        // Pillow's clip8: (sum >> 22) clamped to 0..255 (an arithmetic shift: floor of the quotient)
        out[outByte + ch] = Math.min(Math.max(Math.floor(sum / unit), 0), 255);
      }
    }
  return out;
}

/** An 8-bit image, height x width x channels, row-major (RGB: channels 3). */
export interface ImageBytes {
  data: Uint8Array;
  height: number;
  width: number;
  channels: number;
}

/** Pillow's Image.resize(image, (width, height), BICUBIC) on an 8-bit image: horizontal pass, then vertical. */
export function resizeBicubic(image: ImageBytes, height: number, width: number): ImageBytes {
  const { channels } = image;
  if (image.data.length !== image.height * image.width * channels)
    throw new RangeError(`image data has ${image.data.length} bytes, expected ${image.height} x ${image.width} x ${channels}`);
  if (!(Number.isInteger(height) && Number.isInteger(width) && height > 0 && width > 0))
    throw new RangeError(`resize target must be positive integers, got ${height} x ${width}`);
  let data = image.data;
  let cols = image.width;
  if (width !== image.width) {
    data = resamplePass(data, [image.height, cols, channels], 1, width);
    cols = width;
  }
  if (height !== image.height) data = resamplePass(data, [image.height, cols, channels], 0, height);
  return { data: data === image.data ? data.slice() : data, height, width, channels };
}
