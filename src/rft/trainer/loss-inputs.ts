// The per-token tensors of a train step's loss, over the whole batch (every rank alike, after ./batch-forwards.ts):
//   old log-probs       the rollout's (bypass_old_logprobs), else the current weights'; recomputed, the rollout/training
//                       mismatch is measured here and its truncated IS weights scale the advantages
//   advantages, returns the experiences', or the advantage function's over the usual rows (expert rows take no part),
//                       after the KL penalty in their rewards (kl_penalty_fn)
//   rows                those the advantage function keeps, then its duplicates (grpo duplicate_experiences)
//   rowAdvantages       each kept row's advantage as the run records it (./advantage-record.ts): the mean over its
//                       response tokens, Σ_t A[i,t]·mask[i,t] / Σ_t mask[i,t], before the rollout IS weights
//   wholeBatchMask      a policy loss's token mask over the whole batch (m2po), from the current weights
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { ADVANTAGE_FN } from '../algorithm/advantage/index.js';
import type { AdvantageInput } from '../algorithm/advantage/types.js';
import type { KlFn } from '../algorithm/kl.js';
import { policyLossModule } from '../algorithm/policy-loss/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { resolveArgs } from '../algorithm/registry.js';
import { computeRolloutCorrection } from '../algorithm/rollout-correction.js';
import { maskedMean } from '../algorithm/utils.js';
import type { Experience } from '../experience.js';
import type { Prepared } from './batch-forwards.js';
import { rowsTakeAdvantages } from '../algorithm/schemas.js';
import type { StepMetrics } from './step-metrics.js';
import type { TrainBatch } from './train-batch.js';

/** shapeBatch's result: the rows the update trains on and the per-token tensors of the loss. */
export interface Shaped {
  batch: TrainBatch;
  oldLogprob: Tensor;
  advantages: Tensor | null;
  returns: Tensor | null;
  oldValues: Tensor | null;
  refLogprob: Tensor | null;
  /** [B, T] the tokens that have rollout log-probs (actionMask of the rows that carry them). */
  rolloutMask: Tensor;
  /** The policy loss's whole-batch token mask (m2po), or null. */
  wholeBatchMask: Tensor | null;
  /** [B] each row's mean advantage over its response tokens, before IS weights (see the header); null: none. */
  rowAdvantages: Tensor | null;
}

/** Old log-probs, advantages (over the whole batch: every rank alike) and the rows the advantage function keeps. */
export function shapeBatch(prepared: Prepared, metrics: StepMetrics, algorithm: ResolvedAlgorithm, klPenalty: KlFn): Shaped {
  let { batch, oldValues } = prepared;
  let rolloutMask = batch.actionMask.mul(batch.hasLogprobs.unsqueeze(-1).to({ dtype: batch.actionMask.dtype }));
  // old log-probs: the rollout's (bypass_old_logprobs), else the current weights' (recomputed in ./batch-forwards.ts)
  let oldLogprob =
    prepared.current === null
      ? batch.logprobs
      : algorithm.bypassOldLogprobs
        ? torch.where(batch.hasLogprobs.unsqueeze(-1), batch.logprobs, prepared.current)
        : prepared.current;
  // recomputed: the rollout/training mismatch is known now (with bypass: per micro-batch, see ./objective.ts)
  const correction = algorithm.bypassOldLogprobs
    ? null
    : computeRolloutCorrection(
        { trainLogprob: oldLogprob, rolloutLogprob: batch.logprobs, actionMask: rolloutMask },
        algorithm.rolloutCorrection,
      );
  for (const [k, v] of Object.entries(correction?.metrics ?? {})) metrics.set(k, v);
  let advantages = batch.advantages;
  let returns = batch.returns;
  let keepIndex: Tensor | null = null;
  if (rowsTakeAdvantages(algorithm)) {
    if (algorithm.computeAdvantageInTrainer || advantages === null) {
      const computed = computeAdvantages(batch, oldLogprob, prepared, oldValues, metrics, algorithm, klPenalty);
      advantages = computed.advantages;
      returns = computed.returns;
      keepIndex = computed.keepIndex;
      if (computed.actionMask !== null) {
        batch = { ...batch, actionMask: computed.actionMask };
        rolloutMask = rolloutMask.mul(computed.actionMask);
      }
    }
  }
  let rowAdvantages = advantages === null ? null : maskedMean(advantages, batch.actionMask, -1);
  // truncated IS weights scale each token's loss through its advantage (the loss is linearInAdvantages)
  const isWeights = correction?.weights ?? null;
  if (isWeights !== null && advantages !== null) advantages = advantages.mul(torch.where(rolloutMask.gt(0), isWeights, 1));
  let current = prepared.current;
  // rows the advantage function dropped leave the batch
  let refLogprob = prepared.refLogprob;
  if (keepIndex !== null) {
    const keep = keepIndex;
    const select = (t: Tensor) => t.indexSelect(0, keep);
    const keptIndex = [...(keep.toTypedArray() as BigInt64Array)].map(Number);
    const kept = keptIndex.map((i) => batch.rows[i] as Experience);
    metrics.add('dropped', batch.rows.length - new Set(keptIndex).size);
    if (kept.length === 0) throw new Error('train step: the advantage function dropped every experience of the batch');
    batch = {
      ...batch,
      rows: kept,
      inputIds: select(batch.inputIds),
      attentionMask: select(batch.attentionMask),
      actionMask: select(batch.actionMask),
      expertMask: select(batch.expertMask),
      temperatures: keptIndex.map((i) => batch.temperatures[i] as number),
    };
    oldLogprob = select(oldLogprob);
    rolloutMask = select(rolloutMask);
    current = current === null ? null : select(current);
    advantages = advantages === null ? null : select(advantages);
    returns = returns === null ? null : select(returns);
    rowAdvantages = rowAdvantages === null ? null : select(rowAdvantages);
    oldValues = oldValues === null ? null : select(oldValues);
    refLogprob = refLogprob === null ? null : select(refLogprob);
  }
  // a token mask over the whole batch (m2po), from the current weights: the ones the loss sees in this step
  const policy = policyLossModule(algorithm.policyLossFn.name);
  let wholeBatchMask: Tensor | null = null;
  if (policy.wholeBatchMask !== undefined && current !== null && advantages !== null) {
    const options = resolveArgs(`policy_loss_fn '${algorithm.policyLossFn.name}'`, policy.defaults, algorithm.policyLossFn.args);
    const whole = policy.wholeBatchMask({ logprob: current, oldLogprob, advantages, actionMask: batch.actionMask }, options);
    wholeBatchMask = whole.mask;
    for (const [k, v] of Object.entries(whole.metrics)) metrics.set(`policy/${k}`, v);
  }
  return { batch, oldLogprob, advantages, returns, oldValues, refLogprob, rolloutMask, wholeBatchMask, rowAdvantages };
}

