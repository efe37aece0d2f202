// M2PO — Zheng et al., "Prosperity before Collapse: How Far Can Off-Policy RL Reach with Stale Data on LLMs?"
// (Second-Moment Trust Policy Optimization, openreview IIgl5MWelz). Trinity-RFT `policy_loss_fn: m2po`. Instead of
// clipping, a trust region on the second moment of the log-ratio: with lr = log π_θ − log π_old (π_old: the rollout
// policy) over the batch's valid tokens,
//   trust tokens  T = {A > 0, lr > 0} ∪ {A < 0, lr < 0}                     (where PPO's clip would engage)
//   M2 = mean_{T} lr²;  while M2 > m2_threshold, drop the token of T with the largest lr²
//   L = −A · exp(clamp(lr, ±log_ratio_clip))  (clamp in the forward only: the gradient is exp(lr)'s)
//   loss = Σ L · keep / Σ mask                                               (token-mean over every valid token)
// The selection sorts all tokens of the optimizer batch together, so the trainer computes it once over the whole
// batch (wholeBatchMask) and the micro-batches share it. Metrics: m2_before, m2_after, masked_fraction,
// trust_region_fraction (of valid tokens), pg_loss, ppo_kl, ratio/mean.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { aggregateLoss, type LossAggMode } from '../loss-agg.js';
import type { Metrics } from '../metrics.js';
import { floatMask, maskedMean } from '../utils.js';
import { POLICY_LOSS_FN } from './registry.js';
import { need, type PolicyLossInput, type PolicyLossModule, type PolicyLossResult, type WholeBatchInput } from './types.js';

export interface M2poPolicyLossOptions {
  /** Upper bound on the mean squared log-ratio of the trust tokens. */
  m2Threshold: number;
  /** token-mean only: the paper normalises by every valid token. */
  lossAggMode: LossAggMode;
  /** Bound of the log-ratio inside exp (forward only). */
  logRatioClip: number;
}

export const M2PO_POLICY_LOSS_DEFAULTS: Readonly<M2poPolicyLossOptions> = {
  m2Threshold: 0.04,
  lossAggMode: 'token-mean',
  logRatioClip: 20.0,
};

function check(o: M2poPolicyLossOptions): void {
  if (!(Number.isFinite(o.m2Threshold) && o.m2Threshold >= 0))
    throw new Error(`policy_loss_fn 'm2po': m2_threshold must be finite and ≥ 0, got ${o.m2Threshold}`);
  if (!(Number.isFinite(o.logRatioClip) && o.logRatioClip > 0))
    throw new Error(`policy_loss_fn 'm2po': log_ratio_clip must be finite and > 0, got ${o.logRatioClip}`);
  if (o.lossAggMode !== 'token-mean')
    throw new Error(`policy_loss_fn 'm2po': loss_agg_mode must be token-mean (the paper's denominator), got '${o.lossAggMode}'`);
}

/** The tokens M2PO trains on, over the rows given (see the header). */
export function m2poMask(input: WholeBatchInput, options: Partial<M2poPolicyLossOptions> = {}) {
  const o = { ...M2PO_POLICY_LOSS_DEFAULTS, ...options };
  check(o);
  return torch.scope(() =>
    torch.noGrad(() => {
      const valid = input.actionMask.to({ dtype: 'bool' });
      const lr = input.logprob.detach().sub(input.oldLogprob).to({ dtype: 'float64' });
      const a = input.advantages.detach();
      const shape = lr.shape;
      if (!lr.index([valid]).isfinite().all().item()) throw new Error("policy_loss_fn 'm2po': non-finite log-ratios");
      const trust = valid.logicalAnd(
        a
          .gt(0)
          .logicalAnd(lr.gt(0))
          .logicalOr(a.lt(0).logicalAnd(lr.lt(0))),
      );
      const flatTrust = trust.reshape([-1]).toArray() as boolean[];
      const second = lr.square().reshape([-1]).toTypedArray() as Float64Array;
      const trustIndex = flatTrust.flatMap((t, i) => (t ? [i] : []));
      const values = trustIndex.map((i) => second[i] as number);
      const mean = (xs: number[]) => (xs.length > 0 ? xs.reduce((s, x) => s + x, 0) / xs.length : 0);
      const m2Before = mean(values);
      const keepMask = valid.reshape([-1]).toArray() as boolean[];
      let keptValues = values;
      if (values.length > 0 && m2Before > o.m2Threshold) {
        const order = values.map((_, k) => k).sort((x, y) => (values[x] as number) - (values[y] as number) || x - y);
        let sum = 0;
        let keepCount = 0;
        order.forEach((k, rank) => {
          sum += values[k] as number;
          if (sum / (rank + 1) <= o.m2Threshold) keepCount++;
        });
        for (const k of order.slice(keepCount)) keepMask[trustIndex[k] as number] = false;
        keptValues = order.slice(0, keepCount).map((k) => values[k] as number);
      }
      const validCount = valid.sum().item();
      const mask = torch.tensor(keepMask, { dtype: 'bool' }).reshape(shape).to({ device: lr.device });
      const metrics = {
        m2_before: m2Before,
        m2_after: mean(keptValues),
        masked_fraction: validCount > 0 ? (values.length - keptValues.length) / validCount : 0,
        trust_region_fraction: validCount > 0 ? values.length / validCount : 0,
      };
      return { mask, metrics };
    }),
  );
}

export function computeM2poPolicyLoss(input: PolicyLossInput, options: Partial<M2poPolicyLossOptions> = {}): PolicyLossResult {
  const o = { ...M2PO_POLICY_LOSS_DEFAULTS, ...options };
  check(o);
  const oldLogprob = need(input, 'oldLogprob', 'm2po');
  const advantages = need(input, 'advantages', 'm2po');
  const { logprob, actionMask: mask } = input;
  return torch.scope(() => {
    const metrics: Metrics = {};
    let keep: Tensor;
    if (input.wholeBatchMask !== undefined) keep = input.wholeBatchMask;
    else {
      const own = m2poMask({ logprob, oldLogprob, advantages, actionMask: mask }, o);
      keep = own.mask;
      Object.assign(metrics, own.metrics);
    }
    const logRatio = logprob.sub(oldLogprob);
    const stable = logRatio.add(logRatio.clamp(-o.logRatioClip, o.logRatioClip).sub(logRatio).detach());
    const ratio = stable.exp();
    const losses = advantages.neg().mul(ratio).mul(floatMask(keep, ratio));
    const loss = aggregateLoss(losses, mask, o.lossAggMode);
    torch.noGrad(() => {
      metrics.pg_loss = loss.detach();
      metrics.ppo_kl = maskedMean(stable.neg(), mask);
      metrics['ratio/mean'] = maskedMean(ratio, mask);
    });
    return { loss, metrics };
  });
}

export const m2poPolicyLoss: PolicyLossModule<M2poPolicyLossOptions> = {
  name: 'm2po',
  description: 'policy gradient with a second-moment trust region on the log-ratio, for stale data (M2PO)',
  defaults: M2PO_POLICY_LOSS_DEFAULTS,
  run: computeM2poPolicyLoss,
  wholeBatchMask: (input, options) => m2poMask(input, options),
  linearInAdvantages: true,
};

POLICY_LOSS_FN.register(m2poPolicyLoss);
