// The objective of one micro-batch of the policy update, as TRL's `_compute_loss`: from the forward's log-probs (and
// entropy) of the micro-batch's rows,
//   loss = w_pg · policy_loss + w_kl · β · aggregate(KL(π_θ, π_ref)) + w_H · (−c · aggregate(H))
// each term weighted by the micro-batch's share of the batch in the term's aggregation unit (./micro-batches.ts), so
// the micro-batches' gradients add up to the whole batch's. A policy loss with several terms weighs each itself
// (input.termWeights, w_pg = 1). The KL term needs a kl_loss_fn that contributes and reference log-probs; the entropy
// term an entropy_loss_fn that reads entropy (coefficient 0: its metric only, no gradient).
//
// bypass_old_logprobs: the rollout/training mismatch is measured against the policy being trained (its log-probs,
// detached, are the trainer's: one update per step), so per micro-batch, each weighted by its share of rollout tokens;
// its truncated IS weights scale the advantages (../algorithm/rollout-correction.ts). Recomputed old log-probs have it
// measured once for the whole batch instead (./loss-inputs.ts).
//
// Metrics go to the step's sums (added across micro-batches and ranks): pg_loss, policy/*, pg_clipfrac, ppo_kl, kl
// (before β), entropy, rollout_corr/*.
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { type createEntropyLossFn, entropyLossNeedsEntropy } from '../algorithm/entropy.js';
import type { KlFn } from '../algorithm/kl.js';
import { isLossAggMode, type LossAggMode } from '../algorithm/loss-agg.js';
import { POLICY_LOSS_FN } from '../algorithm/policy-loss/index.js';
import type { LossAccumulation, PolicyLossInput, PolicyLossResult } from '../algorithm/policy-loss/types.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { computeRolloutCorrection, type RolloutCorrectionOptions } from '../algorithm/rollout-correction.js';
import type { ExpertRows } from '../algorithm/utils.js';
import type { Shaped } from './loss-inputs.js';
import type { MicroBatchWeights } from './micro-batches.js';
import type { StepMetrics } from './step-metrics.js';

/** An entropy_loss_fn as ../algorithm/entropy.ts makes it. */
type EntropyLossFn = ReturnType<typeof createEntropyLossFn>;

/** The loss modules of one step and how they are combined (see the header). */
export interface Objective {
  readonly policyLoss: (input: PolicyLossInput) => PolicyLossResult;
  /** The loss has several terms and weighs each by input.termWeights. */
  readonly multiTerm: boolean;
  /** The KL loss term, when its function contributes one, aggregated by `mode`. */
  readonly kl: { readonly fn: KlFn; readonly mode: LossAggMode } | null;
  /** The entropy term, when its function reads entropy: coefficient c (0: metric only) and aggregation. */
  readonly entropy: { readonly fn: EntropyLossFn; readonly coef: number; readonly mode: LossAggMode } | null;
  /** Rollout correction measured per micro-batch (bypass_old_logprobs, and the batch has rollout tokens), else null. */
  readonly rolloutCorrection: Readonly<RolloutCorrectionOptions> | null;
  /** The global step (CHORD's μ schedule). */
  readonly step: number;
}

const asLossAggMode = (v: unknown): LossAggMode | null => (typeof v === 'string' && isLossAggMode(v) ? v : null);

/** The step's objective: its policy loss made now, the KL and entropy modules the train step keeps across steps. */
export function stepObjective(
  algorithm: ResolvedAlgorithm,
  modules: { klLoss: KlFn; entropy: EntropyLossFn },
  accumulation: LossAccumulation,
  step: { step: number; rolloutTokens: number },
): Objective {
  const { entropyLossFn } = algorithm;
  return {
    policyLoss: POLICY_LOSS_FN.create(algorithm.policyLossFn.name, algorithm.policyLossFn.args),
    multiTerm: accumulation.terms.length > 1,
    kl: modules.klLoss.needsReference ? { fn: modules.klLoss, mode: algorithm.lossAggMode } : null,
    entropy: entropyLossNeedsEntropy(entropyLossFn.name)
      ? {
          fn: modules.entropy,
          coef: Number(entropyLossFn.args.entropy_coef ?? 0),
          mode: asLossAggMode(entropyLossFn.args.loss_agg_mode) ?? algorithm.lossAggMode,
        }
      : null,
    rolloutCorrection: algorithm.bypassOldLogprobs && step.rolloutTokens > 0 ? algorithm.rolloutCorrection : null,
    step: step.step,
  };
}

