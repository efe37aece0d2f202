// Built-in reward functions (Trinity-RFT's `default_reward_fn_type` names). Each scores one response against its
// task (task.response is the reference answer) and reports its parts as metrics; YAML arguments (reward_fn_args)
// override the defaults listed here.
//
//   accuracy_reward    accuracy = 1 if the final answer equals the reference (../reward/math-answer.ts), else 0
//   format_reward      format_score = +score if the text matches `pattern`, else -score
//   math_reward        accuracy + format_score  (Trinity-RFT's MathRewardFn: <think>…</think><answer>…</answer>)
//   math_boxed_reward  accuracy of the last \boxed{…}, and with_think: format_score = -format_score_coef when the
//                      <think>…</think> block is missing or repeated (Trinity-RFT's MathBoxedRewardFn)
import type { Task } from '../task.js';
import { hasThinkBlock, matchesFormat, THINK_ANSWER_PATTERN } from './format.js';
import { extractBoxed, mathAccuracy } from './math-answer.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

function reference(task: Task, who: string): string {
  if (typeof task.response !== 'string' || task.response.trim() === '')
    throw new Error(`${who}: task ${task.id} has no reference answer (the taskset's response_key)`);
  return task.response;
}

export const accuracyReward: RewardModule<Record<string, never>> = {
  name: 'accuracy_reward',
  description: 'accuracy = 1 when the final answer (\\boxed{}, <answer>, "answer is", last number) equals the reference',
  defaults: {},
  score: ({ response, task }) => {
    const accuracy = mathAccuracy(response, reference(task, 'accuracy_reward'));
    return { reward: accuracy, metrics: { accuracy } };
  },
};

export const formatReward: RewardModule<{ pattern: string; score: number }> = {
  name: 'format_reward',
  description: 'format_score = +score when the response matches pattern (Python re.match, DOTALL|MULTILINE), else -score',
  defaults: { pattern: THINK_ANSWER_PATTERN, score: 0.1 },
  score: ({ response }, { pattern, score }) => {
    const formatScore = matchesFormat(response, pattern) ? score : -score;
    return { reward: formatScore, metrics: { format_score: formatScore } };
  },
};

export const mathReward: RewardModule<{ formatPattern: string; formatScore: number }> = {
  name: 'math_reward',
  description: 'accuracy + format_score: the answer checked against the reference, ±format_score for <think>/<answer>',
  defaults: { formatPattern: THINK_ANSWER_PATTERN, formatScore: 0.1 },
  score: ({ response, task }, { formatPattern, formatScore }) => {
    const accuracy = mathAccuracy(response, reference(task, 'math_reward'));
    const format = matchesFormat(response, formatPattern) ? formatScore : -formatScore;
    return { reward: accuracy + format, metrics: { accuracy, format_score: format } };
  },
};

export const mathBoxedReward: RewardModule<{ withThink: boolean; formatScoreCoef: number }> = {
  name: 'math_boxed_reward',
  description: 'accuracy of the last \\boxed{} answer; with_think: -format_score_coef without one <think>…</think> block',
  defaults: { withThink: false, formatScoreCoef: 0.1 },
  score: ({ response, task }, { withThink, formatScoreCoef }) => {
    const accuracy = mathAccuracy(response, reference(task, 'math_boxed_reward'), extractBoxed);
    const format = withThink && !hasThinkBlock(response) ? -formatScoreCoef : 0;
    return { reward: accuracy + format, metrics: { accuracy, format_score: format } };
  },
};

REWARD_FUNCTIONS.registerModule(accuracyReward);
REWARD_FUNCTIONS.registerModule(formatReward);
REWARD_FUNCTIONS.registerModule(mathReward);
REWARD_FUNCTIONS.registerModule(mathBoxedReward);
