// An environment episode scored by a reward function instead of by its environment (Trinity-RFT v0.6's
// frozen_lake_workflow: workflow_args reward_fn_type and reward_fn_args, e.g. OpenJudge's trajectory accuracy grader
// over the whole conversation in its grpo_frozenlake_openjudge example). Any environment workflow reads them:
//
//   response      = the episode's last reply
//   conversation  = the turns before it (system prompt, observations, earlier replies), as the judge reads them
//   reward        = rewardFn({ response, conversation, task, args: reward_fn_args }).reward
//                   in place of Σ step rewards − invalid_action_penalty · invalid actions
//   metrics       the reward's own (e.g. trajectory_score, judge_failure) and env_reward, the environment's reward
//   (experience_mode step: every step carries this reward; info.step_reward stays the environment's step reward)
//
// The reward function is named and its arguments checked before the episode is played, so a wrong name or argument
// (or a judge endpoint that is not set) fails the task at once, naming it. A judge that answers garbage gives its
// fallback reward (counted in judge_failure); upstream fell back to the environment's reward when the call raised.
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { ChatMessage } from '../../../tokenizer/index.js';
import { REWARD_FUNCTIONS, type ScoredResponse, scoreResponse } from '../../reward/registry.js';
import type { AnyRewardFn } from '../../reward/types.js';
import type { Task } from '../../task.js';

/** The workflow_args keys of an episode reward. */
export const EPISODE_REWARD_ARGS: readonly string[] = ['reward_fn_type', 'reward_fn_args'];

export interface EpisodeReward {
  name: string;
  fn: AnyRewardFn;
  args: Record<string, unknown>;
}

/** The episode reward a task's arguments name (null when reward_fn_type is absent); errors name the argument. */
export async function episodeReward(
  args: Readonly<Record<string, unknown>>,
  who: string,
  baseDir?: string,
): Promise<EpisodeReward | null> {
  const { reward_fn_type: name, reward_fn_args: rewardArgs = {} } = args;
  if (name === undefined || name === null) {
    if (args.reward_fn_args !== undefined)
      throw new Error(`${who}: workflow_args.reward_fn_args is given without reward_fn_type (the reward it is for)`);
    return null;
  }
  if (typeof name !== 'string' || name === '')
    throw new Error(`${who}: workflow_args.reward_fn_type must be a reward function's name, got ${JSON.stringify(name)}`);
  if (typeof rewardArgs !== 'object' || rewardArgs === null || Array.isArray(rewardArgs))
    throw new Error(`${who}: workflow_args.reward_fn_args must be a mapping, got ${JSON.stringify(rewardArgs)}`);
  const fn = await REWARD_FUNCTIONS.resolve(name, baseDir);
  REWARD_FUNCTIONS.checkArgs(name, rewardArgs as Record<string, unknown>);
  return { name, fn, args: rewardArgs as Record<string, unknown> };
}

/** The episode's reward from the reward function (see the header); env_reward keeps the environment's own. */
export async function scoreEpisode(
  reward: EpisodeReward,
  episode: { task: Task; messages: readonly ChatMessage[]; envReward: number },
  context: { signal: AbortSignal; auxiliaryModels?: AuxiliaryModels },
): Promise<ScoredResponse> {
  const { task, messages, envReward } = episode;
  const lastReply = messages.findLastIndex((turn) => turn.role === 'assistant');
  const scored = await scoreResponse(
    reward.fn,
    {
      task,
      args: reward.args,
      response: lastReply < 0 ? '' : (messages[lastReply] as ChatMessage).content,
      conversation: lastReply < 0 ? messages : messages.slice(0, lastReply),
      signal: context.signal,
      ...(context.auxiliaryModels ? { auxiliaryModels: context.auxiliaryModels } : {}),
    },
    `reward function '${reward.name}'`,
  );
  return { reward: scored.reward, metrics: { ...scored.metrics, env_reward: envReward } };
}
