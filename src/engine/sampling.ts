// Choosing the next token from logits: greedy, temperature, top-k, top-p (nucleus), min-p, each row with its own
// parameters and its own random generator, plus the log-probability of the chosen token.
//
// For batch row b with temperature τ > 0 (all in float32, whatever the model dtype):
//   z        = logits_b / τ
//   logprob  = log_softmax(z)[token]                    recorded: the temperature-scaled distribution BEFORE top-k,
//                                                       top-p and min-p truncation (as vLLM and verl), i.e. what a
//                                                       training forward computes as log_softmax(logits / τ)
//   keep     = top-k ∩ top-p ∩ min-p, on z sorted descending (ties broken by the sort; see truncationMask):
//                top-k  the k largest (k = 0: all)
//                top-p  the smallest prefix whose mass reaches p, with the mass renormalised over top-k:
//                       keep token i iff  sum_{j<i} softmax(z | top-k)_j < p        (p = 1: all)
//                min-p  p_i >= minP * p_max                 (ratio test, so it commutes with renormalisation)
//   token    ~ softmax(z with removed tokens at -inf)       drawn by inverse CDF with one uniform from row b's
//                                                       generator (see drawFromCdf)
//   top      = the k largest entries of log_softmax(z) and their ids, descending (only when asked: OpenAI's
//              top_logprobs), from the same distribution as `logprob`
// Temperature 0 is greedy: token = argmax(logits) (the first index among ties), logprob = log_softmax(logits)[token]
// (τ = 1 for the record). Every step computes each row from that row's values alone, so a seeded row draws the same
// tokens whatever else shares the batch.
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

export interface SamplingParams {
  /** 0 = greedy; otherwise logits are divided by it. */
  temperature: number;
  /** Keep the k most likely tokens; 0 = no limit. */
  topK: number;
  /** Keep the smallest set of most likely tokens whose probability reaches p; 1 = no limit. */
  topP: number;
  /** Drop tokens less likely than minP times the most likely one; 0 = no limit. */
  minP: number;
}

export const GREEDY: Readonly<SamplingParams> = Object.freeze({ temperature: 0, topK: 0, topP: 1, minP: 0 });

export class SamplingParamsError extends RangeError {
  constructor(detail: string) {
    super(detail);
    this.name = 'SamplingParamsError';
  }
}

/**
 * Checks user-facing sampling options and fills defaults (temperature 1, no truncation). topK accepts 0 or -1
 * for "no limit" (Hugging Face and vLLM spellings).
 */
export function resolveSamplingParams(options: Partial<SamplingParams> = {}): SamplingParams {
  const { temperature = 1, topK = 0, topP = 1, minP = 0 } = options;
  if (typeof temperature !== 'number' || !Number.isFinite(temperature) || temperature < 0)
    throw new SamplingParamsError(`temperature must be a finite number >= 0 (0 = greedy), got ${String(temperature)}`);
  if (typeof topK !== 'number' || !Number.isInteger(topK) || topK < -1)
    throw new SamplingParamsError(`topK must be an integer >= 1, or 0 / -1 for no limit, got ${String(topK)}`);
  if (typeof topP !== 'number' || !(topP > 0 && topP <= 1))
    throw new SamplingParamsError(`topP must be in (0, 1], got ${String(topP)}`);
  if (typeof minP !== 'number' || !(minP >= 0 && minP <= 1))
    throw new SamplingParamsError(`minP must be in [0, 1], got ${String(minP)}`);
  return { temperature, topK: topK === -1 ? 0 : topK, topP, minP };
}

const isGreedy = (p: SamplingParams): boolean => p.temperature === 0;
/** Top-k or top-p: the row's cut needs the sorted logits (min-p does not). */
const cutsSorted = (p: SamplingParams): boolean => p.topK > 0 || p.topP < 1;
const truncates = (p: SamplingParams): boolean => cutsSorted(p) || p.minP > 0;

