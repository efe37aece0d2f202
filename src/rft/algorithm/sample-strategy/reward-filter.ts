// `reward_filter`: RAFT (Dong et al., arXiv 2304.06767). One read of batch_size rollouts; per group (info.taskId)
// the best response is kept (best_of_group) and responses with reward < min_reward are dropped; the rest is trained
// with SFT. The batch is the filtered read: it is not refilled (the count is what the filter leaves).
import { checkSampleInput, groupsByTask, rewardOf, type SampleStrategyModule } from './contract.js';
import { SAMPLE_STRATEGY } from './registry.js';

export interface RewardFilterOptions {
  /** Drop responses whose reward is below this; null keeps any reward. */
  minReward: number | null;
  /** Keep only the first best-rewarded response of each group (info.taskId). */
  bestOfGroup: boolean;
}

export const REWARD_FILTER_DEFAULTS: Readonly<RewardFilterOptions> = { minReward: null, bestOfGroup: true };

const NAME = 'reward_filter';

export const rewardFilterSampleStrategy: SampleStrategyModule<RewardFilterOptions> = {
  name: NAME,
  description: 'best response of each group above min_reward, for SFT on rollouts (RAFT, arXiv 2304.06767)',
  defaults: REWARD_FILTER_DEFAULTS,
  run: (init, options = {}) => {
    const { minReward, bestOfGroup } = { ...REWARD_FILTER_DEFAULTS, ...options };
    const where = `sample_strategy '${init.name}'`;
    return {
      async sample(input) {
        const minCount = checkSampleInput(where, input);
        const batch = await input.source.read(input.batchSize, { timeoutMs: input.timeoutMs, minCount });
        let candidates = batch;
        if (bestOfGroup) {
          candidates = groupsByTask(NAME, batch).map((group) =>
            group.reduce((best, e) => (rewardOf(NAME, e) > rewardOf(NAME, best) ? e : best)),
          );
        }
        const experiences = candidates.filter((e) => minReward === null || rewardOf(NAME, e) >= minReward);
        return {
          experiences,
          metrics: {
            'sample/count': experiences.length,
            'sample/read': batch.length,
            'sample/filtered': batch.length - experiences.length,
          },
        };
      },
    };
  },
};

SAMPLE_STRATEGY.register(rewardFilterSampleStrategy);
