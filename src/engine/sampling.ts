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
const truncates = (p: SamplingParams): boolean => p.topK > 0 || p.topP < 1 || p.minP > 0;

/** Candidates a top-p row without top-k looks at first (a full sort of 152k logits costs ~15 ms a row; topk ~1 ms). */
const TOP_P_CANDIDATES = 1024;

/**
 * The tokens each row's top-k / top-p / min-p removes: bool [B, V], true = removed. `scaledLogits` [B, V] are the
 * temperature-scaled logits (float32); `params[b]` belongs to row b. Creates tensors in the caller's scope.
 *
 * min-p needs no sort: p_i < minP * p_max  ⇔  z_i < z_max + log(minP). top-k / top-p look only at the C largest
 * logits (C = the largest k, or TOP_P_CANDIDATES for top-p alone), and look at 8 times more (up to the whole sorted
 * vocabulary) while some top-p row's nucleus does not fit in them.
 */
export function truncationMask(scaledLogits: Tensor, params: readonly SamplingParams[]): Tensor {
  const [batch, vocab] = scaledLogits.shape as [number, number];
  if (params.length !== batch) throw new RangeError(`truncationMask: ${params.length} parameter sets for ${batch} rows`);
  const device = scaledLogits.device;
  const column = (values: number[]) => torch.tensor(Float32Array.from(values), { shape: [batch, 1], device });
  let removed = torch.zeros([batch, vocab], { dtype: 'bool', device });
  if (params.some((p) => p.minP > 0)) {
    const logMinP = column(params.map((p) => (p.minP > 0 ? Math.log(p.minP) : Number.NEGATIVE_INFINITY)));
    removed = scaledLogits.lt(scaledLogits.amax(-1, true).add(logMinP));
  }
  const cuts = params.map((p) => p.topK > 0 || p.topP < 1);
  if (!cuts.some(Boolean)) return removed;
  const largestK = Math.max(0, ...params.map((p) => p.topK));
  const nucleusOnly = params.some((p) => p.topP < 1 && p.topK === 0);
  let candidates = Math.min(vocab, Math.max(largestK, nucleusOnly ? TOP_P_CANDIDATES : 0));
  let cut = nucleusCut(scaledLogits, params, candidates);
  while (cut === null) {
    candidates = Math.min(vocab, candidates * 8);
    cut = nucleusCut(scaledLogits, params, candidates);
  }
  // rows that cut nothing keep every token
  const cutRows = torch.tensor(Uint8Array.from(cuts, Number), { shape: [batch, 1], dtype: 'bool', device });
  return removed.logicalOr(cut.logicalAnd(cutRows));
}

/**
 * top-k and top-p over the C largest logits of each row, back in vocabulary order (true = removed; everything
 * outside the C is removed). Null when C < V and some top-p row's nucleus reaches past the C candidates.
 */
function nucleusCut(scaledLogits: Tensor, params: readonly SamplingParams[], candidates: number): Tensor | null {
  const [batch, vocab] = scaledLogits.shape as [number, number];
  const device = scaledLogits.device;
  const column = (values: number[]) => torch.tensor(Float32Array.from(values), { shape: [batch, 1], device });
  const top = candidates === vocab ? scaledLogits.sort({ dim: -1, descending: true }) : scaledLogits.topk(candidates);
  const rank = torch.arange(candidates, { device }).view([1, candidates]);
  // top-k: rank >= k (k = V when off)
  const k = BigInt64Array.from(params, (p) => BigInt(p.topK > 0 ? p.topK : vocab));
  let removed = rank.ge(torch.tensor(k, { shape: [batch, 1], device }));
  // top-p over the renormalised top-k distribution (the whole vocabulary without top-k): the mass before token i
  // has already reached p (off: p = 2)
  const values = top.values.maskedFill(removed, Number.NEGATIVE_INFINITY);
  let logNormaliser = values.logsumexp(-1, true);
  if (params.some((p) => p.topP < 1 && p.topK === 0)) {
    const hasTopK = torch.tensor(
      Uint8Array.from(params, (p) => Number(p.topK > 0)),
      { shape: [batch, 1], dtype: 'bool', device },
    );
    logNormaliser = torch.where(hasTopK, logNormaliser, scaledLogits.logsumexp(-1, true));
  }
  const probs = values.sub(logNormaliser).exp();
  const massBefore = probs.cumsum(-1).sub(probs);
  const topP = column(params.map((p) => (p.topP < 1 ? p.topP : 2)));
  if (candidates < vocab && probs.sum(-1, { keepdim: true }).lt(topP).logicalAnd(topP.le(1)).any().item() === 1) return null;
  removed = removed.logicalOr(massBefore.ge(topP));
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
}

/** The SamplerBatch of `rows` on `device`: draws each sampling row's uniform now (see SamplerBatch). */
export function prepareSampling(rows: readonly SamplerRow[], device: string): SamplerBatch {
  const batch = rows.length;
  const temperatures = rows.map((r) => (isGreedy(r.params) ? 1 : r.params.temperature));
  const sampled = rows.flatMap((r, b) => (isGreedy(r.params) ? [] : [b]));
  const generators = sampled.map((b) => (rows[b] as SamplerRow).generator);
  // drawn where the generators are (null ones: the default generator of `device`), then one copy to `device`: the
  // engine's generators are CPU generators on every device, so a GPU step makes no kernel launch per row, and a seed
  // draws the same uniforms on the CPU and on a GPU
  const drawDevice = generators.find((g) => g !== null)?.device ?? device;
  return {
    rows,
    temperatures: temperatures.every((t) => t === 1)
      ? null
      : torch.tensor(Float32Array.from(temperatures), { shape: [batch, 1], device }),
    sampled,
    rowIndex:
      sampled.length === 0 || sampled.length === batch ? null : torch.tensor(BigInt64Array.from(sampled, BigInt), { device }),
    uniforms: sampled.length === 0 ? null : torch.uniformPerGenerator(generators, { device: drawDevice }).to({ device }),
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
  const elsewhere = [prepared.temperatures, prepared.rowIndex, prepared.uniforms].find(
    (t): t is Tensor => t !== null && t.device !== device,
  );
  if (elsewhere !== undefined)
    throw new RangeError(`sampleTokens: the sampler batch is on ${elsewhere.device}, the logits on ${device}`);
  const x = logits.float();
  const scaled = prepared.temperatures === null ? x : x.div(prepared.temperatures);
  const logprobs = scaled.logSoftmax(-1);
  const { sampled, rowIndex, uniforms } = prepared;
  let tokens: Tensor;
  if (uniforms === null) tokens = x.argmax(-1);
  else {
    const candidates = rowIndex === null ? scaled : scaled.indexSelect(0, rowIndex);
    const params = sampled.map((b) => (prepared.rows[b] as SamplerRow).params);
    const probs = params.some(truncates)
      ? candidates.maskedFill(truncationMask(candidates, params), Number.NEGATIVE_INFINITY).softmax(-1)
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
  return cdf.lt(target).sum(-1); // [S] int64: how many cumulative sums fall short of the target
}
