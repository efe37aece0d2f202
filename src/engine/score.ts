// Teacher-forced log-probs of given token ids (vLLM's prompt_logprobs): one forward over the whole sequence, without
// the KV cache, and each position's log-prob of the id that follows it:
//   logprobs[t] = log_softmax(logits[t − 1] / τ)[ids[t]] for t ≥ 1, logprobs[0] = null
// plus, with topLogprobs k > 0, each position's k most likely tokens. Teachers, reward models and `echo` completions
// use it through RolloutEngine.score (./rollout-engine.ts), which checks the request, runs it between two engine
// steps, and delegates the forward here.
import type { CausalLM } from '../model/index.js';
import * as torch from '../torch/index.js';
import { checkTokenIds } from './prepare-request.js';
import { GenerationError, type ScoreOptions, type ScoreResult, type TopLogprob } from './types.js';

/** A checked score request: the ids (copied), k top log-probs per position, τ. */
export interface ScoreRequest {
  readonly ids: number[];
  readonly topK: number;
  readonly temperature: number;
}

/**
 * Checks the ids as a prompt's are (non-empty, token ids, at most maxLength of them) and the options; a failed check
 * throws GenerationError('invalid').
 */
export function checkScoreRequest(
  tokenIds: readonly number[],
  options: ScoreOptions,
  limits: { readonly vocabSize: number; readonly maxLength: number; readonly vision?: { imageTokenId: number } | null },
): ScoreRequest {
  const ids = [...tokenIds];
  const topK = options.topLogprobs ?? 0;
  const temperature = options.temperature ?? 1;
  try {
    if (ids.length === 0) throw new RangeError('score: the token ids are empty');
    checkTokenIds('token ids', ids, limits.vocabSize);
    // a vision-language model scores text only: image tokens need their images (generate() takes them)
    if (limits.vision && ids.includes(limits.vision.imageTokenId))
      throw new RangeError(`score: the token ids hold image tokens (id ${limits.vision.imageTokenId}); score() takes no images`);
    if (ids.length > limits.maxLength)
      throw new RangeError(`score: ${ids.length} tokens exceed the engine's maxLength of ${limits.maxLength} positions`);
    if (!Number.isInteger(topK) || topK < 0 || topK > limits.vocabSize)
      throw new RangeError(`score: topLogprobs must be an integer in [0, ${limits.vocabSize}], got ${String(topK)}`);
    if (!(temperature > 0) || !Number.isFinite(temperature))
      throw new RangeError(`score: temperature must be a finite number > 0, got ${String(temperature)}`);
  } catch (error) {
    throw new GenerationError('invalid', (error as Error).message, { cause: error });
  }
  return { ids, topK, temperature };
}

/** One forward of `model` (its inputs made on `device`) over the ids; a forward that throws is GenerationError('failed'). */
export function scoreTokens(model: CausalLM, device: string, { ids, topK, temperature }: ScoreRequest): ScoreResult {
  const T = ids.length;
  if (T === 1) return { logprobs: [null], ...(topK > 0 ? { topLogprobs: [[]] } : {}) };
  let values: Float64Array;
  try {
    values = torch.noGrad(() =>
      torch.scope(() => {
        const input = torch.tensor(BigInt64Array.from(ids, BigInt), { shape: [1, T], device });
        const hidden = model
          .forward(input, { output: 'hidden' })
          .select(0, 0)
          .narrow(0, 0, T - 1); // [T-1, H]
        let logits = model.logits(hidden).float();
        if (temperature !== 1) logits = logits.div(temperature);
        const logp = logits.logSoftmax(-1); // [T-1, V]
        const next = torch.tensor(BigInt64Array.from(ids.slice(1), BigInt), { shape: [T - 1, 1], device });
        const picked = logp.gather(1, next).flatten().double();
        if (topK === 0) return picked.toTypedArray() as Float64Array;
        const top = logp.topk(topK);
        return torch.cat([picked, top.indices.double().flatten(), top.values.double().flatten()]).toTypedArray() as Float64Array;
      }),
    );
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new GenerationError('failed', `score: the forward over ${T} tokens failed: ${message}`, { cause: error });
  }
  const rows = T - 1;
  const logprobs: (number | null)[] = [null, ...Array.from(values.subarray(0, rows))];
  if (topK === 0) return { logprobs };
  const topLogprobs: TopLogprob[][] = [[]];
  for (let r = 0; r < rows; r++) {
    topLogprobs.push(
      Array.from({ length: topK }, (_, j) => ({
        tokenId: values[rows + r * topK + j] as number,
        logprob: values[rows + rows * topK + r * topK + j] as number,
      })),
    );
  }
  return { logprobs, topLogprobs };
}
