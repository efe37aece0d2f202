// DPO — Rafailov et al., "Direct Preference Optimization: Your Language Model is Secretly a Reward Model"
// (arXiv 2305.18290); label smoothing as conservative DPO (cDPO, Mitchell 2023). Trinity-RFT `policy_loss_fn: dpo`.
// Rows come in pairs: even rows chosen (y_w), odd rows rejected (y_l). With sequence log-probs summed over the mask,
//   h = (log π_θ(y_w) − log π_ref(y_w)) − (log π_θ(y_l) − log π_ref(y_l))
//   loss = mean over pairs of  −(1 − ε)·log σ(β·h) − ε·log σ(−β·h)
// Metrics: chosen_reward = β·mean(log π_θ(y_w) − log π_ref(y_w)), rejected_reward, accuracy_mean (h > 0), dpo_loss.
// (Python Trinity-RFT sums log-probs over the whole micro-batch; here each pair has its own sums, as the paper/TRL.)
// The pairs come from experiences of the dpo schema, each a prompt with `chosen` and `rejected` responses: dpoPairRows
// makes them the two rows, chosen first.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import type { Experience } from '../../experience.js';
import { maskedSum } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult } from './types.js';

export interface DpoLossOptions {
  beta: number;
  labelSmoothing: number;
}

export const DPO_LOSS_DEFAULTS: Readonly<DpoLossOptions> = { beta: 0.1, labelSmoothing: 0.0 };

export interface DpoSequenceLogprobs {
  /** [N] Σ_t log π_θ over each chosen response. */
  chosen: Tensor;
  rejected: Tensor;
  refChosen: Tensor;
  refRejected: Tensor;
}

/** DPO from sequence log-probs of N pairs. */
export function dpoLossFromSequences(logps: DpoSequenceLogprobs, options: Partial<DpoLossOptions> = {}): PolicyLossResult {
  const { beta, labelSmoothing } = { ...DPO_LOSS_DEFAULTS, ...options };
  return torch.scope(() => {
    const chosenRatio = logps.chosen.sub(logps.refChosen);
    const rejectedRatio = logps.rejected.sub(logps.refRejected);
    const h = chosenRatio.sub(rejectedRatio).mul(beta);
    const losses = h
      .logsigmoid()
      .mul(-(1 - labelSmoothing))
      .sub(h.neg().logsigmoid().mul(labelSmoothing));
    const loss = losses.mean();
    const metrics = torch.noGrad(() => ({
      chosen_reward: chosenRatio.mean().mul(beta),
      rejected_reward: rejectedRatio.mean().mul(beta),
      accuracy_mean: chosenRatio.gt(rejectedRatio).to({ dtype: h.dtype }).mean(),
      dpo_loss: loss.detach(),
    }));
    return { loss, metrics };
  });
}

/** The rows of dpo experiences: each becomes its chosen row, then its rejected row (the same prompt). */
export function dpoPairRows(experiences: readonly Experience[]): Experience[] {
  return experiences.flatMap((e) => {
    if (!Array.isArray(e.chosen) || !Array.isArray(e.rejected) || e.chosen.length === 0 || e.rejected.length === 0) {
      throw new Error(`train step (dpo): experience '${e.eid}' needs non-empty chosen and rejected responses`);
    }
    const prompt = e.tokens.slice(0, e.promptLength);
    const row = (kind: string, response: number[]): Experience => ({
      eid: `${e.eid}/${kind}`,
      tokens: [...prompt, ...response],
      promptLength: e.promptLength,
      info: { ...e.info },
      ...(e.images === undefined ? {} : { images: e.images }), // the prompt's images (a vision-language policy)
    });
    return [row('chosen', e.chosen), row('rejected', e.rejected)];
  });
}

export function computeDpoLoss(input: PolicyLossInput, options: Partial<DpoLossOptions> = {}): PolicyLossResult {
  const refLogprob = need(input, 'refLogprob', 'dpo');
  const { logprob, actionMask: mask } = input;
  if (logprob.size(0) % 2 !== 0)
    throw new Error(`policy_loss_fn 'dpo': expected chosen/rejected row pairs, got ${logprob.size(0)} rows`);
  return torch.scope(() => {
    const even = (t: Tensor) => t.slice(0, 0, null, 2);
    const odd = (t: Tensor) => t.slice(0, 1, null, 2);
    return dpoLossFromSequences(
      {
        chosen: maskedSum(even(logprob), even(mask), -1),
        rejected: maskedSum(odd(logprob), odd(mask), -1),
        refChosen: maskedSum(even(refLogprob), even(mask), -1),
        refRejected: maskedSum(odd(refLogprob), odd(mask), -1),
      },
      options,
    );
  });
}

export const dpoLoss: PolicyLossModule<DpoLossOptions> = {
  name: 'dpo',
  description: 'direct preference optimisation on chosen/rejected row pairs (DPO, arXiv 2305.18290)',
  defaults: DPO_LOSS_DEFAULTS,
  run: computeDpoLoss,
  // a mean over pairs: micro-batches hold whole pairs and weigh by their share of the pairs
  accumulation: () => ({ rowsPerGroup: 2, terms: [{ name: 'loss', rows: 'all', unit: 'group' }] }),
  needsReference: true,
};

POLICY_LOSS_FN.register(dpoLoss);
