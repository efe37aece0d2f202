// trajectory_accuracy_grader_reward: OpenJudge's TrajectoryAccuracyGrader (Trinity-RFT v0.6's open_judge_reward.py,
// the reward of its grpo_gsm8k_openjudge and grpo_frozenlake_openjudge examples). An LLM judge reads the whole
// conversation, the response last, and grades how well it reached the user's goal on OpenJudge's 1-3 scale:
//
//   3  reaches the goal, no step unrelated to it       2  reaches the goal with clearly unneeded steps
//   1  does not reach the goal
//
//   trajectory = "[role] content" per turn (system turns included; "Tool Calls: <JSON>" under a turn that has
//                them), joined by blank lines: the response's conversation (RewardContext.conversation, else the
//                task's question as one user turn) ++ [assistant] response
//   verdict    = a JSON object {"reason": "...", "score": s}: the first ```json fenced block, else the text from the
//                first "{" to the last "}" (a trailing comma before "}" is allowed); s a number in [1, 3]
//   reward     = clip((s − score_min) / (score_max − score_min), 0, 1)   normalize_score: true (default)
//              = s                                                       normalize_score: false
//   metrics    trajectory_score = s (Trinity's trajectory_score), judge_failure and judge_failure_<kind>
//
// A verdict that does not parse (or a score outside [1, 3]) is a judge failure: reward = fallback_reward (default 0,
// what upstream's failed grade, score 0, normalises to) and judge_failure = 1. Upstream clamped scores into [1, 3];
// here an out-of-range score is counted as a failure, as every judge here does (./judge-answer.ts).
//
// The judge (upstream: an OpenAI-compatible endpoint named by environment variables, read when the reward is made):
//   judge_model ''   (default) the endpoint $<judge_api_base_url_env> (default OPENAI_BASE_URL, …/v1) with the key
//                    $<judge_api_key_env> (default OPENAI_API_KEY; may be unset), model judge_model_name, else
//                    model_name (default qwen3-max). The base URL must be set: checked with the arguments, so
//                    `trinity config check` and the run's start say so before any task.
//   judge_model NAME an auxiliary model of explorer.auxiliary_models instead (its context checked at the start).
// A judge that cannot be reached is an error (the attempt fails and is retried as configured), not a score of 0 as
// upstream's grader gave.
//
// Other arguments: temperature (0, as upstream), max_tokens (1024: the judge's answer is bounded), fallback_reward.
import type { OpenAI } from 'openai';
import type { ChatMessage } from '../../tokenizer/index.js';
import { judgeFailureMetrics, type JudgeVerdict, POINTWISE_FAILURE_KINDS, type ScoreScale } from './judge-answer.js';
import { askJudge, checkJudgeArgs, checkJudgeRoom, type JudgeEndpoint, judgeMessages, judgeModel } from './judge-call.js';
import { fillTemplate, taskQuestion } from './judge-prompt.js';
import type { RewardModule } from './module.js';
import { REWARD_FUNCTIONS } from './reward-registry.js';

/** OpenJudge's trajectory accuracy scale. */
export const TRAJECTORY_SCALE: ScoreScale = { min: 1, max: 3 };

/** The judge's one user turn; {trajectory} is the rendered conversation. The scale and the JSON keys are the interface. */
export const TRAJECTORY_ACCURACY_TEMPLATE = `You evaluate the trajectory of an AI agent: the conversation below, in which \
the agent works towards what the user asked for through its replies, actions and tool calls. Judge its trajectory \
accuracy: how correctly and effectively the whole sequence of steps reaches the user's goal.

Consider:
1. Logical coherence: does each step follow sensibly from the ones before it?
2. Progress towards the goal: does the trajectory move clearly towards the objective?
3. Efficiency: is it reasonably direct (it need not be perfect, but it should not waste steps)?

First work out the goal from the user's input (or, when no input is given, from the first message) and look at the \
final message's output. Then grade how well the trajectory reaches that goal:
- Score 3: reaches the goal, with no step unrelated to the task (sensible extra steps that improve the result are fine).
- Score 2: reaches the goal, but with clearly unnecessary steps unrelated to the task.
- Score 1: does not reach the goal.

<trajectory>
{trajectory}
</trajectory>

Answer with a JSON object in this format:
\`\`\`json
{{"reason": "<why this score>", "score": <1, 2 or 3>}}
\`\`\`
JSON:`;

