// math_dapo_reward: DAPO's math reward (Trinity-RFT's MathDAPORewardFn, https://arxiv.org/abs/2503.14476), the
// default reward of upstream's dapo_math example. Two parts, summed into the reward and reported as metrics:
//
//   accuracy      1 when the answer equals the reference, else 0; the answer is read from the text after the last
//                 </think>: its last \boxed{…}, else that whole text (../reward/math-answer.ts compares them)
//   format_score  the overlong penalty, 0 unless enable_overlong_penalty; with n = the response's token count,
//                 L = max_response_length, C = cache_length, expected = L − C:
//                   n < expected        → 0
//                   expected ≤ n ≤ L    → (expected − n) / C · penalty_factor      (0 down to −penalty_factor)
//                   n > L               → −penalty_factor
//
// e.g. L = 20480, C = 4096, penalty_factor 1: n = 18432 → (16384 − 18432) / 4096 = −0.5.
// The token count is the caller's (ResponseInput.responseTokens: the built-in single-turn workflows pass it); a
// caller that has none cannot score with the penalty on, which is an error rather than a silent 0.
import type { Task } from '../task.js';
import { extractBoxed, mathAccuracy } from './math-answer.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

export interface MathDapoOptions {
  enableOverlongPenalty: boolean;
  penaltyFactor: number | null;
  maxResponseLength: number | null;
  cacheLength: number | null;
}

/** The answer of a response as DAPO reads it: after the last </think>, the last \boxed{…}, else the whole text. */
export function dapoAnswer(response: string): string {
  const final = response.split('</think>').at(-1) as string;
  return (extractBoxed(final) ?? final).trim();
}

/** DAPO's overlong penalty for a response of `tokens` tokens (see the header); 0 down to −penaltyFactor. */
export function overlongPenalty(tokens: number, maxResponseLength: number, cacheLength: number, penaltyFactor: number): number {
  const expected = maxResponseLength - cacheLength;
  if (tokens < expected) return 0;
  if (tokens > maxResponseLength) return -penaltyFactor;
  return ((expected - tokens) / cacheLength) * penaltyFactor;
}

function reference(task: Task): string {
  if (typeof task.response !== 'string' || task.response.trim() === '')
    throw new Error(`math_dapo_reward: task ${task.id} has no reference answer (the taskset's response_key)`);
  return task.response;
}

export const mathDapoReward: RewardModule<MathDapoOptions> = {
  name: 'math_dapo_reward',
  description:
    "DAPO: accuracy of the \\boxed{} answer (1/0) + with enable_overlong_penalty, a penalty from the response's token count",
  defaults: { enableOverlongPenalty: false, penaltyFactor: null, maxResponseLength: null, cacheLength: null },
  check: ({ enableOverlongPenalty, penaltyFactor, maxResponseLength, cacheLength }, where) => {
    if (!enableOverlongPenalty) return;
    const missing = [
      ['max_response_length', maxResponseLength],
      ['cache_length', cacheLength],
      ['penalty_factor', penaltyFactor],
    ].filter(([, value]) => typeof value !== 'number' || !Number.isFinite(value));
    if (missing.length > 0)
      throw new Error(
        `${where}: enable_overlong_penalty needs numbers for ${missing.map(([key]) => key).join(', ')} (reward_fn_args)`,
      );
    if (!((cacheLength as number) > 0 && (maxResponseLength as number) > (cacheLength as number)))
      throw new Error(
        `${where}: max_response_length (${maxResponseLength}) must be greater than cache_length (${cacheLength}) > 0`,
      );
  },
  score: ({ response, task, responseTokens }, { enableOverlongPenalty, penaltyFactor, maxResponseLength, cacheLength }) => {
    const accuracy = mathAccuracy(response, reference(task), dapoAnswer);
    let format = 0;
    if (enableOverlongPenalty) {
      if (responseTokens === undefined)
        throw new Error(
          `math_dapo_reward: enable_overlong_penalty needs the response's token count, which this workflow does not ` +
            `pass (task ${task.id}); the built-in single-turn workflows (math_boxed_workflow, simple_workflow) pass it`,
        );
      format = overlongPenalty(responseTokens, maxResponseLength as number, cacheLength as number, penaltyFactor as number);
    }
    return { reward: accuracy + format, metrics: { accuracy, format_score: format } };
  },
};

REWARD_FUNCTIONS.registerModule(mathDapoReward);
