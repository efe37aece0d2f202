// `invalid_reward_filter` (Trinity-RFT's InvalidRewardFilter): drops experiences without a usable reward — missing
// (a workflow that did not score) or not finite (Trinity: None or NaN; ±Infinity is dropped here too, since no
// advantage can be computed from it).
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export type InvalidRewardFilterOptions = Record<string, never>;

export const invalidRewardFilter: ExperienceOperatorModule<InvalidRewardFilterOptions> = {
  description: 'drops experiences whose reward is missing or not a finite number',
  defaults: {},
  create: () => ({
    process: (experiences) => {
      const kept = experiences.filter((e) => typeof e.reward === 'number' && Number.isFinite(e.reward));
      return { experiences: kept, metrics: { filtered_count: experiences.length - kept.length } };
    },
  }),
};

registerExperienceOperator('invalid_reward_filter', invalidRewardFilter);