/** One turn's content as text (content parts: their text joined with spaces, as OpenJudge formats them). */
function turnText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return content
      .filter((part): part is { type: 'text'; text: string } => (part as { type?: unknown })?.type === 'text')
      .map((part) => part.text)
      .join(' ');
  return content === undefined || content === null ? '' : String(content);
}

/** The conversation as the judge reads it: "[role] content" per turn, tool calls as JSON, blank lines between turns. */
export function renderTrajectory(turns: readonly Pick<ChatMessage, 'role' | 'content' | 'tool_calls'>[]): string {
  return turns
    .map((turn) => {
      const text = turnText(turn.content);
      const head = text === '' ? `[${turn.role}]` : `[${turn.role}] ${text}`;
      const calls = turn.tool_calls ?? [];
      return calls.length > 0 ? `${head}\nTool Calls: ${JSON.stringify(calls, null, 2)}` : head;
    })
    .join('\n\n');
}

/** The score of a trajectory judge's answer (see the header): a JSON object whose "score" is a number within the scale. */
export function parseTrajectoryVerdict(answer: string | null | undefined, scale = TRAJECTORY_SCALE): JudgeVerdict<number> {
  const text = answer ?? '';
  if (text.trim() === '') return { ok: false, kind: 'empty', detail: 'the judge answered nothing' };
  const fenced = /```json\s*([\s\S]*?)```/.exec(text);
  const open = text.indexOf('{');
  const close = text.lastIndexOf('}');
  const body = fenced !== null ? (fenced[1] as string) : open >= 0 && close > open ? text.slice(open, close + 1) : null;
  let parsed: unknown;
  try {
    parsed = body === null ? undefined : JSON.parse(body.replace(/,\s*}\s*$/, '}'));
  } catch {
    parsed = undefined;
  }
  const score = (parsed as { score?: unknown } | null | undefined)?.score;
  if (typeof parsed !== 'object' || parsed === null || typeof score !== 'number' || !Number.isFinite(score))
    return { ok: false, kind: 'no_verdict', detail: 'no JSON object with a numeric "score" in the answer' };
  if (!(score >= scale.min && score <= scale.max))
    return { ok: false, kind: 'out_of_range', detail: `score ${score} is outside [${scale.min}, ${scale.max}]` };
  return { ok: true, value: score };
}

export interface TrajectoryAccuracyOptions {
  modelName: string;
  judgeModelName: string;
  judgeApiBaseUrlEnv: string;
  judgeApiKeyEnv: string;
  judgeModel: string;
  normalizeScore: boolean;
  scoreMin: number;
  scoreMax: number;
  temperature: number;
  maxTokens: number;
  fallbackReward: number;
}

const WHERE = "reward function 'trajectory_accuracy_grader_reward'";

/** The judge endpoint's base URL from its environment variable; an error naming the variable when it is unset. */
function endpointBaseUrl(options: Readonly<TrajectoryAccuracyOptions>, where: string): string {
  const baseUrl = process.env[options.judgeApiBaseUrlEnv] ?? '';
  if (baseUrl === '')
    throw new Error(
      `${where}: the judge's base URL is read from environment variable ${options.judgeApiBaseUrlEnv} ` +
        '(judge_api_base_url_env), which is not set: set it to an OpenAI-compatible endpoint (…/v1) serving model ' +
        `'${judgeModelName(options)}', or name an auxiliary model as the judge (judge_model)`,
    );
  return baseUrl;
}

const judgeModelName = (options: Readonly<TrajectoryAccuracyOptions>): string =>
  options.judgeModelName !== '' ? options.judgeModelName : options.modelName;

