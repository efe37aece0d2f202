// GRPO group-relative advantage — Shao et al., "DeepSeekMath" (arXiv 2402.03300), §4.1.2 outcome supervision.
// Trinity-RFT `advantage_fn: grpo` (GRPOGroupedAdvantage). For the responses i of one task (group g):
//   A_i = (r_i − mean_g(r)) / (std_g(r) + ε)            std_cal_level: group   (unbiased std, as torch.std)
//   A_i = (r_i − mean_g(r)) / (std_batch(r) + ε)        std_cal_level: batch   (std over every reward of the batch)
//   A_i =  r_i − mean_g(r)                              std_cal_level: none    (Dr. GRPO, see dr-grpo.ts)
// broadcast to every response token: A[i, t] = A_i · mask[i, t]. A group of one has mean 0 and std 1.
// std_threshold: groups whose std ≤ threshold (and groups of one) carry no signal and are dropped (keep = false),
// as DAPO's dynamic sampling filter (arXiv 2503.14476).
// duplicate_experiences (with std_threshold; POLARIS, hkunlp.github.io/blog/2025/Polaris): as many kept groups as were
// dropped, drawn uniformly with replacement, are appended once more (result.duplicates), so the batch keeps its size
// unless every group was dropped.
// rank_penalty λ (Rewarding the Unlikely, arXiv 2506.02355): in a group of n > 1, rank_i ∈ {0..n−1} orders the
// responses by mean log-prob of the sampling policy (0 = least likely; ties in batch order) and
//   r'_i = r_i · (1 − λ · rank_i / n)
// replaces r_i above (mean, std and the centred reward), so a likely response earns less than an unlikely one with
// the same reward. (Trinity-RFT's first rank-penalty module scores r'_i; its later grpo centres the raw r_i by the mean
// of r' — we keep the former, which is the paper's estimator.) std_cal_level batch divides by the raw rewards' std.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { maskedMean } from '../utils.js';
import { type Groups, groupStats, groupsOf, outcomeRewards, perRow, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export type StdCalLevel = 'group' | 'batch' | 'none';

export interface GrpoAdvantageOptions {
  /** Added to the std before dividing. */
  epsilon: number;
  /** Drop groups with reward std ≤ this (and groups of one); null keeps every group. */
  stdThreshold: number | null;
  /** Which std divides the centred reward: the group's, the whole batch's, or none. */
  stdCalLevel: StdCalLevel;
  /** Refill the groups std_threshold drops with copies of kept groups (needs std_threshold). */
  duplicateExperiences: boolean;
  /** λ of the rank-based likelihood penalty on rewards; null: none. */
  rankPenalty: number | null;
}

export const GRPO_ADVANTAGE_DEFAULTS: Readonly<GrpoAdvantageOptions> = {
  epsilon: 1e-6,
  stdThreshold: null,
  stdCalLevel: 'group',
  duplicateExperiences: false,
  rankPenalty: null,
};

/** r'_i = r_i · (1 − λ · rank_i / n) within each group of n > 1, rank by mean sampling log-prob (see the header). */
function rankPenalised(input: AdvantageInput, rewards: Tensor, groups: Groups, lambda: number): Tensor {
  const logprobs = requireField(input, 'logprobs', 'grpo (rank_penalty)');
  const meanLogprob = torch.scope(
    () =>
      maskedMean(logprobs.detach(), input.actionMask, -1).to({ dtype: 'float64', device: 'cpu' }).toTypedArray() as Float64Array,
  );
  const groupOf = torch.scope(() => groups.index.to({ device: 'cpu' }).toTypedArray() as BigInt64Array);
  const members: number[][] = groups.counts.map(() => []);
  groupOf.forEach((g, i) => {
    members[Number(g)]?.push(i);
  });
  const factor = new Float64Array(rewards.size(0)).fill(1);
  for (const rows of members) {
    if (rows.length < 2) continue;
    const order = [...rows].sort((a, b) => (meanLogprob[a] as number) - (meanLogprob[b] as number) || a - b);
    order.forEach((row, rank) => {
      factor[row] = 1 - (lambda * rank) / rows.length;
    });
  }
  return rewards.mul(torch.tensor(factor, { dtype: 'float64' }).to({ dtype: rewards.dtype, device: rewards.device }));
}

/** As many kept groups as were dropped, drawn uniformly with replacement; their rows in batch order. */
function refill(input: AdvantageInput, groups: Groups, keptGroup: boolean[]): Tensor | null {
  const kept = keptGroup.flatMap((k, g) => (k ? [g] : []));
  const dropped = keptGroup.length - kept.length;
  if (dropped === 0 || kept.length === 0) return null;
  const draws = torch.scope(
    () =>
      torch.randint(0, kept.length, [dropped], { dtype: 'int64', generator: input.generator }).toTypedArray() as BigInt64Array,
  );
  const groupOf = torch.scope(() => groups.index.to({ device: 'cpu' }).toTypedArray() as BigInt64Array);
  const rows = [...draws].flatMap((d) => {
    const g = kept[Number(d)] as number;
    return [...groupOf].flatMap((h, i) => (Number(h) === g ? [i] : []));
  });
  return torch.tensor(rows, { dtype: 'int64', device: groups.index.device });
}

export function computeGrpoAdvantages(input: AdvantageInput, options: Partial<GrpoAdvantageOptions> = {}): AdvantageResult {
  const { epsilon, stdThreshold, stdCalLevel, duplicateExperiences, rankPenalty } = { ...GRPO_ADVANTAGE_DEFAULTS, ...options };
  if (!['group', 'batch', 'none'].includes(stdCalLevel)) {
    throw new Error(`advantage_fn 'grpo': std_cal_level must be group, batch or none, got '${stdCalLevel}'`);
  }
  if (duplicateExperiences && stdThreshold === null) {
    throw new Error("advantage_fn 'grpo': duplicate_experiences refills the groups std_threshold drops; set std_threshold");
  }
  if (rankPenalty !== null && !(rankPenalty >= 0 && rankPenalty <= 1)) {
    throw new Error(`advantage_fn 'grpo': rank_penalty must be in [0, 1], got ${rankPenalty}`);
  }
  return torch.scope(() => {
    const raw = outcomeRewards(input, 'grpo');
    const groups = groupsOf(input, 'grpo', raw);
    const rewards = rankPenalty === null ? raw : rankPenalised(input, raw, groups, rankPenalty);
    const stats = groupStats(rewards, groups);
    const single = stats.count.eq(1);
    const mean = torch.where(single, 0, stats.mean);
    const std = torch.where(single, 1, stats.std);
    const centred = rewards.sub(perRow(mean, groups));
    let score = centred;
    if (stdCalLevel === 'group') score = centred.div(perRow(std, groups).add(epsilon));
    else if (stdCalLevel === 'batch') {
      const batchStd = raw.size(0) > 1 ? raw.std().item() : 1;
      score = centred.div(batchStd + epsilon);
    }
    let keep = torch.onesLike(rewards).bool();
    let duplicates: Tensor | null = null;
    if (stdThreshold !== null) {
      const keptGroup = single.logicalOr(stats.std.le(stdThreshold)).logicalNot();
      keep = perRow(keptGroup, groups);
      if (duplicateExperiences) duplicates = refill(input, groups, keptGroup.toArray() as boolean[]);
    }
    const skipped = rewards.size(0) - keep.sum().item();
    const result = scoresToResult(score, input.actionMask, keep, {
      reward_mean: rewards.mean().item(),
      reward_std: stats.std.mean().item(),
      skipped_count: skipped,
      ...(duplicateExperiences ? { duplicated_count: duplicates === null ? 0 : duplicates.size(0) } : {}),
    });
    return duplicates === null ? result : { ...result, duplicates };
  });
}

export const grpoAdvantage: AdvantageModule<GrpoAdvantageOptions> = {
  name: 'grpo',
  description: 'group-normalised outcome reward (DeepSeekMath, arXiv 2402.03300)',
  defaults: GRPO_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeGrpoAdvantages,
};

ADVANTAGE_FN.register(grpoAdvantage);
