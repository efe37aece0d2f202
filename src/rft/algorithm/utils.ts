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