/** Candidates a top-p row without top-k looks at first (a full sort of 152k logits costs ~15 ms a row; topk ~1 ms). */
const TOP_P_CANDIDATES = 1024;

/**
 * How top-p rows without top-k find their nucleus. 'candidates': the TOP_P_CANDIDATES largest logits first, 8 times
 * more while some row's nucleus reaches past them; each try reads one flag back to the host, which costs nothing on
 * the CPU (where a full sort of 152k logits takes ~15 ms a row). 'sort': the whole vocabulary sorted at once, no host
 * read: on a GPU a read waits for the forward and everything queued behind it, and the sort is one kernel (vLLM's
 * sampler sorts too). nucleusSearchFor picks by device.
 */
export type NucleusSearch = 'candidates' | 'sort';

export const nucleusSearchFor = (device: string): NucleusSearch => (device === 'cpu' ? 'candidates' : 'sort');

/** "No top-k" in the k column: more ranks than any vocabulary has. */
const NO_TOP_K = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The truncation parameters of S rows as tensors on one device (truncationInputs), so that a sampler prepared before
 * the forward uploads nothing after it. Columns are [S, 1].
 */
export interface TruncationInputs {
  readonly params: readonly SamplingParams[];
  readonly device: string;
  readonly nucleus: NucleusSearch;
  /** float32 log(minP), -inf for rows without min-p; null when no row has min-p. */
  readonly logMinP: Tensor | null;
  /** The top-k / top-p columns; null when no row has either. */
  readonly cut: {
    /** int64 k (no top-k: NO_TOP_K). */
    readonly topK: Tensor;
    /** float32 p (no top-p: 2, which no mass reaches). */
    readonly topP: Tensor;
    /** bool: the row has top-k (its nucleus is over the renormalised top-k distribution). */
    readonly hasTopK: Tensor;
    /** bool: the row has top-k or top-p (the others keep every token). */
    readonly cuts: Tensor;
  } | null;
}

/** The TruncationInputs of `params` on `device` (creates tensors in the caller's scope). */
export function truncationInputs(
  params: readonly SamplingParams[],
  device: string,
  nucleus: NucleusSearch = nucleusSearchFor(device),
): TruncationInputs {
  const rows = params.length;
  const column = (values: Iterable<number>) => torch.tensor(Float32Array.from(values), { shape: [rows, 1], device });
  const flags = (test: (p: SamplingParams) => boolean) =>
    torch.tensor(
      Uint8Array.from(params, (p) => Number(test(p))),
      { shape: [rows, 1], dtype: 'bool', device },
    );
  return {
    params,
    device,
    nucleus,
    logMinP: params.some((p) => p.minP > 0)
      ? column(params.map((p) => (p.minP > 0 ? Math.log(p.minP) : Number.NEGATIVE_INFINITY)))
      : null,
    cut: params.some(cutsSorted)
      ? {
          topK: torch.tensor(
            BigInt64Array.from(params, (p) => (p.topK > 0 ? BigInt(p.topK) : NO_TOP_K)),
            { shape: [rows, 1], device },
          ),
          topP: column(params.map((p) => (p.topP < 1 ? p.topP : 2))),
          hasTopK: flags((p) => p.topK > 0),
          cuts: flags(cutsSorted),
        }
      : null,
  };
}

/**
 * The tokens each row's top-k / top-p / min-p removes: bool [B, V], true = removed. `scaledLogits` [B, V] are the
 * temperature-scaled logits (float32); row b's parameters are `params[b]`, given as they are or as TruncationInputs
 * made ahead on the logits' device. Creates tensors in the caller's scope.
 *
 * min-p needs no sort: p_i < minP * p_max  ⇔  z_i < z_max + log(minP). top-k / top-p look only at the C largest
 * logits (C = the largest k; for top-p rows without top-k see NucleusSearch).
 */
