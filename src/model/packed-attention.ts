// Packed rows (verl's and Trinity's use_remove_padding): a batch's rows concatenated end to end without pads into one
// sequence, attention kept within each row, a GRPO group's shared prompt computed once. It extends the shared-prefix
// layout (./shared-prefix-attention.ts) by dropping its pads: every prefix and continuation has its own length.
//
//   inputIds [1, Σ_g p_g + Σ_b s_b] = G prefixes (group g: p_g tokens), then B continuations (row b: s_b tokens)
//   prefix g:        causal over its own p_g tokens
//   continuation b:  all p_g tokens of its prefix g = rowPrefix[b], then causal over its own s_b tokens
// Position ids restart per row (the caller gives them: prefix 0..p_g−1, continuation p_g..p_g+s_b−1). Everything but
// attention is per token, so the layers run on the packed tokens unchanged; no pad is ever computed outside attention.
//
// Attention itself is block-diagonal causal ("varlen"). libtorch's flash-varlen kernel (cumulative sequence lengths)
// is CUDA-only and the addon does not bind it, so on every device it runs as here: the segments (prefixes and
// continuations) are sorted by length and cut into buckets; a bucket gathers its n segments' queries into
// [n, h, Lq, d] and their keys (the context prefix, then the segment itself) into [n, kvh, Lc + Lq, d] with one
// indexSelect each, runs one masked attention (./attention.ts), and the packed output is one indexSelect of all
// buckets' rows. A bucket grows while its padded area n·Lq·(Lc + Lq) stays within
//   BUCKET_WASTE × its real area Σ s_i (c_i + s_i)  +  BUCKET_CALL_AREA
// (the second term: a bucket's fixed cost, the positions one more call is worth), so attention computes few pads and
// makes few calls: one bucket is the shared-prefix layout's attention, one bucket per segment is per-row attention.
// Gathered keys past a segment's length are copies of real keys that the mask hides; gathered queries past it are
// copies whose outputs nobody reads. The result equals per-row attention up to float32 rounding (tested).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { attention } from './attention.js';

/** The packed order's segment lengths (see the header); the host's numbers, so a pass reads nothing back. */
export interface PackedLayout {
  /** Per group: its prefix's token count p_g (0 allowed: a one-token prompt has no prefix). */
  prefixLengths: readonly number[];
  /** Per row: its continuation's token count s_b (≥ 1). */
  continuationLengths: readonly number[];
  /** Per row: the group whose prefix it continues. */
  rowPrefix: readonly number[];
}

/** A bucket's padded area may exceed its real area by this factor (see the header). */
export const BUCKET_WASTE = 1.25;
/** Area (query × key positions) one more attention call is worth (see the header). */
export const BUCKET_CALL_AREA = 64 * 64;

/** One attention call over n segments (see the header). */
interface Bucket {
  /** [n·Lq] packed index of each gathered query. */
  queryIndex: Tensor;
  /** [n·(Lc + Lq)] packed index of each gathered key. */
  keyIndex: Tensor;
  /** [n, 1, Lq, Lc + Lq] true = attend, or null: causal (no context, Lc = 0). */
  mask: Tensor | null;
  segments: number;
  queries: number;
  contextKeys: number;
}

/** A forward's buckets and the gather back to packed order, built once per pass and shared by every layer. */
export interface PackedPass {
  /** Packed tokens it lays out. */
  tokens: number;
  buckets: Bucket[];
  /** [tokens] each packed token's row in the buckets' concatenated outputs. */
  outputIndex: Tensor;
  /** The segments in packed order (the batch-invariant forward attends them one by one: ./batch-invariant.ts). */
  segments: readonly Segment[];
}

/** A prefix or continuation: packed tokens [start, start + length) after the context [contextStart, + contextLength). */
export interface Segment {
  start: number;
  length: number;
  contextStart: number;
  contextLength: number;
}

/** The layout's segments in packed order: prefixes (no context), then continuations (their prefix as context). */
function segmentsOf(layout: PackedLayout, tokens: number): Segment[] {
  const { prefixLengths, continuationLengths, rowPrefix } = layout;
  if (rowPrefix.length !== continuationLengths.length) {
    throw new TypeError(`forward: packed has ${continuationLengths.length} continuations and ${rowPrefix.length} rowPrefix`);
  }
  const segments: Segment[] = [];
  const prefixStart: number[] = [];
  let at = 0;
  for (const [g, p] of prefixLengths.entries()) {
    if (!Number.isInteger(p) || p < 0) throw new RangeError(`forward: packed prefix ${g} has length ${p}`);
    prefixStart.push(at);
    if (p > 0) segments.push({ start: at, length: p, contextStart: 0, contextLength: 0 });
    at += p;
  }
  for (const [b, s] of continuationLengths.entries()) {
    const g = rowPrefix[b] as number;
    if (!Number.isInteger(s) || s < 1) throw new RangeError(`forward: packed continuation ${b} has length ${s}`);
    if (!Number.isInteger(g) || g < 0 || g >= prefixLengths.length)
      throw new RangeError(`forward: packed row ${b} continues prefix ${g} of ${prefixLengths.length}`);
    segments.push({ start: at, length: s, contextStart: prefixStart[g] as number, contextLength: prefixLengths[g] as number });
    at += s;
  }
  if (at !== tokens) throw new TypeError(`forward: packed lays out ${at} tokens, inputIds has ${tokens}`);
  return segments;
}

