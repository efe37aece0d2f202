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
// is CUDA-only and the addon does not bind it, so on every device it runs as here, in units of two kinds:
//   causal  keys = the context (a prefix, maybe none) ‖ the segment, queries = the same tokens, plain causal attention
//           with no mask. Exactly a prefix's attention on its first p rows and the continuation's on the rest, so
//           each prefix rides on its longest continuation (area (p + s)²/2, all of it real), and a continuation longer
//           than its prefix (s > p) takes this kind too, its prefix's rows computed again and not read:
//           (p + s)²/2 < s (p + s) exactly when p < s.
//   masked  keys = context ‖ segment, queries = the segment's: all context keys, causal over its own (a mask);
//           area s (p + s). Short continuations of long prompts (GRPO's many rows of one prompt).
// Units of a kind are sorted by size and cut into buckets; a bucket pads its n units to the longest (queries Lq, keys
// Lk) with zeros and runs one attention call (./attention.ts): in a causal unit the pads come after every real query
// (causal attention hides them), in a masked one the mask hides them; pad queries' outputs are never read. A bucket
// grows while its padded area stays within
//   BUCKET_WASTE × its units' real area  +  BUCKET_CALL_AREA
// (the second term: a call's fixed cost, the positions one more call is worth; causal areas are halved). With
// BUCKET_WASTE 1 a bucket's pads are worth at most one call: long units run alone, a GRPO group's many short rows
// together (bench/README.md, bench:packing, for the rules measured).
//
// Data movement per layer, by row plans (no index tensor): q's packed rows (tokens × heads·d) are split into their
// segments (views), concatenated with zero pads in the buckets' order (one copy) and split per bucket (views); the
// same for k and v; the outputs are concatenated, split into runs and concatenated back in packed order. Autograd's
// backward is then concatenations and views too: an index_select per bucket (the first version) cost a full-size
// zeros and an index_add (a scatter) per bucket and tensor in the backward. Past MAX_PLAN_PIECES segments (hundreds
// of short rows) the plans' bookkeeping costs more than it saves, and each tensor moves by one index_select of the
// same rows instead (one index_add in the backward). Zero pads give the same outputs as repeated tokens: causal
// attention or the mask hides pad keys from every real query, and pad queries' outputs are never read. The plans,
// indices and masks are built once per pass (packedPass) and shared by every layer. The result equals per-row
// attention up to float32 rounding (tested).
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';
import { attention, SHORT_ATTENTION } from './attention.js';

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
export const BUCKET_WASTE = 1;
/** Area (query × key positions) one more attention call is worth (see the header). */
export const BUCKET_CALL_AREA = 64 * 64;

/** A prefix or continuation: packed tokens [start, start + length) after the context [contextStart, + contextLength). */
export interface Segment {
  start: number;
  length: number;
  contextStart: number;
  contextLength: number;
}

/** One unit of attention (see the header): a segment with its context, causal or masked. */
interface Unit {
  segment: Segment;
  causal: boolean;
  /** Causal units only: the context's rows are its prefix's outputs (read back), not recomputed copies. */
  readsContext: boolean;
}

/** One attention call over n units padded to Lq queries and Lk keys. */
interface Bucket {
  causal: boolean;
  segments: number;
  queries: number;
  /** Causal: = queries. Masked: the longest context, then the queries. */
  keys: number;
  /** Masked: [n, 1, Lq, Lk] true = attend. Causal: null. */
  mask: Tensor | null;
}

/** A forward's buckets and gathers, built once per pass and shared by every layer. */
export interface PackedPass {
  /** Packed tokens it lays out. */
  tokens: number;
  buckets: Bucket[];
  /** The segments in packed order: prefixes, then continuations. */
  segments: readonly Segment[];
  /** The segments' lengths: the packed rows split into them (they tile the packed order). */
  pieceSizes: number[];
  /** The buckets' queries one after another: segments (by index) and zero pads (−rows). */
  queryPlan: RowPlan;
  /** The buckets' keys (and values) likewise. */
  keyPlan: RowPlan;
  /** The buckets' concatenated outputs split into runs: per unit its context's rows (causal), its own, its pads. */
  outputRuns: number[];
  /** Per segment in packed order: the run that holds its outputs. */
  outputOrder: number[];
  /**
   * Plans of more than MAX_PLAN_PIECES segments move rows by index instead (see MAX_PLAN_PIECES): the packed token of
   * each bucket query [Σ n·Lq] and key [Σ n·Lk] (a pad: any real token, hidden or not read), and each packed token's
   * row in the buckets' outputs [tokens]. Null: by the plans.
   */
  indices: { query: Tensor; key: Tensor; output: Tensor } | null;
}