export function truncationMask(scaledLogits: Tensor, params: readonly SamplingParams[] | TruncationInputs): Tensor {
  const [batch, vocab] = scaledLogits.shape as [number, number];
  const device = scaledLogits.device;
  const inputs = 'nucleus' in params ? params : truncationInputs(params, device);
  if (inputs.params.length !== batch)
    throw new RangeError(`truncationMask: ${inputs.params.length} parameter sets for ${batch} rows`);
  if (inputs.device !== device)
    throw new RangeError(`truncationMask: the truncation inputs are on ${inputs.device}, the logits on ${device}`);
  const removed =
    inputs.logMinP === null
      ? torch.zeros([batch, vocab], { dtype: 'bool', device })
      : scaledLogits.lt(scaledLogits.amax(-1, true).add(inputs.logMinP));
  if (inputs.cut === null) return removed;
  const largestK = Math.max(0, ...inputs.params.map((p) => p.topK));
  const nucleusOnly = inputs.params.some((p) => p.topP < 1 && p.topK === 0);
  const firstTry = nucleusOnly ? (inputs.nucleus === 'sort' ? vocab : Math.max(largestK, TOP_P_CANDIDATES)) : largestK;
  let candidates = Math.min(vocab, firstTry);
  let cut = nucleusCut(scaledLogits, inputs, candidates, nucleusOnly);
  while (!(cut instanceof torch.Tensor)) {
    // the next try: 8 times more, or as many as the row that fell furthest short would need if the mass went on
    // growing at the rate it has (a flat row at 1,024 candidates goes straight to the sort, not through 8,192 and
    // 65,536: at 152k and batch 32 those topk cost 37 and 144 ms, the sort 290); past half the vocabulary a topk
    // costs about what the sort does
    const next = Math.max(candidates * 8, Math.ceil((1.25 * candidates) / Math.max(cut.reach, 1e-6)));
    candidates = next >= vocab / 2 ? vocab : next;
    cut = nucleusCut(scaledLogits, inputs, candidates, nucleusOnly);
  }
  // rows that cut nothing keep every token
  return removed.logicalOr(cut.logicalAnd(inputs.cut.cuts));
}

/**
 * top-k and top-p over the C largest logits of each row, back in vocabulary order (true = removed; everything
 * outside the C is removed). When C < V and some top-p row without top-k has a nucleus reaching past the C
 * candidates: instead, `reach`, the smallest (mass of the C) / p of those rows (found by a host read; with C = V, or
 * no such row, nothing is read).
 */
function nucleusCut(
  scaledLogits: Tensor,
  inputs: TruncationInputs,
  candidates: number,
  nucleusOnly: boolean,
): Tensor | { reach: number } {
  const [batch, vocab] = scaledLogits.shape as [number, number];
  const device = scaledLogits.device;
  const cut = inputs.cut as NonNullable<TruncationInputs['cut']>;
  const top = candidates === vocab ? scaledLogits.sort({ dim: -1, descending: true }) : scaledLogits.topk(candidates);
  const rank = torch.arange(candidates, { device }).view([1, candidates]);
  // top-k: rank >= k
  let removed = rank.ge(cut.topK);
  // top-p over the renormalised top-k distribution (the whole vocabulary without top-k): the mass before token i
  // has already reached p
  const values = top.values.maskedFill(removed, Number.NEGATIVE_INFINITY);
  let logNormaliser = values.logsumexp(-1, true);
  if (nucleusOnly) logNormaliser = torch.where(cut.hasTopK, logNormaliser, scaledLogits.logsumexp(-1, true));
  const probs = values.sub(logNormaliser).exp();
  const massBefore = probs.cumsum(-1).sub(probs);
  if (nucleusOnly && candidates < vocab) {
    const mass = probs.sum(-1, { keepdim: true });
    const short = mass.lt(cut.topP).logicalAnd(cut.topP.le(1));
    const reach = torch.where(short, mass.div(cut.topP), Number.POSITIVE_INFINITY).amin().item() as number;
    if (reach !== Number.POSITIVE_INFINITY) return { reach };
  }
  removed = removed.logicalOr(massBefore.ge(cut.topP));
  return torch.ones([batch, vocab], { dtype: 'bool', device }).scatter(1, top.indices, removed);
}

