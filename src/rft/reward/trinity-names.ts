// Trinity-RFT's reward function names (its REWARD_FUNCTIONS registry and its examples' default_reward_fn_type) that
// have no reward function here, refused with why and what to use instead rather than as an unknown name:
//
//   default_reward_fn_type: openjudge_reward
//   → reward function 'openjudge_reward' is not available here: runs graders of the OpenJudge / RM-Gallery ...
//
// Imported last by ./registry.ts; a built-in registered under one of these names later takes over.
import { REWARD_FUNCTIONS } from './reward-registry.js';

const JUDGE_LIBRARY =
  'runs graders of the OpenJudge / RM-Gallery Python library: an LLM judge here is trajectory_accuracy_grader_reward ' +
  "(OpenJudge's trajectory accuracy grader), rubric_judge_reward (one score per response) or ruler_reward (a " +
  'ranking of the group), with an auxiliary model or an OpenAI-compatible endpoint as the judge';

export const UNAVAILABLE_REWARDS: readonly (readonly [string, string])[] = [
  ['rm_gallery_reward', JUDGE_LIBRARY],
  ['openjudge_reward', JUDGE_LIBRARY],
  ['openjudge_trajectory_accuracy_reward', JUDGE_LIBRARY],
  ['openjudge_multi_grader_reward', JUDGE_LIBRARY],
];

for (const [name, reason] of UNAVAILABLE_REWARDS) REWARD_FUNCTIONS.unavailable(name, reason);
