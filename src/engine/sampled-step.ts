// One engine step's forward and sampling, run eagerly or replayed from a capture (./decode-steps.ts), ending in the
// one tensor the step reads back. The engine (./rollout-engine.ts) prepares the step's forward (a StepForward: its
// inputs made from JavaScript data, the model not yet run) and its sampler batch (./sampling.ts), and unpacks the
// values: ids [B] and log-probs [B], then with top log-probs k > 0 the ids [B, k] and log-probs [B, k], all float64.
import * as torch from '../torch/index.js';
import type { DecodeSteps } from './decode-steps.js';
import { type SamplerBatch, sampleTokens } from './sampling.js';

/** A step's forward, prepared (its inputs made from JavaScript data) but not yet run. */
export interface StepForward {
  /** Runs the model: the logits [B, V] of each row's next token. */
  logits: () => torch.Tensor;
  /** A decode step: its shape and per-step inputs for DecodeSteps, and what follows its forward (the cache's commit). */
  captured?: { key: string; inputs: torch.Tensor[]; done: () => void };
}

/**
 * The step's tokens, log-probs (and top log-probs) packed for the one read-back: [2B (+ 2BK)] float64, from its
 * logits; a decode step's forward and sampling are replayed together where DecodeSteps captured them. Sampling is
 * in the capture unless a row truncates (top-k, top-p, min-p): truncationMask's ops depend on the rows' parameters
 * and top-p reads values back, so then only the forward is. The capture's shape adds what the sampler's ops depend
 * on (temperatures or not, how many rows draw, top log-probs); its per-step values (temperatures, the drawing rows,
 * their uniforms) are inputs.
 */
export function runSampledStep(
  step: StepForward,
  sampler: SamplerBatch,
  topK: number,
  decodeSteps: DecodeSteps | null,
): torch.Tensor {
  const sample = (logits: torch.Tensor): torch.Tensor => {
    const { tokens, logprobs, top } = sampleTokens(logits, sampler, { topLogprobs: topK });
    const picked = torch.stack([tokens.double(), logprobs.double()]).flatten(); // ids are exact in float64
    return top === null ? picked : torch.cat([picked, top.tokens.double().flatten(), top.logprobs.double().flatten()]);
  };
  const captured = step.captured;
  if (captured === undefined || decodeSteps === null) {
    const logits = step.logits();
    captured?.done();
    return sample(logits);
  }
  if (sampler.truncation !== null) {
    const [logits] = decodeSteps.run(captured.key, captured.inputs, () => [step.logits()]);
    captured.done();
    return sample(logits as torch.Tensor);
  }
  const { temperatures, rowIndex, uniforms } = sampler;
  const samplerInputs = [temperatures, rowIndex, uniforms].filter((t): t is torch.Tensor => t !== null);
  const key = `${captured.key}|temperatures:${temperatures !== null}|draws:${sampler.sampled.length}|top:${topK}`;
  const [packed] = decodeSteps.run(key, [...captured.inputs, ...samplerInputs], () => [sample(step.logits())]);
  captured.done();
  return packed as torch.Tensor;
}

/** Rows of token ids right-padded with id 0 to `longest` ([B, longest] int64), and which tokens are real (null: all). */
export function rightPadded(
  rows: readonly (readonly number[])[],
  longest: number,
  device: string,
): { inputIds: torch.Tensor; realTokens: boolean[][] | null } {
  const ids = new BigInt64Array(rows.length * longest);
  rows.forEach((row, b) => {
    row.forEach((id, t) => {
      ids[b * longest + t] = BigInt(id);
    });
  });
  const padded = rows.some((row) => row.length !== longest);
  return {
    inputIds: torch.tensor(ids, { shape: [rows.length, longest], device }),
    realTokens: padded ? rows.map((row) => Array.from({ length: longest }, (_, t) => t < row.length)) : null,
  };
}