/** One batch row's sampling: its parameters and its random generator (null: libtorch's default generator). */
export interface SamplerRow {
  params: SamplingParams;
  generator: torch.Generator | null;
}

/**
 * What sampleTokens needs from the rows besides the logits, already on the logits' device: prepareSampling makes it
 * before the forward is queued (the engine does), so that on a GPU its uploads do not wait for the forward to finish
 * and the sampler's own launches follow the forward's without a stop between them. Creates tensors in the caller's
 * scope.
 */
export interface SamplerBatch {
  readonly rows: readonly SamplerRow[];
  /** [B, 1] float32: each row's temperature (greedy rows: 1); null when every one is 1. */
  readonly temperatures: Tensor | null;
  /** The rows that draw a token (the others are greedy), ascending. */
  readonly sampled: readonly number[];
  /** [S] int64 of `sampled`; null when no row or every row draws. */
  readonly rowIndex: Tensor | null;
  /** [S] float64: one U[0, 1) draw from each drawing row's generator (see drawFromCdf); null when none draws. */
  readonly uniforms: Tensor | null;
  /** The drawing rows' top-k / top-p / min-p (truncationMask); null when none truncates. */
  readonly truncation: TruncationInputs | null;
}

/**
 * The SamplerBatch of `rows` on `device`: draws each sampling row's uniform now (see SamplerBatch). `nucleus`: how
 * top-p rows find their nucleus (default: nucleusSearchFor(device)).
 */
export function prepareSampling(
  rows: readonly SamplerRow[],
  device: string,
  options: { nucleus?: NucleusSearch } = {},
): SamplerBatch {
  const batch = rows.length;
  const temperatures = rows.map((r) => (isGreedy(r.params) ? 1 : r.params.temperature));
  const sampled = rows.flatMap((r, b) => (isGreedy(r.params) ? [] : [b]));
  const generators = sampled.map((b) => (rows[b] as SamplerRow).generator);
  // drawn where the generators are (null ones: the default generator of `device`), then one copy to `device`: the
  // engine's generators are CPU generators on every device, so a GPU step makes no kernel launch per row, and a seed
  // draws the same uniforms on the CPU and on a GPU
  const drawDevice = generators.find((g) => g !== null)?.device ?? device;
  const drawingParams = sampled.map((b) => (rows[b] as SamplerRow).params);
  return {
    rows,
    temperatures: temperatures.every((t) => t === 1)
      ? null
      : torch.tensor(Float32Array.from(temperatures), { shape: [batch, 1], device }),
    sampled,
    rowIndex:
      sampled.length === 0 || sampled.length === batch ? null : torch.tensor(BigInt64Array.from(sampled, BigInt), { device }),
    uniforms: sampled.length === 0 ? null : torch.uniformPerGenerator(generators, { device: drawDevice }).to({ device }),
    truncation: drawingParams.some(truncates) ? truncationInputs(drawingParams, device, options.nucleus) : null,
  };
}

export interface SampledTokens {
  /** [B] int64: the chosen token of each row. */
  tokens: Tensor;
  /** [B] float32: log_softmax(logits / τ)[token] of each row (τ = 1 for greedy rows), before truncation. */
  logprobs: Tensor;
  /** With topLogprobs k > 0: the k largest log_softmax(logits / τ) of each row, descending ([B, k] float32), and their ids ([B, k] int64). */
  top: { logprobs: Tensor; tokens: Tensor } | null;
}