/**
 * Segments up to which the row plans move the rows (split and concatenate, one native call per piece in JavaScript's
 * bookkeeping); past it one index_select per tensor does, whose backward is one index_add: a GRPO batch of hundreds
 * of short rows (the quickstart's 256) is faster that way, a long tail of a few dozen rows by the plans
 * (bench/README.md, bench:packing).
 */
export const MAX_PLAN_PIECES = 64;

/** The layout's segments in packed order: prefixes (no context), then continuations (their prefix as context). */
function segmentsOf(layout: PackedLayout, tokens: number): { segments: Segment[]; prefixes: number } {
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
  const prefixes = segments.length;
  for (const [b, s] of continuationLengths.entries()) {
    const g = rowPrefix[b] as number;
    if (!Number.isInteger(s) || s < 1) throw new RangeError(`forward: packed continuation ${b} has length ${s}`);
    if (!Number.isInteger(g) || g < 0 || g >= prefixLengths.length)
      throw new RangeError(`forward: packed row ${b} continues prefix ${g} of ${prefixLengths.length}`);
    segments.push({ start: at, length: s, contextStart: prefixStart[g] as number, contextLength: prefixLengths[g] as number });
    at += s;
  }
  if (at !== tokens) throw new TypeError(`forward: packed lays out ${at} tokens, inputIds has ${tokens}`);
  return { segments, prefixes };
}

/**
 * The units of the segments (see the header; the first `prefixes` segments are the prefixes): each prefix rides on its
 * longest continuation (a prefix nobody continues is a causal unit of its own); a continuation is causal when it has
 * no context or is longer than it. Only past SHORT_ATTENTION (context + segment)² positions: below it attention runs
 * as plain products over the whole rectangle (./attention.ts), where a causal unit saves nothing and computes its
 * prefix's rows again. `causalUnits` false: every prefix causal on its own, every continuation with a context masked
 * (for measurements).
 */
function unitsOf(segments: readonly Segment[], prefixes: number, causalUnits: boolean): Unit[] {
  const continuations = segments.slice(prefixes);
  const carrier = new Map<number, Segment>(); // prefix start → its longest continuation
  for (const s of continuations) {
    if (s.contextLength === 0) continue;
    const seen = carrier.get(s.contextStart);
    if (seen === undefined || s.length > seen.length) carrier.set(s.contextStart, s);
  }
  for (const [start, s] of carrier) if (!pastShort(s)) carrier.delete(start);
  const units: Unit[] = [];
  for (const p of segments.slice(0, prefixes)) {
    if (!causalUnits || !carrier.has(p.start)) units.push({ segment: p, causal: true, readsContext: false });
  }
  for (const s of continuations) {
    const carries = causalUnits && s.contextLength > 0 && carrier.get(s.contextStart) === s;
    const causal = s.contextLength === 0 || carries || (causalUnits && s.contextLength < s.length && pastShort(s));
    units.push({ segment: s, causal, readsContext: carries });
  }
  return units;
}

/** Whether a segment with its context is past SHORT_ATTENTION positions as a causal unit (see unitsOf). */
const pastShort = (s: Segment): boolean => (s.contextLength + s.length) ** 2 > SHORT_ATTENTION;

/** The bucket rule's constants (see the header); other values for measurements (bench/packing.bench.ts). */
export interface BucketRule {
  waste: number;
  callArea: number;
  /** Causal units for prefixes with their longest continuation and for long continuations (default true). */
  causalUnits?: boolean;
  /** Segments up to which rows move by the plans, past it by index (default MAX_PLAN_PIECES). */
  maxPlanPieces?: number;
}

/** Queries and keys of a unit, and the area its kind computes (causal: half the square). */
function unitSize(u: Unit): { queries: number; context: number; area: number } {
  const { length: s, contextLength: c } = u.segment;
  if (u.causal) return { queries: c + s, context: 0, area: ((c + s) * (c + s)) / 2 };
  return { queries: s, context: c, area: s * (c + s) };
}

/** Units of one kind sorted largest first, cut into buckets by the rule in the header. */
function bucketsOf(units: readonly Unit[], rule: BucketRule): Unit[][] {
  const order = [...units].sort((a, b) => {
    const [x, y] = [unitSize(a), unitSize(b)];
    return y.queries - x.queries || y.context - x.context;
  });
  const buckets: Unit[][] = [];
  let current: Unit[] = [];
  let queries = 0;
  let context = 0;
  let real = 0;
  for (const u of order) {
    const size = unitSize(u);
    const q = Math.max(queries, size.queries);
    const c = Math.max(context, size.context);
    const padded = ((current.length + 1) * q * (c + q)) / (u.causal ? 2 : 1);
    if (current.length > 0 && padded > rule.waste * (real + size.area) + rule.callArea) {
      buckets.push(current);
      current = [];
      queries = 0;
      context = 0;
      real = 0;
    }
    current.push(u);
    queries = Math.max(queries, size.queries);
    context = Math.max(context, size.context);
    real += size.area;
  }
  if (current.length > 0) buckets.push(current);
  return buckets;
}

