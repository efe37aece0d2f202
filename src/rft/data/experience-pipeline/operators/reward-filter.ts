// `reward_filter` (Trinity-RFT's RewardFilter): keeps each experience whose reward is ≥ threshold. It decides per
// experience, so it can drop part of a group: the group advantage is then computed over the members that remain
// (see ../pipeline.ts).
import { checkFinite, rewardOf } from '../groups.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export interface RewardFilterOptions {
  threshold: number;
}

const NAME = 'reward_filter';

export const rewardFilter: ExperienceOperatorModule<RewardFilterOptions> = {
  description: 'keeps experiences with reward >= threshold',
  defaults: { threshold: 0 },
  create: ({ threshold }) => {
    checkFinite(NAME, 'threshold', threshold);
    return {
      process: (experiences) => {
        const kept = experiences.filter((e) => rewardOf(NAME, e) >= threshold);
        return { experiences: kept, metrics: { filtered_count: experiences.length - kept.length } };
      },
    };
  },
};

registerExperienceOperator('reward_filter', rewardFilter);
