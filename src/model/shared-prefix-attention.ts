// Shared-prefix attention: a packed batch in which many rows continue a few shared prompts (GRPO's groups: one
// prompt, n responses), so that each prompt runs through the trunk once.
//
//   inputIds [1, G*P + B*S] = G prefixes of P tokens, then B continuations of S tokens
//   prefix g:        softmax(q_g k_g^T / sqrt(d) + causal pad mask) v_g                          [G, h, P, d]
//   continuation b:  softmax(q_b [k_p; k_b]^T / sqrt(d) + mask) [v_p; v_b],  p = rowPrefix[b]     [B, h, S, d]
//                    (mask: all real keys of prefix p, then causal over b's own real keys)
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { attention } from './attention.js';
import { causalPadMask } from './attention-mask.js';

/**
 * A packed batch in which many rows continue a few shared prompts (GRPO's groups: one prompt, n responses), so each
 * prompt runs through the trunk once. inputIds is [1, G*P + B*S]: G prefixes of P tokens, then B continuations of S
 * tokens; continuation b attends to all of prefix rowPrefix[b] (its real tokens) and causally to itself. Everything
 * but attention is per token, so the layers run on the packed tokens unchanged (./training.ts builds it).
 */
export interface SharedPrefixLayout {
  /** [G, P] 1 = real prefix token (left padding). */
  prefixMask: Tensor;
  /** [B, S] 1 = real continuation token (right padding). */
  suffixMask: Tensor;
  /** [B] int64: the prefix each continuation row extends. */
  rowPrefix: Tensor;
}

/** The packed layout's sizes and attention masks (true = attend), made once per pass. */
export interface SharedPrefixPass {
  groups: number;
  prefixLength: number;
  rows: number;
  suffixLength: number;
  rowPrefix: Tensor;
  /** [G, 1, P, P] causal over real prefix keys (and the diagonal). */
  prefixMask: Tensor;
  /** [B, 1, S, P + S]: the row's prefix (real keys), then causal over its own real keys (and the diagonal). */
  suffixMask: Tensor;
}

/** Checks `layout` against the packed inputIds' `tokens` and builds its masks (once per forward). */
export function sharedPrefixPass(layout: SharedPrefixLayout, tokens: number): SharedPrefixPass {
  const { prefixMask, suffixMask, rowPrefix } = layout;
  if (prefixMask.ndim !== 2 || suffixMask.ndim !== 2 || rowPrefix.ndim !== 1 || rowPrefix.size(0) !== suffixMask.size(0)) {
    throw new TypeError(
      `forward: sharedPrefix needs prefixMask [G, P], suffixMask [B, S] and rowPrefix [B], got ` +
        `[${prefixMask.shape.join(', ')}], [${suffixMask.shape.join(', ')}] and [${rowPrefix.shape.join(', ')}]`,
    );
  }
  const [groups, prefixLength] = prefixMask.shape as [number, number];
  const [rows, suffixLength] = suffixMask.shape as [number, number];
  if (groups * prefixLength + rows * suffixLength !== tokens) {
    throw new TypeError(
      `forward: sharedPrefix packs ${groups}×${prefixLength} + ${rows}×${suffixLength} tokens, inputIds has ${tokens}`,
    );
  }
  const prefixReal = prefixMask.bool();
  const suffixReal = suffixMask.bool();
  const rowIndex = rowPrefix.long();
  const toPrefix = prefixReal
    .indexSelect(0, rowIndex)
    .view([rows, 1, 1, prefixLength])
    .expand([rows, 1, suffixLength, prefixLength]);
  return {
    groups,
    prefixLength,
    rows,
    suffixLength,
    rowPrefix: rowIndex,
    prefixMask: causalPadMask(prefixReal),
    suffixMask: torch.cat([toPrefix, causalPadMask(suffixReal)], -1),
  };
}

/** Packed [1, h, G*P + B*S, d] → prefixes [G, h, P, d] and continuations [B, h, S, d]. */
function splitPacked(t: Tensor, p: SharedPrefixPass): { prefix: Tensor; suffix: Tensor } {
  const [, h, , d] = t.shape as [number, number, number, number];
  const part = (start: number, n: number, length: number) =>
    t
      .narrow(2, start, n * length)
      .reshape([h, n, length, d])
      .transpose(0, 1);
  return {
    prefix: part(0, p.groups, p.prefixLength),
    suffix: part(p.groups * p.prefixLength, p.rows, p.suffixLength),
  };
}

/**
 * Attention over a packed batch: q [1, heads, G*P + B*S, d] and k, v [1, kvHeads, G*P + B*S, d] (after RoPE) →
 * [1, G*P + B*S, heads*d] in packed order, ready for o_proj. Prefixes attend among themselves; each continuation to
 * its prefix's keys and values, then to its own.
 */
export function sharedPrefixAttention(q: Tensor, k: Tensor, v: Tensor, pass: SharedPrefixPass): Tensor {
  const [qs, ks, vs] = [splitPacked(q, pass), splitPacked(k, pass), splitPacked(v, pass)];
  const ofRow = (t: Tensor) => t.indexSelect(0, pass.rowPrefix);
  const prefixOut = attention(qs.prefix, ks.prefix, vs.prefix, pass.prefixMask);
  const suffixOut = attention(
    qs.suffix,
    torch.cat([ofRow(ks.prefix), ks.suffix], 2),
    torch.cat([ofRow(vs.prefix), vs.suffix], 2),
    pass.suffixMask,
  );
  const [, heads, , headDim] = q.shape as [number, number, number, number];
  const merge = (t: Tensor) => t.transpose(1, 2).reshape([1, -1, heads * headDim]);
  return torch.cat([merge(prefixOut), merge(suffixOut)], 1);
}