/** One OpenAI client per (base URL, key): every response of a run shares it. */
const endpointClients = new Map<string, Promise<OpenAI>>();

/** The judge behind the environment's endpoint (see the header); no tokenizer, no known context. */
function endpointJudge(options: Readonly<TrajectoryAccuracyOptions>, where: string): JudgeEndpoint {
  const baseURL = endpointBaseUrl(options, where);
  const apiKey = process.env[options.judgeApiKeyEnv] ?? '';
  const key = JSON.stringify([baseURL, apiKey]);
  const openai = (): Promise<OpenAI> => {
    let client = endpointClients.get(key);
    if (client === undefined) {
      client = import('openai').then(({ OpenAI }) => new OpenAI({ baseURL, apiKey: apiKey === '' ? 'none' : apiKey }));
      endpointClients.set(key, client);
    }
    return client;
  };
  return { name: `${options.judgeApiBaseUrlEnv}=${baseURL}`, modelName: judgeModelName(options), tokenizer: null, openai };
}

export const trajectoryAccuracyReward: RewardModule<TrajectoryAccuracyOptions> = {
  name: 'trajectory_accuracy_grader_reward',
  description:
    "OpenJudge's trajectory accuracy grader: an LLM judge scores the whole conversation 1-3 (JSON {reason, score}), " +
    'normalised to [0, 1]',
  defaults: {
    modelName: 'qwen3-max',
    judgeModelName: '',
    judgeApiBaseUrlEnv: 'OPENAI_BASE_URL',
    judgeApiKeyEnv: 'OPENAI_API_KEY',
    judgeModel: '',
    normalizeScore: true,
    scoreMin: 1,
    scoreMax: 3,
    temperature: 0,
    maxTokens: 1024,
    fallbackReward: 0,
  },
  check: (options, where) => {
    checkJudgeArgs(options, where);
    if (options.normalizeScore && !(options.scoreMin < options.scoreMax))
      throw new Error(
        `${where}: arguments 'score_min' (${options.scoreMin}) and 'score_max' (${options.scoreMax}) must have ` +
          'score_min < score_max to normalise the score (normalize_score: true)',
      );
    if (options.judgeModel === '') endpointBaseUrl(options, where);
  },
  checkModels: (options, models, where) => {
    if (options.judgeModel === '') return; // the endpoint's context is not known
    const judge = judgeModel(models, options.judgeModel, where);
    const prompt = fillTemplate(TRAJECTORY_ACCURACY_TEMPLATE, { trajectory: '' });
    checkJudgeRoom(judge, judgeMessages('', prompt), '{"reason": "", "score": 3}', where);
  },
  score: async ({ response, task, conversation, auxiliaryModels, signal }, options) => {
    const judge =
      options.judgeModel === '' ? endpointJudge(options, WHERE) : judgeModel(auxiliaryModels, options.judgeModel, WHERE);
    const turns = [...(conversation ?? [{ role: 'user' as const, content: taskQuestion(task, WHERE) }])];
    turns.push({ role: 'assistant', content: response });
    const prompt = fillTemplate(TRAJECTORY_ACCURACY_TEMPLATE, { trajectory: renderTrajectory(turns) });
    const answer = await askJudge(judge, judgeMessages('', prompt), { ...options, signal }, WHERE);
    const verdict = parseTrajectoryVerdict(answer);
    if (!verdict.ok)
      return { reward: options.fallbackReward, metrics: judgeFailureMetrics(verdict.kind, POINTWISE_FAILURE_KINDS) };
    const score = verdict.value;
    const normalised = (score - options.scoreMin) / (options.scoreMax - options.scoreMin);
    return {
      reward: options.normalizeScore ? Math.min(1, Math.max(0, normalised)) : score,
      metrics: { trajectory_score: score, ...judgeFailureMetrics(null, POINTWISE_FAILURE_KINDS) },
    };
  },
};

REWARD_FUNCTIONS.registerModule(trajectoryAccuracyReward);
