// `reward_std_filter` (Trinity-RFT's RewardSTDFilter): a group (one task's responses in the step, by info.taskId)
// whose rewards all but agree carries no group-relative signal, so the whole group is dropped:
//   keep group g  ⇔  |g| ≥ 2  and  std_g(r) > threshold,    std_g = sqrt(mean_g((r − mean_g r)²))   (np.std, ddof 0)
// Whole groups only: the advantages of the groups it keeps are those of the unfiltered step.
import { checkFinite, groupsByTask, populationStd, rewardOf } from '../groups.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export interface RewardStdFilterOptions {
  threshold: number;
}

const NAME = 'reward_std_filter';

export const rewardStdFilter: ExperienceOperatorModule<RewardStdFilterOptions> = {
  description: 'drops whole groups (same task) whose reward std is <= threshold, and groups of one',
  defaults: { threshold: 0 },
  create: ({ threshold }) => {
    checkFinite(NAME, 'threshold', threshold);
    return {
      process: (experiences) => {
        const kept = [];
        let droppedGroups = 0;
        const groups = groupsByTask(NAME, experiences);
        for (const group of groups) {
          const std = populationStd(group.map((e) => rewardOf(NAME, e)));
          if (group.length < 2 || std <= threshold) droppedGroups++;
          else kept.push(...group);
        }
        return {
          experiences: kept,
          metrics: {
            filtered_count: experiences.length - kept.length,
            kept_groups: groups.length - droppedGroups,
            dropped_groups: droppedGroups,
          },
        };
      },
    };
  },
};

registerExperienceOperator('reward_std_filter', rewardStdFilter);