/**
 * Picks one token per row of `logits` [B, V] (any floating dtype) as the header describes; with `topLogprobs` k > 0
 * also returns each row's k most likely tokens. `rows`: each row's parameters and generator, or their SamplerBatch
 * (prepareSampling) on the logits' device. Creates tensors in the caller's scope; run it under noGrad.
 */
export function sampleTokens(
  logits: Tensor,
  rows: readonly SamplerRow[] | SamplerBatch,
  options: { topLogprobs?: number } = {},
): SampledTokens {
  if (logits.ndim !== 2) throw new TypeError(`sampleTokens: logits must be [batch, vocab], got ${logits.toString()}`);
  const batch = logits.size(0);
  const device = logits.device;
  const rowCount = 'sampled' in rows ? rows.rows.length : rows.length;
  if (rowCount !== batch) throw new RangeError(`sampleTokens: ${rowCount} rows of parameters for ${batch} logit rows`);
  const k = options.topLogprobs ?? 0;
  if (!Number.isInteger(k) || k < 0 || k > logits.size(1))
    throw new RangeError(`sampleTokens: topLogprobs must be an integer in [0, ${logits.size(1)}], got ${String(k)}`);
  const prepared = 'sampled' in rows ? rows : prepareSampling(rows, device);
  const elsewhere = [prepared.temperatures, prepared.rowIndex, prepared.uniforms, prepared.truncation]
    .map((t) => t?.device)
    .find((d) => d !== undefined && d !== device);
  if (elsewhere !== undefined)
    throw new RangeError(`sampleTokens: the sampler batch is on ${elsewhere}, the logits on ${device}`);
  const x = logits.float();
  const scaled = prepared.temperatures === null ? x : x.div(prepared.temperatures);
  const logprobs = scaled.logSoftmax(-1);
  const { rowIndex, uniforms, truncation } = prepared;
  let tokens: Tensor;
  if (uniforms === null) tokens = x.argmax(-1);
  else {
    const candidates = rowIndex === null ? scaled : scaled.indexSelect(0, rowIndex);
    const probs =
      truncation !== null
        ? candidates.maskedFill(truncationMask(candidates, truncation), Number.NEGATIVE_INFINITY).softmax(-1)
        : (rowIndex === null ? logprobs : logprobs.indexSelect(0, rowIndex)).exp();
    const drawn = drawFromCdf(probs, uniforms);
    // the greedy rows' argmax, the others' draws
    tokens = rowIndex === null ? drawn : x.argmax(-1).indexPut_([rowIndex], drawn);
  }
  const top = k > 0 ? logprobs.topk(k) : null;
  return {
    tokens,
    logprobs: logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1),
    top: top === null ? null : { logprobs: top.values, tokens: top.indices },
  };
}

/**
 * One draw per row of `probs` [S, V] (non-negative, each row summing to ~1) by inversion: with u the row's U[0, 1)
 * draw (`uniforms` [S], from its generator: prepareSampling), token = the first index whose cumulative probability
 * reaches (1 - u) * total (float64 cumsum, so tail tokens keep their probability). Zero-probability tokens are never
 * drawn. Batched over rows; only the uniform draw is per row (one scalar each), where torch.multinomial would draw V
 * exponentials per row (4 ms at V = 152k).
 */
export function drawFromCdf(probs: Tensor, uniforms: Tensor): Tensor {
  const rows = probs.size(0);
  const cdf = probs.cumsum(-1, 'float64'); // [S, V]
  const total = cdf.narrow(1, probs.size(1) - 1, 1); // [S, 1]
  const target = uniforms.neg().add(1).view([rows, 1]).mul(total); // (1 - U[0, 1)) * total, in (0, total]
  // [S] int64: how many cumulative sums fall short of the target = the first index that reaches it (the sums never
  // decrease; the last one is the total, so one always does); argmax over bytes finds it without the sum's int64
  // copy of the whole [S, V] comparison (50 of 440 ms at 32 x 152k)
  return cdf.ge(target).to({ dtype: 'uint8' }).argmax(-1);
}
