// math_trainable_ruler_workflow (Trinity-RFT's MathTrainableRULERWorkflow, its grpo_gsm8k_trainable_ruler example;
// after OpenPipe ART's RULER and Kimi K2's self-critique): the policy is also its own RULER judge, and both jobs are
// trained. A task pretends its reference answer is known with probability p (workflow_args
// probability_ground_truth_available, upstream's fixed PROBABILITY_GROUND_TRUTH_AVAILABLE = 0.2), drawn from the task's
// seed:
//
//   responses y_1..y_n        = policy(math_workflow's prompt), n = repeat_times
//   gold_i                    = the task's reward (default math_reward, ∈ [−0.1, 1.1]) of y_i; metrics gold_reward and
//                               the reward's parts
//   g_i                       = (gold_i + 0.1) / 1.2                                  (gold scaled into [0, 1])
//   judge prompt              = the question, the answer format, "Candidate solution i: y_i", asking for a final list
//                               [s_1, ..., s_n] of scores in [0, 1]                  (parsed as the last [...] list)
//
//   reference known (u < p):  n judge samples j_1..j_n from the policy; reward(y_i) = gold_i;
//                             reward(j_k) = 1 − (1/n) Σ_i |s_ki − g_i| when j_k's list parses, else 0; the judge
//                             samples are experiences too, of task "<task id>-ruler" (their own GRPO group), metric
//                             reward_for_judger
//   reference unknown:        one judge sample j (not trained on); reward(y_i) = s_i when j's list parses, else 0
//
// Every experience carries judge_success, the share of the task's judge samples whose list parsed (a score outside
// [0, 1] is a failure here; upstream clipped it). Evaluation scores with the task's reward alone and asks no judge
// (upstream judged there too, and an eval task's RULER scores replaced its rewards four times in five).
import type { Completion } from '../../engine/index.js';
import type { ChatMessage } from '../../tokenizer/index.js';
import { seededRandom } from '../buffer/random.js';
import type { Experience } from '../experience.js';
import { parseLastListVerdict } from '../reward/judge-answer.js';
import { taskQuestion } from '../reward/judge-prompt.js';
import { REWARD_FUNCTIONS, type ScoredResponse, scoreResponses } from '../reward/registry.js';
import { MATH_SYSTEM_PROMPT, promptMessages, sampleResponses } from './single-turn.js';
import type { WorkflowContext, WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

const NAME = 'math_trainable_ruler_workflow';
const DEFAULT_PROBABILITY = 0.2;

/** The task id of the judge's experiences: a GRPO group of their own. */
export const judgeTaskId = (taskId: string): string => `${taskId}-ruler`;

/** math_reward's range [−0.1, 1.1] mapped onto the judge's [0, 1]. */
export const scaledGold = (gold: number): number => (gold + 0.1) / 1.2;

/** The judge's messages for the n responses of a question (see the header). */
export function judgeMessages(question: string, responses: readonly string[]): ChatMessage[] {
  const n = responses.length;
  const solutions = responses.map((response, i) => `Candidate solution ${i + 1}: ${response}`).join('\n\n');
  return [
    {
      role: 'system',
      content:
        `You are a fair judge. The user gives a question and ${n} candidate solutions to it. Compare the solutions, ` +
        'decide how well each one solves the question, and give each a score from 0 to 1.',
    },
    {
      role: 'user',
      content:
        `Here are a question and ${n} candidate solutions to it.\nQuestion: ${question}\n\nRequired format of a ` +
        'solution: the reasoning inside <think> </think>, then the final answer inside <answer> </answer>.\n\n' +
        `${solutions}\n\nScore each solution from 0 to 1 by how well it solves the question. You may compare them and ` +
        'reason briefly first. End your answer with the list of scores, in order: ' +
        `[score of solution 1, ..., score of solution ${n}]`,
    },
  ];
}

/** One judge answer read against the responses' scaled gold rewards (null: no gold, the reference is unknown). */
export function judgeVerdict(
  answer: string,
  n: number,
  gold: readonly number[] | null,
): { scores: number[] | null; reward: number } {
  const verdict = parseLastListVerdict(answer, n, { min: 0, max: 1 });
  if (!verdict.ok) return { scores: null, reward: 0 };
  const mae = gold === null ? 0 : verdict.value.reduce((sum, s, i) => sum + Math.abs(s - (gold[i] as number)), 0) / n;
  return { scores: verdict.value, reward: gold === null ? 0 : 1 - mae };
}

function probabilityOf(args: Readonly<Record<string, unknown>>): number {
  const p = args.probability_ground_truth_available ?? DEFAULT_PROBABILITY;
  if (typeof p !== 'number' || !(p >= 0 && p <= 1))
    throw new Error(
      `${NAME}: workflow_args.probability_ground_truth_available must be a number in [0, 1], got ${JSON.stringify(p)}`,
    );
  return p;
}

async function run(context: WorkflowContext): Promise<Experience[]> {
  const { task, model, repeatTimes: n, seed, runIdBase, signal, auxiliaryModels, baseDir, isEval } = context;
  const probability = probabilityOf(task.workflowArgs ?? {});
  const rewardName = task.rewardFn ?? 'math_reward';
  const rewardFn = await REWARD_FUNCTIONS.resolve(rewardName, baseDir);
  const messages = promptMessages(task, MATH_SYSTEM_PROMPT, NAME);
  const policy = await sampleResponses(context, messages, NAME, { n, seed });
  const gold = await scoreResponses(
    rewardFn,
    {
      responses: policy.responses,
      responseTokens: policy.completions.map((c) => c.tokenIds.length),
      task,
      args: { ...task.rewardFnArgs },
      signal,
      auxiliaryModels,
    },
    `reward function '${rewardName}'`,
  );
  const goldMetrics = (scored: ScoredResponse) => ({ ...scored.metrics, gold_reward: scored.reward });
  const transcript = (response: string) => [...messages.map((m) => ({ ...m })), { role: 'assistant', content: response }];
  const policyExperience = (i: number, reward: number, extra: Record<string, number>) =>
    model.toExperience(policy.completions[i] as Completion, {
      reward,
      metrics: { ...goldMetrics(gold[i] as ScoredResponse), ...extra },
      responseText: policy.responses[i] as string,
      messages: transcript(policy.responses[i] as string),
    });
  if (isEval) return gold.map((scored, i) => policyExperience(i, scored.reward, {}));

  const known = seededRandom(seed, 0x52554c)() < probability; // 'RUL'
  const judgeAsk = judgeMessages(taskQuestion(task, NAME), policy.responses);
  const judge = await sampleResponses(context, judgeAsk, `${NAME} (judge)`, { n: known ? n : 1, seed: seed + 1, prefix: '' });
  const verdicts = judge.responses.map((answer) => judgeVerdict(answer, n, known ? gold.map((g) => scaledGold(g.reward)) : null));
  const parsed = verdicts.filter((v) => v.scores !== null);
  const judgeSuccess = parsed.length / verdicts.length;

  if (!known) {
    // the mean of the parsed lists' scores (one judge sample: its list), 0 when none parsed
    const mean = (i: number) => parsed.reduce((sum, v) => sum + (v.scores?.[i] as number), 0) / Math.max(parsed.length, 1);
    return gold.map((_, i) => policyExperience(i, mean(i), { judge_success: judgeSuccess }));
  }
  const responses = gold.map((scored, i) => policyExperience(i, scored.reward, { judge_success: judgeSuccess }));
  const judges = verdicts.map(({ reward }, k) =>
    model.toExperience(judge.completions[k] as Completion, {
      reward,
      metrics: { judge_success: judgeSuccess, reward_for_judger: reward },
      responseText: judge.responses[k] as string,
      messages: [...judgeAsk.map((m) => ({ ...m })), { role: 'assistant', content: judge.responses[k] as string }],
      taskId: judgeTaskId(task.id),
      runId: runIdBase + k,
    }),
  );
  return [...responses, ...judges];
}

export const mathTrainableRulerWorkflow: WorkflowSpec = {
  repeatable: true,
  workflowArgs: ['probability_ground_truth_available'],
  checkArgs: (args) => void probabilityOf(args),
  description: 'math_workflow whose responses the policy itself judges (RULER), training the judge where gold is known',
  run,
};

WORKFLOWS.register(NAME, mathTrainableRulerWorkflow);