/** A unit's rows in a bucket: pieces (segments of the packed order, by index) and zero pads (negative: −rows). */
type RowPlan = number[];

const pad = (rows: number): number[] => (rows > 0 ? [-rows] : []);

/** Checks `layout` against the packed inputIds' `tokens` and builds its buckets and row plans (once per forward). */
export function packedPass(
  layout: PackedLayout,
  tokens: number,
  device: Tensor['device'],
  rule: BucketRule = { waste: BUCKET_WASTE, callArea: BUCKET_CALL_AREA },
): PackedPass {
  const { segments, prefixes } = segmentsOf(layout, tokens);
  const units = unitsOf(segments, prefixes, rule.causalUnits ?? true);
  const pieceOf = new Map(segments.map((s, i) => [s.start, i])); // a segment's piece, by its first token
  const prefixPiece = (s: Segment) => pieceOf.get(s.contextStart) as number;
  const queryPlan: RowPlan = [];
  const keyPlan: RowPlan = [];
  const outputRuns: number[] = [];
  const outputRun = new Array<number>(segments.length).fill(-1); // each segment's run of outputs
  const buckets = [true, false].flatMap((causal) =>
    bucketsOf(
      units.filter((u) => u.causal === causal),
      rule,
    ).map((members): Bucket => {
      const Lq = Math.max(...members.map((u) => unitSize(u).queries));
      const Lc = causal ? 0 : Math.max(...members.map((u) => u.segment.contextLength));
      for (const u of members) {
        const s = u.segment;
        const own = pieceOf.get(s.start) as number;
        const context = s.contextLength > 0 ? [prefixPiece(s)] : [];
        if (causal) {
          // queries = keys = context ‖ segment ‖ pads (after every real query: causal hides them)
          const rows = [...context, own, ...pad(Lq - s.contextLength - s.length)];
          queryPlan.push(...rows);
          keyPlan.push(...rows);
          if (s.contextLength > 0) {
            if (u.readsContext) outputRun[prefixPiece(s)] = outputRuns.length;
            outputRuns.push(s.contextLength);
          }
        } else {
          // queries = segment ‖ pads; keys = context ‖ pads ‖ segment ‖ pads (the mask hides the context's pads)
          queryPlan.push(own, ...pad(Lq - s.length));
          keyPlan.push(...context, ...pad(Lc - s.contextLength), own, ...pad(Lq - s.length));
        }
        outputRun[own] = outputRuns.length;
        const padRows = Lq - (causal ? s.contextLength : 0) - s.length;
        outputRuns.push(s.length, ...(padRows > 0 ? [padRows] : []));
      }
      const contextLengths = members.map((u) => u.segment.contextLength);
      return {
        causal,
        segments: members.length,
        queries: Lq,
        keys: causal ? Lq : Lc + Lq,
        mask: causal ? null : bucketMask(contextLengths, Lq, Lc, device),
      };
    }),
  );
  const on = device === 'cpu' ? {} : { device };
  const index = (values: Int32Array) => torch.tensor(values, { dtype: 'int64', ...on });
  return {
    tokens,
    buckets,
    segments,
    pieceSizes: segments.map((s) => s.length),
    queryPlan,
    keyPlan,
    outputRuns,
    outputOrder: outputRun,
    indices:
      segments.length <= (rule.maxPlanPieces ?? MAX_PLAN_PIECES)
        ? null
        : {
            query: index(planTokens(queryPlan, segments)),
            key: index(planTokens(keyPlan, segments)),
            output: index(outputRows(outputRuns, outputRun, segments, tokens)),
          },
  };
}

/** A plan's packed tokens, a pad repeating the token before it (or token 0). */
function planTokens(plan: RowPlan, segments: readonly Segment[]): Int32Array {
  const out: number[] = [];
  for (const e of plan) {
    if (e >= 0) {
      const { start, length } = segments[e] as Segment;
      for (let j = 0; j < length; j++) out.push(start + j);
    } else out.push(...new Array<number>(-e).fill(out.at(-1) ?? 0));
  }
  return Int32Array.from(out);
}

/** Each packed token's row in the buckets' concatenated outputs (runs of `runs` rows, segment i's is run order[i]). */
function outputRows(runs: readonly number[], order: readonly number[], segments: readonly Segment[], tokens: number): Int32Array {
  const runStart: number[] = [];
  runs.reduce((at, n) => {
    runStart.push(at);
    return at + n;
  }, 0);
  const out = new Int32Array(tokens);
  segments.forEach((s, i) => {
    const first = runStart[order[i] as number] as number;
    for (let j = 0; j < s.length; j++) out[s.start + j] = first + j;
  });
  return out;
}

