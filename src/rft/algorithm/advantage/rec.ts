// REC advantage — "Group-relative REINFORCE is secretly an off-policy algorithm: demystifying some myths about GRPO
// and its friends" (Yao et al., arXiv 2509.24203), Trinity-RFT `advantage_fn: rec`. Over the kept responses of a group:
//   A_i = r_i − mean_kept(r)                              std_normalize: false (default)
//   A_i = (r_i − mean_kept(r)) / (std_kept(r) + ε)        std_normalize: true (population std)
// drop: balance — when a group has more negatives (r_i < mean_g) than positives, drop random extra negatives
// (keep = false, advantage 0) before the statistics. Fewer than two kept responses: mean 0, std 1.
import * as torch from '../../../torch/index.js';
import { groupIndex, outcomeRewards, scoresToResult } from './groups.js';
import { ADVANTAGE_FN } from './registry.js';
import { type AdvantageInput, type AdvantageModule, type AdvantageResult, requireField } from './types.js';

export interface RecAdvantageOptions {
  epsilon: number;
  stdNormalize: boolean;
  drop: 'balance' | null;
}

export const REC_ADVANTAGE_DEFAULTS: Readonly<RecAdvantageOptions> = { epsilon: 1e-6, stdNormalize: false, drop: null };

export function computeRecAdvantages(input: AdvantageInput, options: Partial<RecAdvantageOptions> = {}): AdvantageResult {
  const { epsilon, stdNormalize, drop } = { ...REC_ADVANTAGE_DEFAULTS, ...options };
  if (drop !== null && drop !== 'balance') throw new Error(`advantage_fn 'rec': drop must be null or balance, got '${drop}'`);
  const ids = requireField(input, 'groupIds', 'rec');
  return torch.scope(() => {
    const rewards = outcomeRewards(input, 'rec');
    const values = rewards.to({ dtype: 'float64', device: 'cpu' }).toTypedArray() as Float64Array;
    const { index, size } = groupIndex(ids);
    const members: number[][] = Array.from({ length: size }, () => []);
    (index.toTypedArray() as BigInt64Array).forEach((g, i) => {
      members[Number(g)]?.push(i);
    });
    const keep = new Uint8Array(values.length).fill(1);
    const score = new Float64Array(values.length);
    let dropped = 0;
    for (const group of members) {
      const r = group.map((i) => values[i] as number);
      if (drop === 'balance' && r.length > 1) {
        const mean = r.reduce((a, b) => a + b, 0) / r.length;
        const negatives = group.filter((i) => (values[i] as number) < mean);
        const extra = negatives.length - (group.length - negatives.length);
        if (extra > 0) {
          const order = torch.rand([negatives.length], { dtype: 'float64', generator: input.generator }).argsort();
          for (const k of (order.toTypedArray() as BigInt64Array).slice(0, extra)) keep[negatives[Number(k)] as number] = 0;
          dropped += extra;
        }
      }
      const kept = group.filter((i) => keep[i] === 1).map((i) => values[i] as number);
      let mean = 0;
      let std = 1;
      if (kept.length > 1) {
        mean = kept.reduce((a, b) => a + b, 0) / kept.length;
        std = Math.sqrt(kept.reduce((a, b) => a + (b - mean) ** 2, 0) / kept.length);
      }
      for (const i of group) {
        const centred = (values[i] as number) - mean;
        score[i] = stdNormalize ? centred / (std + epsilon) : centred;
      }
    }
    const place = { dtype: rewards.dtype, device: rewards.device };
    return scoresToResult(
      torch.tensor(score, { dtype: 'float64' }).to(place),
      input.actionMask,
      torch.tensor(keep, { dtype: 'uint8' }).to({ dtype: 'bool', device: rewards.device }),
      { drop_balance: dropped / Math.max(values.length, 1), reward_mean: rewards.mean().item() },
    );
  });
}

export const recAdvantage: AdvantageModule<RecAdvantageOptions> = {
  name: 'rec',
  description: 'group-centred reward with optional std and balanced dropping (REC, arXiv 2509.24203)',
  defaults: REC_ADVANTAGE_DEFAULTS,
  computeInTrainer: false,
  run: computeRecAdvantages,
};

ADVANTAGE_FN.register(recAdvantage);
