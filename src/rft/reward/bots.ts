// bots_math_boxed_reward (Trinity-RFT's BOTS example, BOTSMathBoxedRewardFn): the reward of bots_math_boxed_workflow.
//
//   accuracy     = 1 when the response's final answer equals the reference, else 0: the answer is found as
//                  extractAnswer finds it (the last \boxed{}, else "answer is" / "answer:", else the last number; BOTS'
//                  match_answer looks at the same markers) and compared as exact rationals or normalised text
//                  (./math-answer.ts; no symbolic algebra, where BOTS falls back to sympy)
//   format_score = −format_score_coef when with_think and the response lacks exactly one <think>…</think> block
//   reward       = accuracy + format_score
//
// It differs from math_boxed_reward in where it looks for the answer: math_boxed_reward reads only \boxed{}.
import type { Task } from '../task.js';
import { hasThinkBlock } from './format.js';
import { mathAccuracy } from './math-answer.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

function reference(task: Task): string {
  if (typeof task.response !== 'string' || task.response.trim() === '')
    throw new Error(`bots_math_boxed_reward: task ${task.id} has no reference answer (the taskset's response_key)`);
  return task.response;
}

export const botsMathBoxedReward: RewardModule<{ withThink: boolean; formatScoreCoef: number }> = {
  name: 'bots_math_boxed_reward',
  description:
    'BOTS\' math reward: accuracy of the final answer (\\boxed{}, "answer is", last number); with_think: -format_score_coef without one <think> block',
  defaults: { withThink: false, formatScoreCoef: 0.1 },
  score: ({ response, task }, { withThink, formatScoreCoef }) => {
    const accuracy = mathAccuracy(response, reference(task));
    const format = withThink && !hasThinkBlock(response) ? -formatScoreCoef : 0;
    return { reward: accuracy + format, metrics: { accuracy, format_score: format } };
  },
};

REWARD_FUNCTIONS.registerModule(botsMathBoxedReward);