/** [n, 1, Lq, Lc + Lq]: context key j while j < its context length, then causal over the segment's own keys. */
function bucketMask(contextLengths: readonly number[], queries: number, contextKeys: number, device: Tensor['device']): Tensor {
  const n = contextLengths.length;
  const on = device === 'cpu' ? {} : { device };
  const lengths = torch.tensor(Int32Array.from(contextLengths), { dtype: 'int64', ...on });
  const toContext = torch
    .arange(contextKeys, on)
    .view([1, contextKeys])
    .lt(lengths.view([n, 1]))
    .view([n, 1, 1, contextKeys])
    .expand([n, 1, queries, contextKeys]);
  const causal = torch
    .ones([queries, queries], { dtype: 'bool', ...on })
    .tril(0)
    .view([1, 1, queries, queries])
    .expand([n, 1, queries, queries]);
  return torch.cat([toContext, causal], -1);
}

/**
 * Packed [1, heads, T, d] → each bucket's [n, heads, L, d] by `plan`: the packed rows split into their segments
 * (views), concatenated with zero pads in the buckets' order (one copy), split per bucket (views). Autograd's
 * backward: one concatenation of the segments' gradients.
 */
function assemble(t: Tensor, pass: PackedPass, plan: RowPlan, index: Tensor | null, length: (b: Bucket) => number): Tensor[] {
  const [, heads, tokens, headDim] = t.shape as [number, number, number, number];
  const rows = t.transpose(1, 2).reshape([tokens, heads * headDim]);
  const { buckets } = pass;
  const all = index === null ? byPlan(rows, pass, plan) : rows.indexSelect(0, index);
  const perBucket =
    buckets.length === 1
      ? [all]
      : all.split(
          buckets.map((b) => b.segments * length(b)),
          0,
        );
  return perBucket.map((part, i) => {
    const b = buckets[i] as Bucket;
    return part.view([b.segments, length(b), heads, headDim]).transpose(1, 2);
  });
}

/** Packed rows [T, width] → the plan's rows: the segments' views and zero pads concatenated. */
function byPlan(rows: Tensor, pass: PackedPass, plan: RowPlan): Tensor {
  const width = rows.size(1);
  const pieces = pass.pieceSizes.length === 1 ? [rows] : rows.split(pass.pieceSizes, 0);
  const padRows = Math.max(0, ...plan.map((e) => -e));
  const zeros = padRows > 0 ? torch.zeros([padRows, width], { dtype: rows.dtype, device: rows.device }) : null;
  const pads = new Map<number, Tensor>();
  const parts = plan.map((e) => {
    if (e >= 0) return pieces[e] as Tensor;
    const cached = pads.get(-e);
    if (cached !== undefined) return cached;
    const part = (zeros as Tensor).narrow(0, 0, -e);
    pads.set(-e, part);
    return part;
  });
  return parts.length === 1 ? (parts[0] as Tensor) : torch.cat(parts, 0);
}

/**
 * Attention over packed rows: q [1, heads, T, d] and k, v [1, kvHeads, T, d] (after RoPE) → [1, T, heads·d] in packed
 * order, ready for o_proj (see the header).
 */
export function packedAttention(q: Tensor, k: Tensor, v: Tensor, pass: PackedPass): Tensor {
  const [, heads, , headDim] = q.shape as [number, number, number, number];
  const { buckets } = pass;
  const { indices } = pass;
  const queries = assemble(q, pass, pass.queryPlan, indices?.query ?? null, (b) => b.queries);
  const keys = assemble(k, pass, pass.keyPlan, indices?.key ?? null, (b) => b.keys);
  const values = assemble(v, pass, pass.keyPlan, indices?.key ?? null, (b) => b.keys);
  const outputs = buckets.map((bucket, i) => {
    const out = attention(queries[i] as Tensor, keys[i] as Tensor, values[i] as Tensor, bucket.mask);
    return out.transpose(1, 2).reshape([bucket.segments * bucket.queries, heads * headDim]);
  });
  const rows = outputs.length === 1 ? (outputs[0] as Tensor) : torch.cat(outputs, 0);
  if (indices !== null) return rows.indexSelect(0, indices.output).view([1, -1, heads * headDim]);
  // the outputs' runs (context, segment, pads per unit) → the segments' runs in packed order
  const runs = pass.outputRuns.length === 1 ? [rows] : rows.split(pass.outputRuns, 0);
  const ordered = pass.outputOrder.map((r) => runs[r] as Tensor);
  return (ordered.length === 1 ? (ordered[0] as Tensor) : torch.cat(ordered, 0)).view([1, -1, heads * headDim]);
}