/** The bucket rule's two constants (see the header); other values for measurements (bench/packing.bench.ts). */
export interface BucketRule {
  waste: number;
  callArea: number;
}

/** Segments sorted longest first, cut into buckets by the rule in the header. */
function bucketsOf(segments: readonly Segment[], rule: BucketRule): Segment[][] {
  const order = [...segments].sort((a, b) => b.length - a.length || b.contextLength - a.contextLength);
  const buckets: Segment[][] = [];
  let current: Segment[] = [];
  let queries = 0;
  let context = 0;
  let real = 0;
  for (const s of order) {
    const area = s.length * (s.contextLength + s.length);
    const q = Math.max(queries, s.length);
    const c = Math.max(context, s.contextLength);
    const padded = (current.length + 1) * q * (c + q);
    if (current.length > 0 && padded > rule.waste * (real + area) + rule.callArea) {
      buckets.push(current);
      current = [];
      queries = 0;
      context = 0;
      real = 0;
    }
    current.push(s);
    queries = Math.max(queries, s.length);
    context = Math.max(context, s.contextLength);
    real += area;
  }
  if (current.length > 0) buckets.push(current);
  return buckets;
}

/** Checks `layout` against the packed inputIds' `tokens` and builds its buckets (once per forward). */
export function packedPass(
  layout: PackedLayout,
  tokens: number,
  device: Tensor['device'],
  rule: BucketRule = { waste: BUCKET_WASTE, callArea: BUCKET_CALL_AREA },
): PackedPass {
  const on = device === 'cpu' ? {} : { device };
  const index = (values: Int32Array) => torch.tensor(values, { dtype: 'int64', ...on });
  const outputRow = new Int32Array(tokens);
  let rowsBefore = 0;
  const segments = segmentsOf(layout, tokens);
  const buckets = bucketsOf(segments, rule).map((members): Bucket => {
    const Lq = Math.max(...members.map((s) => s.length));
    const Lc = Math.max(...members.map((s) => s.contextLength));
    const queryIndex = new Int32Array(members.length * Lq);
    const keyIndex = new Int32Array(members.length * (Lc + Lq));
    const contextLengths = new Int32Array(members.length);
    for (const [i, s] of members.entries()) {
      for (let j = 0; j < Lq; j++) queryIndex[i * Lq + j] = s.start + Math.min(j, s.length - 1);
      for (let j = 0; j < Lc; j++)
        keyIndex[i * (Lc + Lq) + j] = s.contextLength > 0 ? s.contextStart + Math.min(j, s.contextLength - 1) : s.start;
      for (let j = 0; j < Lq; j++) keyIndex[i * (Lc + Lq) + Lc + j] = s.start + Math.min(j, s.length - 1);
      for (let j = 0; j < s.length; j++) outputRow[s.start + j] = rowsBefore + i * Lq + j;
      contextLengths[i] = s.contextLength;
    }
    rowsBefore += members.length * Lq;
    return {
      queryIndex: index(queryIndex),
      keyIndex: index(keyIndex),
      mask: Lc === 0 ? null : bucketMask(index(contextLengths), Lq, Lc),
      segments: members.length,
      queries: Lq,
      contextKeys: Lc,
    };
  });
  return { tokens, buckets, outputIndex: index(outputRow), segments };
}

/** [n, 1, Lq, Lc + Lq]: context key j while j < its context length, then causal over the segment's own keys. */
function bucketMask(contextLengths: Tensor, queries: number, contextKeys: number): Tensor {
  const n = contextLengths.size(0);
  const device = contextLengths.device;
  const toContext = torch
    .arange(contextKeys, { device })
    .view([1, contextKeys])
    .lt(contextLengths.view([n, 1]))
    .view([n, 1, 1, contextKeys])
    .expand([n, 1, queries, contextKeys]);
  const causal = torch
    .ones([queries, queries], { dtype: 'bool', device })
    .tril(0)
    .view([1, 1, queries, queries])
    .expand([n, 1, queries, queries]);
  return torch.cat([toContext, causal], -1);
}

/** Rows of packed [1, heads, T, d] at `index` [n·L] → [n, heads, L, d]. */
function gather(t: Tensor, index: Tensor, n: number, length: number): Tensor {
  const [, heads, , headDim] = t.shape as [number, number, number, number];
  return t.indexSelect(2, index).view([heads, n, length, headDim]).transpose(0, 1);
}

/**
 * Attention over packed rows: q [1, heads, T, d] and k, v [1, kvHeads, T, d] (after RoPE) → [1, T, heads·d] in packed
 * order, ready for o_proj (see the header).
 */
export function packedAttention(q: Tensor, k: Tensor, v: Tensor, pass: PackedPass): Tensor {
  const [, heads, , headDim] = q.shape as [number, number, number, number];
  const outputs = pass.buckets.map((bucket) => {
    const { segments: n, queries, contextKeys } = bucket;
    const keys = contextKeys + queries;
    const out = attention(
      gather(q, bucket.queryIndex, n, queries),
      gather(k, bucket.keyIndex, n, keys),
      gather(v, bucket.keyIndex, n, keys),
      bucket.mask,
    );
    return out.transpose(1, 2).reshape([n * queries, heads * headDim]);
  });
  const rows = outputs.length === 1 ? (outputs[0] as Tensor) : torch.cat(outputs, 0);
  return rows.indexSelect(0, pass.outputIndex).view([1, -1, heads * headDim]);
}
