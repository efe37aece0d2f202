// Masked reductions and small helpers shared by the algorithm modules (Trinity-RFT `trinity/algorithm/utils.py`,
// itself from verl's `torch_functional.py`). Masks are [B, T] bool or float tensors: 1/true = a response token.
//
//   maskedSum(x, m)      = Σ x·m
//   maskedMean(x, m)     = Σ x·m / (Σ m + 1e-8)
//   maskedVar(x, m)      = maskedMean((x − maskedMean(x, m))², m) · n/(n − 1),  n = Σ m   (Bessel-corrected)
//   maskedWhiten(x, m)   = (x − maskedMean(x, m)) · rsqrt(maskedVar(x, m) + 1e-8)
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';

const MEAN_EPS = 1e-8;

/** The mask in the floating dtype of `like` (bool masks become 0/1). */
export function floatMask(mask: Tensor, like: Tensor): Tensor {
  return mask.dtype === like.dtype ? mask : mask.to({ dtype: like.dtype });
}

export function maskedSum(values: Tensor, mask: Tensor, dim?: number): Tensor {
  return torch.scope(() => values.mul(floatMask(mask, values)).sum(dim));
}

export function maskedMean(values: Tensor, mask: Tensor, dim?: number): Tensor {
  return torch.scope(() => {
    const m = floatMask(mask, values);
    return values.mul(m).sum(dim).div(m.sum(dim).add(MEAN_EPS));
  });
}

/**
 * A batch's rows split into usual (on-policy) and expert rows as index lists, for losses that treat them apart (mix,
 * mix_chord, entropy mix). Made on the host from what the caller knows (expertRows: the trainer, before its
 * micro-batches run) the split needs no read of the mask: selecting rows by a bool mask reads it back to size the
 * result, and on a GPU that waits for the queued forward.
 */
export interface ExpertRows {
  /** [U] int64: the rows that are not expert data, ascending. */
  readonly usual: Tensor;
  /** [E] int64: the expert rows, ascending. */
  readonly expert: Tensor;
}

/** ExpertRows from each row's flag, on `device` (a batch without expert rows needs no upload). */
export function expertRows(isExpert: readonly boolean[], device = 'cpu'): ExpertRows {
  const on = device === 'cpu' ? {} : { device };
  const rows = (expert: boolean) => isExpert.flatMap((e, i) => (e === expert ? [i] : []));
  const index = (list: number[]) =>
    list.length === isExpert.length
      ? torch.arange(list.length, { dtype: 'int64', ...on })
      : list.length === 0
        ? torch.zeros([0], { dtype: 'int64', ...on })
        : torch.tensor(list, { dtype: 'int64', ...on });
  return { usual: index(rows(false)), expert: index(rows(true)) };
}

/** ExpertRows of a [B] expert mask on the device (reads the mask back; prefer expertRows where the flags are known). */
export function expertRowsOf(expertMask: Tensor): ExpertRows {
  const expert = expertMask.bool();
  return { usual: expert.logicalNot().nonzero().squeeze(-1), expert: expert.nonzero().squeeze(-1) };
}

/** Checks that `split` covers rows 0..B-1 of a B-row input by count (its indices are the caller's). */
export function checkExpertRows(split: ExpertRows, rows: number, what: string): void {
  const [usual, expert] = [split.usual.size(0), split.expert.size(0)];
  if (usual + expert !== rows)
    throw new RangeError(`${what}: expertRows splits ${usual} usual + ${expert} expert rows, the input has ${rows}`);
}

/** Variance over the masked elements with Bessel's correction (needs at least two masked elements). */
export function maskedVar(values: Tensor, mask: Tensor, unbiased = true): Tensor {
  return torch.scope(() => {
    const mean = maskedMean(values, mask);
    const variance = maskedMean(values.sub(mean).square(), mask);
    if (!unbiased) return variance;
    const n = floatMask(mask, values).sum().item();
    if (n < 2) throw new Error(`maskedVar: the mask selects ${n} element(s); an unbiased variance needs at least 2`);
    return variance.mul(n / (n - 1));
  });
}

/** Whitens `values` with the mean and variance of its masked elements (batch whitening, as verl/OpenRLHF). */
export function maskedWhiten(values: Tensor, mask: Tensor, shiftMean = true): Tensor {
  return torch.scope(() => {
    const mean = maskedMean(values, mask);
    const whitened = values.sub(mean).mul(maskedVar(values, mask).add(MEAN_EPS).rsqrt());
    return shiftMean ? whitened : whitened.add(mean);
  });
}

/**
 * Reverse discounted cumulative sum along the last dimension of x [B, T] (no gradient):
 *   out[:, t] = x[:, t] + γ · out[:, t+1],   out[:, T] = 0
 * Discounted returns (REINFORCE++) and GAE (with γλ on the TD errors). Runs as one pass over a CPU copy: T sequential
 * tensor ops would cost ~T·10 µs of call overhead.
 */
export function discountedReverseCumsum(x: Tensor, gamma: number): Tensor {
  if (x.ndim !== 2) throw new Error(`discountedReverseCumsum: expected a [B, T] tensor, got shape [${x.shape.join(', ')}]`);
  return torch.scope(() => {
    if (gamma === 1) return torch.noGrad(() => x.flip(-1).cumsum(-1).flip(-1));
    const [rows, cols] = x.shape as [number, number];
    const data = x.detach().to({ dtype: 'float64', device: 'cpu' }).contiguous().toTypedArray() as Float64Array;
    const out = new Float64Array(rows * cols);
    for (let b = 0; b < rows; b++) {
      let running = 0;
      for (let t = cols - 1; t >= 0; t--) {
        running = (data[b * cols + t] as number) + gamma * running;
        out[b * cols + t] = running;
      }
    }
    return torch.tensor(out, { shape: [rows, cols], dtype: 'float64' }).to({ dtype: x.dtype, device: x.device });
  });
}
