// `overlong_reward_shaping`: DAPO's soft overlong punishment (arXiv 2503.14476 §3.4) as an operator. With L the
// response length in tokens, L_max = max_response_length and L_cache = overlong_buffer_len:
//   r ← r + 0                                         L ≤ L_max − L_cache
//   r ← r + ((L_max − L_cache) − L) / L_cache · f     L_max − L_cache < L ≤ L_max
//   r ← r − f                                         L > L_max                     (f = overlong_penalty_factor)
// the same penalty as `sample_strategy: dynamic_sampling` applies (../../../algorithm/sample-strategy/dynamic-sampling.ts);
// the penalty goes into info.overlongPenalty.
import { responseLength } from '../../../experience.js';
import { overlongPenalty } from '../../../algorithm/sample-strategy.js';
import { rewardOf } from '../groups.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export interface OverlongRewardShapingOptions {
  maxResponseLength: number | null;
  overlongBufferLen: number;
  overlongPenaltyFactor: number;
}

const NAME = 'overlong_reward_shaping';

export const overlongRewardShaping: ExperienceOperatorModule<OverlongRewardShapingOptions> = {
  description: "DAPO's soft overlong punishment added to each reward",
  defaults: { maxResponseLength: null, overlongBufferLen: 4096, overlongPenaltyFactor: 1 },
  create: (options) => {
    const { maxResponseLength: max, overlongBufferLen: buffer, overlongPenaltyFactor: factor } = options;
    if (max === null || !(Number.isInteger(max) && max > 0))
      throw new Error(`experience operator '${NAME}': max_response_length must be a positive integer, got ${String(max)}`);
    if (!(Number.isInteger(buffer) && buffer > 0 && buffer <= max))
      throw new Error(
        `experience operator '${NAME}': overlong_buffer_len must be an integer in (0, max_response_length], got ${buffer}`,
      );
    if (!(Number.isFinite(factor) && factor >= 0))
      throw new Error(`experience operator '${NAME}': overlong_penalty_factor must be a finite number >= 0, got ${factor}`);
    return {
      process: (experiences) => {
        let penalised = 0;
        let total = 0;
        const shaped = experiences.map((e) => {
          const penalty = overlongPenalty(responseLength(e), options);
          const reward = rewardOf(NAME, e);
          if (penalty === 0) return e;
          penalised++;
          total += penalty;
          return { ...e, reward: reward + penalty, info: { ...e.info, overlongPenalty: penalty } };
        });
        return { experiences: shaped, metrics: { penalised, penalty_sum: total } };
      },
    };
  },
};

registerExperienceOperator('overlong_reward_shaping', overlongRewardShaping);
