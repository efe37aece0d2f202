// `dapo_dynamic_sampling` (Trinity-RFT's DAPODynamicSamplingFilter; DAPO, arXiv 2503.14476 §3.2): keeps a group (one
// task's responses in the step) only when some but not all of its responses are correct:
//   keep g  ⇔  |g| ≥ 2  and  0 < |{o ∈ g : score(o) > correct_threshold}| < |g|
// score(o) = o.metrics[metric_key] when present (outcome accuracy, so a length-shaped reward does not decide), else
// o.reward. Whole groups only, like reward_std_filter. The refilling half of dynamic sampling (reading on until the
// batch is full) is the trainer side's `sample_strategy: dynamic_sampling`.
import { checkFinite, groupsByTask } from '../groups.js';
import type { Experience } from '../../../experience.js';
import { registerExperienceOperator } from '../registry.js';
import type { ExperienceOperatorModule } from '../types.js';

export interface DapoDynamicSamplingOptions {
  metricKey: string;
  correctThreshold: number;
}

const NAME = 'dapo_dynamic_sampling';

function outcomeScore(e: Experience, metricKey: string): number {
  const metric = e.metrics?.[metricKey];
  if (typeof metric === 'number') return metric;
  if (typeof e.reward === 'number') return e.reward;
  throw new Error(`experience operator '${NAME}': experience '${e.eid}' has no metric '${metricKey}' and no reward`);
}

export const dapoDynamicSampling: ExperienceOperatorModule<DapoDynamicSamplingOptions> = {
  description: 'keeps groups where some but not all responses are correct (DAPO dynamic sampling)',
  defaults: { metricKey: 'accuracy', correctThreshold: 0 },
  create: ({ metricKey, correctThreshold }) => {
    checkFinite(NAME, 'correct_threshold', correctThreshold);
    return {
      process: (experiences) => {
        const kept: Experience[] = [];
        let allCorrect = 0;
        let allWrong = 0;
        for (const group of groupsByTask(NAME, experiences)) {
          if (group.length < 2) continue;
          const correct = group.filter((e) => outcomeScore(e, metricKey) > correctThreshold).length;
          if (correct === 0) allWrong += group.length;
          else if (correct === group.length) allCorrect += group.length;
          else kept.push(...group);
        }
        return {
          experiences: kept,
          metrics: {
            filtered_count: experiences.length - kept.length,
            dropped_all_correct: allCorrect,
            dropped_all_wrong: allWrong,
          },
        };
      },
    };
  },
};

registerExperienceOperator('dapo_dynamic_sampling', dapoDynamicSampling);
