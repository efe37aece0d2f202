// LLM-as-a-judge rewards: an auxiliary model (explorer.auxiliary_models) grades responses against a rubric.
//
//   rubric_judge_reward  pointwise (Trinity-RFT's rubric_judge_workflow, as a reward): one judge call per response,
//                        verdict line "Score: N", N in [min_score, max_score]
//                          reward = (N − min_score) / (max_score − min_score)                       ∈ [0, 1]
//   ruler_reward         RULER (Trinity-RFT's math_ruler_workflow; OpenPipe ART's ruler.py): all responses of a task
//                        in ONE call, compared with each other, verdict line "Scores: [s1, …, sn]"
//                          reward_i = (s_i − min_score) / (max_score − min_score)                   ∈ [0, 1]
//
// Verdicts are parsed strictly (./judge-answer.ts). An answer that does not parse gives every response it covers
// reward = fallback_reward and metric judge_failure = 1 (with judge_failure_<kind>: empty, no_verdict, out_of_range,
// wrong_count), so the rollout metrics show rollout/judge_failure/mean = the share of responses the judge failed on.
// Trinity-RFT's RULER silently gave 0 and clipped out-of-range scores; here nothing is clipped. A failed RULER call
// gives the whole group the same fallback, so its group advantages are 0: the group teaches nothing, not noise.
//
// Arguments (reward_fn_args): judge_model (an auxiliary model's name; '' = the first), rubric, or rubric_key (a column
// of the task's row holding its own rubric; takes precedence over rubric), min_score / max_score, system_prompt, prompt_template (placeholders
// below), fallback_reward, max_tokens, temperature, verdict_format: the verdict line above (score_line / scores_line,
// the defaults), or the forms Trinity-RFT's judge workflows ask for (json_rating / last_list, ./judge-answer.ts;
// ../workflow/judge-workflows.ts sets them).
import type { Task } from '../task.js';
import {
  GROUP_FAILURE_KINDS,
  judgeFailureMetrics,
  POINTWISE_FAILURE_KINDS,
  parseLastListVerdict,
  parseRatingVerdict,
  parseScoresVerdict,
  parseScoreVerdict,
} from './judge-answer.js';
import { askJudge, checkJudgeArgs, checkJudgeRoom, type JudgeMessage, judgeMessages, judgeModel } from './judge-call.js';
import { checkRubricSource, checkTemplate, fillTemplate, taskQuestion, taskReference, taskRubric } from './judge-prompt.js';
import type { GroupRewardModule, RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';
import type { RewardOutput } from './types.js';

export const RUBRIC_JUDGE_SYSTEM_PROMPT =
  'You are a strict and fair judge. You grade a response to a question against a rubric, and you follow the ' +
  'requested output format exactly.';

export const RUBRIC_JUDGE_TEMPLATE = `Grade the response below against the rubric.

[Question]
{question}

[Reference answer]
{reference}

[Rubric]
{rubric}

[Response]
{response}

Think briefly if you need to. Then end your answer with one final line of the form "Score: N", where N is a number \
from {min_score} (fails the rubric) to {max_score} (fully meets it). Write nothing after that line.`;

/** Placeholders a rubric_judge_reward template may use ({response} is required). */
export const RUBRIC_JUDGE_PLACEHOLDERS = ['question', 'reference', 'rubric', 'response', 'min_score', 'max_score'] as const;

export interface RubricJudgeOptions {
  judgeModel: string;
  rubric: string;
  rubricKey: string;
  minScore: number;
  maxScore: number;
  systemPrompt: string;
  promptTemplate: string;
  fallbackReward: number;
  maxTokens: number;
  temperature: number;
  /** How the verdict is written: see the header (each reward lists the forms it reads). */
  verdictFormat: string;
}

/** The verdict forms each judge reward reads, its default first. */
const POINTWISE_VERDICTS = ['score_line', 'json_rating'] as const;
const GROUP_VERDICTS = ['scores_line', 'last_list'] as const;

function checkVerdictFormat(format: string, known: readonly string[], where: string): void {
  if (!known.includes(format))
    throw new Error(`${where}: argument 'verdict_format' must be one of ${known.join(', ')}, got ${JSON.stringify(format)}`);
}

type JudgeOptions = Pick<RubricJudgeOptions, 'rubric' | 'rubricKey' | 'promptTemplate' | 'minScore' | 'maxScore'>;

/** The placeholder values every judge template shares. */
function taskValues(task: Task, options: JudgeOptions, where: string): Record<string, string> {
  return {
    question: taskQuestion(task, where),
    reference: taskReference(task),
    rubric: taskRubric(task, options, where),
    min_score: String(options.minScore),
    max_score: String(options.maxScore),
  };
}

/**
 * The judge's fixed prompt: the template with the task's text (question, reference, a per-row rubric) and the
 * responses left empty, as checkJudgeRoom measures it at the start of a run.
 */
function fixedPrompt(options: RubricJudgeOptions, extra: Record<string, string>): JudgeMessage[] {
  const prompt = fillTemplate(options.promptTemplate, {
    question: '',
    reference: '',
    rubric: options.rubricKey === '' ? options.rubric : '',
    min_score: String(options.minScore),
    max_score: String(options.maxScore),
    ...extra,
  });
  return judgeMessages(options.systemPrompt, prompt);
}

const normalised = (score: number, { minScore, maxScore }: JudgeOptions): number => (score - minScore) / (maxScore - minScore);

export const rubricJudgeReward: RewardModule<RubricJudgeOptions> = {
  name: 'rubric_judge_reward',
  description: 'LLM judge grades each response against a rubric; verdict "Score: N" → (N − min)/(max − min)',
  defaults: {
    judgeModel: '',
    rubric: '',
    rubricKey: '',
    minScore: 0,
    maxScore: 10,
    systemPrompt: RUBRIC_JUDGE_SYSTEM_PROMPT,
    promptTemplate: RUBRIC_JUDGE_TEMPLATE,
    fallbackReward: 0,
    maxTokens: 1024,
    temperature: 0,
    verdictFormat: 'score_line',
  },
  check: (options, where) => {
    checkRubricSource(options, where);
    checkJudgeArgs(options, where);
    checkVerdictFormat(options.verdictFormat, POINTWISE_VERDICTS, where);
    checkTemplate(options.promptTemplate, RUBRIC_JUDGE_PLACEHOLDERS, ['response'], `${where}: prompt_template`);
  },
  checkModels: (options, models, where) => {
    const judge = judgeModel(models, options.judgeModel, where);
    const reply = options.verdictFormat === 'json_rating' ? '```json\n{"rating": 10}\n```' : `Score: ${options.maxScore}`;
    checkJudgeRoom(judge, fixedPrompt(options, { response: '' }), reply, where);
  },
  score: async ({ response, task, auxiliaryModels, signal }, options) => {
    const where = "reward function 'rubric_judge_reward'";
    const judge = judgeModel(auxiliaryModels, options.judgeModel, where);
    const prompt = fillTemplate(options.promptTemplate, { ...taskValues(task, options, where), response });
    const answer = await askJudge(judge, judgeMessages(options.systemPrompt, prompt), { ...options, signal }, where);
    const scale = { min: options.minScore, max: options.maxScore };
    const verdict =
      options.verdictFormat === 'json_rating' ? parseRatingVerdict(answer, scale) : parseScoreVerdict(answer, scale);
    if (!verdict.ok)
      return { reward: options.fallbackReward, metrics: judgeFailureMetrics(verdict.kind, POINTWISE_FAILURE_KINDS) };
    return {
      reward: normalised(verdict.value, options),
      metrics: { judge_score: verdict.value, ...judgeFailureMetrics(null, POINTWISE_FAILURE_KINDS) },
    };
  },
};

export const RULER_SYSTEM_PROMPT =
  'You are a fair judge. You are given a question and several candidate responses to it. You compare the responses ' +
  'with each other and score each one, and you follow the requested output format exactly.';

/** RULER's default rubric: relative quality, judged against the other responses of the same group. */
export const RULER_RUBRIC =
  '- A response that achieves the goal of the question scores higher than one that does not.\n' +
  '- Among responses that achieve it, a correct, complete and concise one scores higher than a wordy or partly ' +
  'wrong one.\n' +
  '- Use the whole scale: the scores should separate better responses from worse ones.';

export const RULER_TEMPLATE = `Below are a question and {count} candidate responses to it. Compare the responses with \
each other and score each one against the rubric.

[Question]
{question}

[Reference answer]
{reference}

[Rubric]
{rubric}

{responses}

Think briefly if you need to. Then end your answer with one final line of the form "Scores: [s1, s2, ...]": a JSON \
list of exactly {count} numbers from {min_score} to {max_score}, one per response, in the order given. Write nothing \
after that line.`;

/** Placeholders a ruler_reward template may use ({responses} is required). */
export const RULER_PLACEHOLDERS = ['question', 'reference', 'rubric', 'responses', 'count', 'min_score', 'max_score'] as const;

/** The candidates as the RULER prompt lists them: "[Response 1]\n…\n\n[Response 2]\n…". */
export const rulerCandidates = (responses: readonly string[]): string =>
  responses.map((response, i) => `[Response ${i + 1}]\n${response}`).join('\n\n');

export const rulerReward: GroupRewardModule<RubricJudgeOptions> = {
  kind: 'group',
  name: 'ruler_reward',
  description: 'RULER: one LLM judge call scores all responses of a task relative to each other ("Scores: [...]")',
  defaults: {
    judgeModel: '',
    rubric: RULER_RUBRIC,
    rubricKey: '',
    minScore: 0,
    maxScore: 1,
    systemPrompt: RULER_SYSTEM_PROMPT,
    promptTemplate: RULER_TEMPLATE,
    fallbackReward: 0,
    maxTokens: 2048,
    temperature: 0,
    verdictFormat: 'scores_line',
  },
  check: (options, where) => {
    checkRubricSource(options, where);
    checkJudgeArgs(options, where);
    checkVerdictFormat(options.verdictFormat, GROUP_VERDICTS, where);
    checkTemplate(options.promptTemplate, RULER_PLACEHOLDERS, ['responses'], `${where}: prompt_template`);
  },
  checkModels: (options, models, where) => {
    const judge = judgeModel(models, options.judgeModel, where);
    const reply = options.verdictFormat === 'last_list' ? `[${options.maxScore}]` : `Scores: [${options.maxScore}]`;
    checkJudgeRoom(judge, fixedPrompt(options, { responses: '', count: '1' }), reply, where);
  },
  scoreGroup: async ({ responses, task, auxiliaryModels, signal }, options): Promise<RewardOutput[]> => {
    const where = "reward function 'ruler_reward'";
    const judge = judgeModel(auxiliaryModels, options.judgeModel, where);
    const prompt = fillTemplate(options.promptTemplate, {
      ...taskValues(task, options, where),
      responses: rulerCandidates(responses),
      count: String(responses.length),
    });
    const answer = await askJudge(judge, judgeMessages(options.systemPrompt, prompt), { ...options, signal }, where);
    const scale = { min: options.minScore, max: options.maxScore };
    const verdict =
      options.verdictFormat === 'last_list'
        ? parseLastListVerdict(answer, responses.length, scale)
        : parseScoresVerdict(answer, responses.length, scale);
    if (!verdict.ok) {
      const metrics = judgeFailureMetrics(verdict.kind, GROUP_FAILURE_KINDS);
      return responses.map(() => ({ reward: options.fallbackReward, metrics: { ...metrics } }));
    }
    return verdict.value.map((score) => ({
      reward: normalised(score, options),
      metrics: { judge_score: score, ...judgeFailureMetrics(null, GROUP_FAILURE_KINDS) },
    }));
  },
};

REWARD_FUNCTIONS.registerModule(rubricJudgeReward);
REWARD_FUNCTIONS.registerModule(rulerReward);
