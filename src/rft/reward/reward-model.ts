// Reward-model rewards from an auxiliary model's token probabilities.
//
//   rm_yes_no_reward  a yes/no judge (a generative reward model, or any instruct model asked a yes/no question):
//                       prompt  = chat_template([system?, user = template(question, reference, rubric, response)],
//                                               add_generation_prompt)
//                       ℓ_yes   = Σ log p(yes_token ids | prompt),   ℓ_no = Σ log p(no_token ids | prompt)
//                                 (AuxiliaryModel.logprobs; a multi-token word is the product of its tokens)
//                       reward  = p(yes) / (p(yes) + p(no)) = 1 / (1 + exp(ℓ_no − ℓ_yes))             ∈ [0, 1]
//                     When the judge puts less than min_mass = p(yes) + p(no) on the two answers, it is not answering
//                     the question: a counted failure (judge_failure = 1, judge_failure_no_verdict = 1) with reward
//                     fallback_reward. Metrics: yes_probability (the reward before any fallback), yes_no_mass.
//
// A classifier head (HF *ForSequenceClassification's `score` weight on the last non-pad token's hidden state) is not
// offered: the auxiliary model contract (../auxiliary/types.ts) has no call that returns hidden states or head logits.
import type { AuxiliaryModel } from '../auxiliary/types.js';
import type { Tokenizer } from '../../tokenizer/index.js';
import { judgeFailureMetrics } from './judge-answer.js';
import { checkJudgeArgs, checkJudgeRoom, judgeMessages, judgeModel } from './judge-call.js';
import { checkRubricSource, checkTemplate, fillTemplate, taskQuestion, taskReference, taskRubric } from './judge-prompt.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

export const YES_NO_SYSTEM_PROMPT = 'You are a strict and fair judge. You answer with one word.';

export const YES_NO_RUBRIC = 'The response answers the question correctly and completely.';

export const YES_NO_TEMPLATE = `[Question]
{question}

[Reference answer]
{reference}

[Criteria]
{rubric}

[Response]
{response}

Does the response meet the criteria? Answer with one word: {yes_token} or {no_token}.`;

/** Placeholders a rm_yes_no_reward template may use ({response} is required). */
export const YES_NO_PLACEHOLDERS = ['question', 'reference', 'rubric', 'response', 'yes_token', 'no_token'] as const;

export interface YesNoOptions {
  judgeModel: string;
  rubric: string;
  rubricKey: string;
  systemPrompt: string;
  promptTemplate: string;
  yesToken: string;
  noToken: string;
  minMass: number;
  fallbackReward: number;
}

/**
 * p(yes) / (p(yes) + p(no)) and p(yes) + p(no) from the summed log-probs of the two answers, computed from their
 * difference so that two tiny probabilities still give a well-defined ratio.
 */
export function yesNoProbability(logprobYes: number, logprobNo: number): { yesProbability: number; mass: number } {
  const mass = Math.exp(logprobYes) + Math.exp(logprobNo);
  if (logprobYes === Number.NEGATIVE_INFINITY && logprobNo === Number.NEGATIVE_INFINITY) return { yesProbability: 0.5, mass };
  return { yesProbability: 1 / (1 + Math.exp(logprobNo - logprobYes)), mass };
}

function answerIds(tokenizer: Tokenizer, text: string, argument: string, where: string): number[] {
  const ids = tokenizer.encode(text);
  if (ids.length === 0) throw new Error(`${where}: argument '${argument}' (${JSON.stringify(text)}) encodes to no tokens`);
  return ids;
}