/** One micro-batch of the policy update: rows [start, start + n) of the step's shaped batch. */
export interface MicroBatch {
  readonly shaped: Shaped;
  /** Rows [start, start + n) of a whole-batch tensor. */
  part(t: Tensor): Tensor;
  /** The forward's per-position values [n, its width] → the batch's response columns [n, R] (./token-budget.ts). */
  response(perPosition: Tensor): Tensor;
  readonly actionMask: Tensor;
  readonly expertMask: Tensor;
  /** expertMask's rows as index lists, uploaded ahead. */
  readonly expertRows: ExpertRows;
  readonly weights: MicroBatchWeights;
}

/** What the forward gives the objective: per-position log-probs and (when asked) entropy of the micro-batch's rows. */
export interface ForwardOutput {
  logProbs: Tensor;
  entropy: Tensor | null;
}

/** The micro-batch's weighted loss (see the header); its terms' metrics go to `sums`. */
export function microBatchLoss(objective: Objective, micro: MicroBatch, forward: ForwardOutput, sums: StepMetrics): Tensor {
  const { shaped, part, actionMask, expertMask, weights } = micro;
  const logprob = micro.response(forward.logProbs);
  const advantages = correctedAdvantages(objective, micro, logprob, sums);
  const input: PolicyLossInput = {
    logprob,
    actionMask,
    oldLogprob: part(shaped.oldLogprob),
    ...(advantages === null ? {} : { advantages }),
    ...(shaped.refLogprob === null ? {} : { refLogprob: part(shaped.refLogprob) }),
    ...(shaped.wholeBatchMask === null ? {} : { wholeBatchMask: part(shaped.wholeBatchMask) }),
    expertMask,
    expertRows: micro.expertRows,
    step: objective.step,
    ...(objective.multiTerm ? { termWeights: weights.terms } : {}),
  };
  const policy = objective.policyLoss(input);
  let total = policy.loss.mul(weights.policy);
  sums.total('pg_loss', policy.loss, weights.policy);
  for (const [k, v] of Object.entries(policy.metrics)) {
    if (k === 'pg_clipfrac' || k === 'ppo_kl') sums.add(k, v, weights.metrics);
    sums.add(`policy/${k}`, v, weights.metrics);
  }
  if (objective.kl !== null && shaped.refLogprob !== null) {
    const kl = objective.kl.fn.calculateLoss(
      { logprob, refLogprob: part(shaped.refLogprob), actionMask, oldLogprob: part(shaped.oldLogprob) },
      objective.kl.mode,
    );
    total = total.add(kl.loss.mul(weights.share(objective.kl.mode)));
    sums.add('kl', kl.metrics.kl_loss ?? 0, weights.share(objective.kl.mode));
  }
  if (objective.entropy !== null && forward.entropy !== null) {
    const { fn, coef, mode } = objective.entropy;
    const responseEntropy = micro.response(forward.entropy);
    const term = fn({
      entropy: coef === 0 ? responseEntropy.detach() : responseEntropy,
      actionMask,
      expertMask,
      expertRows: micro.expertRows,
    });
    if (coef !== 0) total = total.add(term.loss.mul(weights.share(mode)));
    if (term.metrics.entropy !== undefined) sums.add('entropy', term.metrics.entropy, weights.share(mode));
  }
  return total;
}

/**
 * The micro-batch's advantages (null without any); with rollout correction per micro-batch, scaled by its truncated IS
 * weights on the tokens with rollout log-probs, and its mismatch metrics added to `sums` (see the header).
 */
function correctedAdvantages(objective: Objective, micro: MicroBatch, logprob: Tensor, sums: StepMetrics): Tensor | null {
  const { shaped, part } = micro;
  let advantages = shaped.advantages === null ? null : part(shaped.advantages);
  if (objective.rolloutCorrection !== null) {
    const rolloutMask = part(shaped.rolloutMask);
    const correction = computeRolloutCorrection(
      { trainLogprob: logprob, rolloutLogprob: part(shaped.oldLogprob), actionMask: rolloutMask },
      objective.rolloutCorrection,
    );
    for (const [k, v] of Object.entries(correction.metrics)) sums.add(k, v, micro.weights.rollout);
    if (correction.weights !== null && advantages !== null)
      advantages = advantages.mul(torch.where(rolloutMask.gt(0), correction.weights, 1));
  }
  return advantages;
}