/**
 * The advantage function over the batch's usual rows (expert rows take no part), after the KL penalty in their
 * rewards: advantages and returns scattered back to every row, the rows it keeps (then its duplicates; null: all, in
 * order) and the action mask it sets.
 */
function computeAdvantages(
  batch: TrainBatch,
  oldLogprob: Tensor,
  { refLogprob, entropy, necs }: Pick<Prepared, 'refLogprob' | 'entropy' | 'necs'>,
  values: Tensor | null,
  metrics: StepMetrics,
  algorithm: ResolvedAlgorithm,
  klPenalty: KlFn,
): { advantages: Tensor; returns: Tensor; keepIndex: Tensor | null; actionMask: Tensor | null } {
  const spec = algorithm.advantageFn;
  if (spec === null) throw new Error('train step: no advantage_fn');
  // expert rows take no part: the function sees the usual rows only
  const usualRows = batch.rows.flatMap((e, i) => (e.info.isExpert === true ? [] : [i]));
  const device = batch.actionMask.device;
  const index = torch.tensor(usualRows, { dtype: 'int64', ...(device === 'cpu' ? {} : { device }) });
  const pick = (t: Tensor) => t.indexSelect(0, index);
  const rows = usualRows.map((i) => batch.rows[i] as Experience);
  let tokenLevelRewards = batch.tokenLevelRewards === null ? undefined : pick(batch.tokenLevelRewards);
  if (klPenalty.needsReference && tokenLevelRewards !== undefined && refLogprob !== null) {
    const penalised = klPenalty.applyPenaltyToReward({
      tokenLevelScores: tokenLevelRewards,
      oldLogprob: pick(oldLogprob),
      refLogprob: pick(refLogprob),
      actionMask: pick(batch.actionMask),
    });
    tokenLevelRewards = penalised.tokenLevelRewards;
    for (const [k, v] of Object.entries(penalised.metrics)) metrics.add(`kl_penalty/${k}`, v);
  }
  const ids = (key: 'taskId' | 'runId') => {
    const out = rows.map((e) => e.info[key]);
    return out.every((v) => v !== undefined) ? (out as (string | number)[]) : undefined;
  };
  const input: AdvantageInput = {
    actionMask: pick(batch.actionMask),
    ...(batch.rewards === null ? {} : { rewards: pick(batch.rewards) }),
    ...(tokenLevelRewards === undefined ? {} : { tokenLevelRewards }),
    ...(ids('taskId') === undefined ? {} : { groupIds: ids('taskId') }),
    ...(ids('runId') === undefined ? {} : { runIds: ids('runId') }),
    ...(values === null ? {} : { values: pick(values) }),
    logprobs: pick(oldLogprob),
    ...(batch.teacherLogprobs === null ? {} : { teacherLogprobs: pick(batch.teacherLogprobs) }),
    ...(entropy === null ? {} : { entropy: pick(entropy) }),
    ...(necs === null ? {} : { necs: pick(necs) }),
    infos: rows.map((e) => e.info),
  };
  let result: ReturnType<ReturnType<typeof ADVANTAGE_FN.create>>;
  try {
    result = ADVANTAGE_FN.create(spec.name, spec.args)(input);
  } catch (error) {
    const hint = /groupIds/.test((error as Error).message) ? ' (set info.taskId on every experience)' : '';
    throw new Error(`train step: ${(error as Error).message}${hint}`);
  }
  for (const [k, v] of Object.entries(result.metrics)) metrics.add(`advantage/${k}`, v);
  const shape = batch.actionMask.shape;
  const scatter = (t: Tensor) => torch.zeros(shape, { device }).indexCopy_(0, index, t.float());
  const advantages = scatter(result.advantages);
  const returns = scatter(result.returns);
  const keep = torch.ones([batch.rows.length], { dtype: 'bool', device }).indexCopy_(0, index, result.keep);
  let keepIndex = keep.all().item() ? null : keep.nonzero().squeeze(-1);
  // rows the function refills the batch with (grpo duplicate_experiences) follow the kept ones
  if (result.duplicates !== undefined && result.duplicates.size(0) > 0) {
    const copies = index.indexSelect(0, result.duplicates.to({ device }));
    keepIndex = torch.cat([keepIndex ?? torch.arange(batch.rows.length, { dtype: 'int64', device }), copies]);
    metrics.add('duplicated', copies.size(0));
  }
  const actionMask =
    result.actionMask === undefined
      ? null
      : batch.actionMask.clone().indexCopy_(0, index, result.actionMask.to({ dtype: batch.actionMask.dtype, device }));
  return { advantages, returns, keepIndex, actionMask };
}