/** Σ log p(ids | prompt) from the judge, checking what it returned (one finite-or-−∞ value per id). */
async function answerLogprob(
  judge: AuxiliaryModel,
  promptIds: readonly number[],
  ids: readonly number[],
  signal: AbortSignal | undefined,
  where: string,
): Promise<number> {
  const logprobs = await judge.logprobs(promptIds, ids, signal ? { signal } : {});
  if (logprobs.length !== ids.length)
    throw new Error(`${where}: judge '${judge.name}' returned ${logprobs.length} log-probs for ${ids.length} tokens`);
  let sum = 0;
  for (const lp of logprobs) {
    if (Number.isNaN(lp) || lp > 1e-6)
      throw new Error(`${where}: judge '${judge.name}' returned log-prob ${lp}; expected a number ≤ 0`);
    sum += Math.min(lp, 0);
  }
  return sum;
}

export const rmYesNoReward: RewardModule<YesNoOptions> = {
  name: 'rm_yes_no_reward',
  description: "yes/no judge's token probability: p(yes) / (p(yes) + p(no)) after a judge prompt (AuxiliaryModel.logprobs)",
  defaults: {
    judgeModel: '',
    rubric: YES_NO_RUBRIC,
    rubricKey: '',
    systemPrompt: YES_NO_SYSTEM_PROMPT,
    promptTemplate: YES_NO_TEMPLATE,
    yesToken: 'Yes',
    noToken: 'No',
    minMass: 0.1,
    fallbackReward: 0,
  },
  check: (options, where) => {
    checkRubricSource(options, where);
    checkJudgeArgs(options, where);
    checkTemplate(options.promptTemplate, YES_NO_PLACEHOLDERS, ['response'], `${where}: prompt_template`);
    if (options.yesToken === '' || options.noToken === '' || options.yesToken === options.noToken)
      throw new Error(`${where}: arguments 'yes_token' and 'no_token' must be two different non-empty strings`);
    if (!(options.minMass >= 0 && options.minMass <= 1))
      throw new Error(`${where}: argument 'min_mass' must be in [0, 1], got ${options.minMass}`);
  },
  checkModels: (options, models, where) => {
    // the fixed prompt, then each answer word scored after it
    const prompt = fillTemplate(options.promptTemplate, {
      question: '',
      reference: '',
      rubric: options.rubricKey === '' ? options.rubric : '',
      response: '',
      yes_token: options.yesToken,
      no_token: options.noToken,
    });
    const judge = judgeModel(models, options.judgeModel, where);
    for (const answer of [options.yesToken, options.noToken])
      checkJudgeRoom(judge, judgeMessages(options.systemPrompt, prompt), answer, where);
  },
  score: async ({ response, task, auxiliaryModels, signal }, options) => {
    const where = "reward function 'rm_yes_no_reward'";
    const judge = judgeModel(auxiliaryModels, options.judgeModel, where);
    const tokenizer = judge.tokenizer;
    if (tokenizer === null)
      throw new Error(
        `${where}: judge '${judge.name}' has no tokenizer (an embedded auxiliary model, or a remote one with its model folder, is needed to build prompt ids)`,
      );
    const prompt = fillTemplate(options.promptTemplate, {
      question: taskQuestion(task, where),
      reference: taskReference(task),
      rubric: taskRubric(task, options, where),
      response,
      yes_token: options.yesToken,
      no_token: options.noToken,
    });
    const promptIds = tokenizer.encodeChat(judgeMessages(options.systemPrompt, prompt), { addGenerationPrompt: true });
    const yesIds = answerIds(tokenizer, options.yesToken, 'yes_token', where);
    const noIds = answerIds(tokenizer, options.noToken, 'no_token', where);
    const [logprobYes, logprobNo] = await Promise.all([
      answerLogprob(judge, promptIds, yesIds, signal, where),
      answerLogprob(judge, promptIds, noIds, signal, where),
    ]);
    const { yesProbability, mass } = yesNoProbability(logprobYes, logprobNo);
    const answered = mass >= options.minMass && mass > 0;
    return {
      reward: answered ? yesProbability : options.fallbackReward,
      metrics: {
        yes_probability: yesProbability,
        yes_no_mass: mass,
        ...judgeFailureMetrics(answered ? null : 'no_verdict', ['no_verdict']),
      },
    };
  },
};

REWARD_FUNCTIONS.registerModule(rmYesNoReward);
