// Group statistics over experiences that share a task id, computed with tensor ops (scatter-add over a group index),
// so they run on the rewards' device. Trinity-RFT's convention for a group of one: mean 0, std 1.
import * as torch from '../../../torch/index.js';
import type { Tensor } from '../../../torch/index.js';
import { floatMask } from '../utils.js';
import { type AdvantageInput, type GroupId, requireField } from './types.js';

export interface Groups {
  /** [B] int64: the group of each experience, numbered by first appearance. */
  index: Tensor;
  /** Number of groups G. */
  size: number;
  /** Experiences per group, in group order. */
  counts: number[];
}

export function groupIndex(ids: readonly GroupId[], device = 'cpu'): Groups {
  const numbers = new Map<GroupId, number>();
  const counts: number[] = [];
  const index = ids.map((id) => {
    let g = numbers.get(id);
    if (g === undefined) {
      g = numbers.size;
      numbers.set(id, g);
      counts.push(0);
    }
    counts[g] = (counts[g] as number) + 1;
    return g;
  });
  return { index: torch.tensor(index, { dtype: 'int64', device }), size: numbers.size, counts };
}

export interface GroupStats {
  /** [G] group mean. */
  mean: Tensor;
  /** [G] unbiased standard deviation (0 for a group of one). */
  std: Tensor;
  /** [G] group size. */
  count: Tensor;
}

/** Per-group mean and unbiased std of `values` [B] (torch.mean / torch.std of each group). */
export function groupStats(values: Tensor, groups: Groups): GroupStats {
  return torch.scope(() => {
    const zeros = torch.zeros([groups.size], { dtype: values.dtype, device: values.device });
    const count = zeros.scatterAdd(0, groups.index, torch.onesLike(values));
    const mean = zeros.scatterAdd(0, groups.index, values).div(count);
    const deviation = values.sub(mean.indexSelect(0, groups.index));
    const std = zeros.scatterAdd(0, groups.index, deviation.square()).div(count.sub(1).clamp(1)).sqrt();
    return { mean, std, count };
  });
}

/** [G, B] bool: member[g, b] = experience b belongs to group g. */
export function groupMembership(groups: Groups): Tensor {
  return torch.scope(() => groups.index.unsqueeze(0).eq(torch.arange(groups.size, { device: groups.index.device }).unsqueeze(1)));
}

/** Group of each row gathered back to rows: [G] → [B]. */
export function perRow(perGroup: Tensor, groups: Groups): Tensor {
  return perGroup.indexSelect(0, groups.index);
}

/** The scalar reward of each experience: input.rewards, else the sum of input.tokenLevelRewards. */
export function outcomeRewards(input: AdvantageInput, module: string): Tensor {
  if (input.rewards !== undefined) {
    if (input.rewards.ndim !== 1 || input.rewards.size(0) !== input.actionMask.size(0)) {
      throw new Error(
        `advantage_fn '${module}': rewards must have shape [${input.actionMask.size(0)}], got [${input.rewards.shape.join(', ')}]`,
      );
    }
    return input.rewards.detach();
  }
  if (input.tokenLevelRewards !== undefined) return torch.scope(() => input.tokenLevelRewards!.detach().sum(-1));
  throw new Error(`advantage_fn '${module}' needs input.rewards ([B]) or input.tokenLevelRewards ([B, T])`);
}

export function groupsOf(input: AdvantageInput, module: string, rewards: Tensor): Groups {
  const ids = requireField(input, 'groupIds', module);
  if (ids.length !== rewards.size(0)) {
    throw new Error(`advantage_fn '${module}': ${ids.length} groupIds for ${rewards.size(0)} experiences`);
  }
  return groupIndex(ids, rewards.device);
}

/** The result of a function that gives each experience one scalar score: score × mask, returns a copy. */
export function scoresToResult(score: Tensor, mask: Tensor, keep: Tensor, metrics: Record<string, number>) {
  return torch.scope(() => {
    const advantages = score.mul(floatMask(keep, score)).unsqueeze(-1).mul(floatMask(mask, score));
    return { advantages, returns: advantages.clone(), keep, metrics };
  });
}

export function keepAll(batch: number, device: string): Tensor {
  return torch.ones([batch], { dtype: 'bool', device });
}
