// R3L's RAFT baseline workflows (Trinity-RFT's examples/R3L/{countdown,dapo}/RAFT_*.yaml, whose
// default_workflow_type names them): RAFT_baseline_countdown_workflow and RAFT_baseline_dapo_workflow. A rollout is
// up to MAX_ATTEMPTS answers in one conversation, each judged and answered with feedback:
//
//   messages = opening (countdown: none; dapo: [system, user problem])
//   for attempt a = 0 .. MAX_ATTEMPTS − 1:
//     countdown only: messages ++ [user countdownPrompt(a, the failed attempts so far)]
//     reply = chat(messages)  → messages ++ [reply]
//     (think, answer) = parseReply(reply):  no <think>…</think> or no answer → ++ [user "Feedback: Invalid …"], next a
//     correct(answer)  → ++ [user "Feedback: Correct! …"], stop: reward 1, success
//     else             → ++ [user "Feedback: Incorrect. … Please try again." (last: "… Maximum attempts reached.")]
//   reward = 1 when some attempt was correct, else 0;   attempts = the answers asked for
//
// The experience is the conversation up to the last reply (upstream converts trajectory[:-1]: the last feedback is
// not part of it): the model's replies trained (action mask 1), the prompts and feedback between them not (0). Each
// call continues the rollout's earlier calls exactly (a ConversationTracker): no re-tokenised turns. A conversation
// that outgrows max_model_len ends the rollout unsolved where the engine refuses the next call (upstream: a call
// whose sequence reaches 20480 − 4096 tokens). Each reply is at most model.max_response_tokens long, or
// rollout_args.max_tokens (upstream passes 4096, the four configs' max_response_tokens).
//
// Eval: one rollout per task (whatever the eval repeat_times; upstream too), its experience with metrics success
// (0/1), reward and attempts. Train: repeat_times rollouts; a correct one is kept as above, an incorrect one becomes
// a placeholder that trains no token (upstream's default experience): two tokens of its prompt, action mask [0],
// reward 0, metrics success 0 and reward 0 (no attempts), so rollout/success/mean is the share of correct rollouts as
// upstream logs it. With algorithm_type raft (SFT) only the correct conversations' replies are learned from.
// Where upstream differs: it catches any error of a rollout and returns its default experience; here the error fails
// the task's run (retried up to explorer.max_retry_times, then counted in rollout/runs/failed), as for every workflow.
//
// The answer checks:
//   countdown   upstream's parse (the first <answer>…</answer>, case-insensitive, trimmed; a <think>…</think>
//               required) and countdown_reward's equation check (../reward/countdown.ts: each number used once,
//               value within 1e-5 of the target; the same eval_utils functions upstream calls)
//   dapo        the first <answer>…</answer>, else the text after "Answer:" on its line (a <think>…</think>
//               required), compared with the ground truth as math answers are here (../reward/math-answer.ts: its
//               \boxed{} content if any, numbers as exact rationals, else normalised text), and failing that by
//               Qwen2.5-Math's grader on the two normalised answers (../reward/math-equal.ts: symbolic equalities such
//               as "2x+1" = "1+2x", by value at seeded points); upstream uses the math_verify package, whose verdicts
//               can differ where that grader's do (docs/trinity-configs.md, math_eval_workflow)
//
// Rows are read as upstream reads them, whatever the format keys: countdown {nums, target}; dapo {prompt: [{content},
// …], reward_model: {ground_truth}} (DAPO-Math), {question, answer} (the math eval sets), or {prompt, answer}.
import { ConversationTracker } from '../../engine/index.js';
import type { ChatResult } from '../../engine/index.js';
import type { ChatMessage } from '../../tokenizer/index.js';
import { mixSeed } from '../buffer/random.js';
import type { ChatTurn, Experience } from '../experience.js';
import { evaluateArithmetic, extractBoxed, mathAccuracy, mathEqual, usesExactlyNumbers } from '../reward/index.js';
import { normaliseMathAnswer } from '../reward/qwen-math-normalise.js';
import type { Task } from '../task.js';
import { isContextFull } from './env/environment.js';
import { rolloutOptions } from './single-turn.js';
import type { ModelHandle, WorkflowContext, WorkflowSpec } from './types.js';
import { WORKFLOWS } from './workflow-registry.js';

/** Answers asked for per rollout (upstream's max_attempts, fixed there too). */
export const MAX_ATTEMPTS = 3;

/** A failed attempt as the countdown prompt lists it. */
export interface FailedAttempt {
  equation: string;
  feedback: string;
}

/** One R3L task: how its conversation opens, how a reply is read and judged, and the feedback texts. */
export interface R3lGame {
  opening: ChatMessage[];
  /** The user prompt before attempt `attempt` (0-based), given the failed attempts so far; none: no prompt. */
  attemptPrompt?: (attempt: number, failed: readonly FailedAttempt[]) => string;
  /** Accept "Answer: …" on a line when there is no <answer> tag (dapo). */
  answerLineFallback: boolean;
  isCorrect: (answer: string) => boolean;
  correct: (answer: string) => string;
  retry: (answer: string) => string;
  last: (answer: string) => string;
}

export const INVALID_FORMAT_FEEDBACK =
  'Invalid response format. Please ensure you provide both <think>...</think> and <answer>...</answer> tags.';

/** The think and answer of a reply (see the header); null where missing. */
export function parseReply(reply: string, answerLineFallback: boolean): { think: string | null; answer: string | null } {
  const think = /<think>\s*([\s\S]*?)\s*<\/think>/.exec(reply);
  const tagged = /<answer>\s*([\s\S]*?)\s*<\/answer>/i.exec(reply);
  const line = tagged === null && answerLineFallback ? /Answer:\s*(.+?)(?:\n|$)/i.exec(reply) : null;
  const answer = tagged?.[1] ?? line?.[1] ?? null;
  return { think: think ? (think[1] as string).trim() : null, answer: answer === null ? null : answer.trim() };
}

/** Python's repr of a list of numbers: [4, 6, 1]. */
const pyList = (numbers: readonly number[]): string => `[${numbers.join(', ')}]`;

const COUNTDOWN_INSTRUCTIONS =
  "Now it's your turn to solve this problem.\n" +
  'You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within ' +
  '<think> </think> tags.\n' +
  "Once you've finished your reasoning, you should provide your equation answer and present it within <answer> " +
  '</answer> tags, for example <answer>(1 + 2) / 3</answer>.';

/** How many failed attempts the countdown prompt lists (upstream's history_length). */
const COUNTDOWN_HISTORY = 4;

/** R3L's countdown user prompt before attempt `attempt`, listing the last failed attempts (see the header). */
export function countdownPrompt(
  numbers: readonly number[],
  target: number,
  attempt: number,
  failed: readonly FailedAttempt[],
): string {
  const rules = `create an equation that equals ${target}. You can use basic arithmetic operations (+, -, *, /) and each number can only be used once.`;
  if (attempt === 0 || failed.length === 0)
    return `You are an expert at solving countdown number problems.\nYour current task is: Using the numbers ${pyList(numbers)}, ${rules}\n\n${COUNTDOWN_INSTRUCTIONS}`;
  const recent = failed.slice(-COUNTDOWN_HISTORY);
  const lines = recent.map((f, i) => `  Attempt ${attempt - recent.length + i + 1}: ${f.equation} -> ${f.feedback}`);
  return (
    `You are an expert at solving countdown number problems.\nYour task is: Using the numbers ${pyList(numbers)}, ${rules}\n` +
    `Prior to this attempt, you have already made ${attempt} attempt(s). Below are the most recent ${recent.length} attempts and their feedback:\n` +
    `${lines.join('\n')}\nYou are now at attempt ${attempt + 1}.\n\n${COUNTDOWN_INSTRUCTIONS}`
  );
}

/** The countdown game of a task: its row's nums and target (see the header). */
export function countdownGame(task: Task): R3lGame {
  const { nums, target } = task.raw;
  const where = `RAFT_baseline_countdown_workflow: task ${task.id} (row ${task.index} of taskset '${task.taskset}')`;
  if (!Array.isArray(nums) || nums.length === 0 || !nums.every((n) => Number.isInteger(n) && n >= 0))
    throw new Error(`${where}: 'nums' must be a list of non-negative integers, got ${JSON.stringify(nums)}`);
  if (typeof target !== 'number' || !Number.isFinite(target))
    throw new Error(`${where}: 'target' must be a number, got ${JSON.stringify(target)}`);
  const numbers = nums as number[];
  return {
    opening: [],
    attemptPrompt: (attempt, failed) => countdownPrompt(numbers, target, attempt, failed),
    answerLineFallback: false,
    isCorrect: (equation) => {
      const value = usesExactlyNumbers(equation, numbers) ? evaluateArithmetic(equation) : null;
      return value !== null && Math.abs(value - target) < 1e-5;
    },
    correct: (equation) =>
      `Correct! Your equation ${equation} successfully equals ${target} using the numbers ${pyList(numbers)}.`,
    retry: (equation) => `Incorrect. Your equation ${equation} does not work. Please try again.`,
    last: (equation) => `Incorrect. Your equation ${equation} does not match the target ${target}. Maximum attempts reached.`,
  };
}

/** The dapo workflow's system prompt (in this backend's words: upstream's math_system.j2 asks for the same format). */
export const R3L_MATH_SYSTEM_PROMPT =
  'You are a mathematical problem solver. Solve the problem step by step.\n\n' +
  'Answer in exactly this format, both tags required, in this order:\n' +
  '<think>your step-by-step reasoning</think>\n<answer>your final answer</answer>\n\n' +
  'Give numerical answers as exact values. If the problem asks for a format such as \\boxed{}, use it inside the ' +
  '<answer> tags, e.g. <answer>\\boxed{1683}</answer>.';

/** The problem and ground truth of a dapo row (see the header). */
export function dapoProblem(task: Task): { problem: string; groundTruth: string } {
  const raw = task.raw;
  const where = `RAFT_baseline_dapo_workflow: task ${task.id} (row ${task.index} of taskset '${task.taskset}')`;
  const text = (value: unknown, what: string): string => {
    if (typeof value === 'string' && value.trim() !== '') return value;
    if (typeof value === 'number' && Number.isFinite(value)) return String(value);
    throw new Error(`${where}: ${what} must be non-empty text, got ${JSON.stringify(value)}`);
  };
  if (Array.isArray(raw.prompt)) {
    const first = raw.prompt[0] as { content?: unknown } | undefined;
    const model = raw.reward_model as { ground_truth?: unknown } | undefined;
    return {
      problem: text(first?.content, "'prompt'[0].content"),
      groundTruth: text(model?.ground_truth, "'reward_model'.ground_truth"),
    };
  }
  if ('question' in raw) return { problem: text(raw.question, "'question'"), groundTruth: text(raw.answer, "'answer'") };
  if ('prompt' in raw) return { problem: text(raw.prompt, "'prompt'"), groundTruth: text(raw.answer, "'answer'") };
  throw new Error(
    `${where}: the row has none of the forms {prompt: [{content}], reward_model: {ground_truth}}, {question, answer}, {prompt, answer}`,
  );
}

/** The dapo game of a task (see the header). */
export function dapoGame(task: Task): R3lGame {
  const { problem, groundTruth } = dapoProblem(task);
  const boxedOrWhole = (answer: string) => (extractBoxed(answer) ?? answer).trim();
  return {
    opening: [
      { role: 'system', content: R3L_MATH_SYSTEM_PROMPT },
      { role: 'user', content: problem },
    ],
    answerLineFallback: true,
    isCorrect: (answer) =>
      mathAccuracy(answer, groundTruth, boxedOrWhole) === 1 ||
      mathEqual(normaliseMathAnswer(boxedOrWhole(answer)), normaliseMathAnswer(boxedOrWhole(groundTruth))),
    correct: (answer) => `Correct! Your answer ${answer} matches the expected answer.`,
    retry: (answer) => `Incorrect. Your answer ${answer} does not match. Please try again.`,
    last: (answer) => `Incorrect. Your answer ${answer} does not match the expected answer. Maximum attempts reached.`,
  };
}

/** How one rollout went: its last call (the experience ends there) and the conversation up to that call's reply. */
interface Rollout {
  last: ChatResult;
  transcript: ChatTurn[];
  success: boolean;
  attempts: number;
}

/** One rollout of `game` (see the header). */
async function playRollout(
  game: R3lGame,
  { task, model, signal }: Pick<WorkflowContext, 'task' | 'model' | 'signal'>,
  seed: number,
  who: string,
): Promise<Rollout> {
  const generation = rolloutOptions(task.rolloutArgs ?? {}, who);
  const conversation = model.tokenizer ? new ConversationTracker(model.tokenizer) : undefined;
  const messages: ChatMessage[] = game.opening.map((m) => ({ ...m }));
  const failed: FailedAttempt[] = [];
  let last: ChatResult | null = null;
  let transcriptLength = 0;
  let attempts = 0;
  let success = false;
  for (let attempt = 0; attempt < MAX_ATTEMPTS && !success; attempt++) {
    if (game.attemptPrompt) messages.push({ role: 'user', content: game.attemptPrompt(attempt, failed) });
    try {
      last = await model.chat(messages, {
        ...generation,
        seed: mixSeed(seed, attempt),
        signal,
        ...(conversation ? { conversation } : {}),
      });
    } catch (error) {
      if (last !== null && isContextFull(error)) break;
      throw error;
    }
    attempts = attempt + 1;
    messages.push(last.message);
    transcriptLength = messages.length;
    const { think, answer } = parseReply(last.message.content, game.answerLineFallback);
    let feedback: string;
    if (think === null || answer === null) {
      feedback = INVALID_FORMAT_FEEDBACK;
      failed.push({ equation: 'Invalid format', feedback });
    } else if (answer !== '' && game.isCorrect(answer)) {
      feedback = game.correct(answer);
      success = true;
    } else {
      feedback = attempt < MAX_ATTEMPTS - 1 ? game.retry(answer) : game.last(answer);
      failed.push({ equation: answer, feedback });
    }
    messages.push({ role: 'user', content: `Feedback: ${feedback}` });
  }
  const transcript = messages.slice(0, transcriptLength).map((m) => ({ role: m.role, content: m.content ?? '' }));
  return { last: last as ChatResult, transcript, success, attempts };
}

/** A rollout's experience; an unsolved training rollout's is the placeholder that trains no token (see the header). */
function rolloutExperience(model: ModelHandle, rollout: Rollout, runId: number, isEval: boolean): Experience {
  const reward = rollout.success ? 1 : 0;
  const experience = model.toExperience(rollout.last, {
    reward,
    metrics: { success: reward, reward, attempts: rollout.attempts },
    runId,
    messages: rollout.transcript,
  });
  if (isEval || rollout.success) return experience;
  return {
    ...experience,
    tokens: experience.tokens.slice(0, 2),
    promptLength: 1,
    logprobs: [0],
    actionMask: [0],
    metrics: { success: 0, reward: 0 },
  };
}

/** A RAFT baseline workflow over the game a task makes (see the header). */
function r3lRaftWorkflow(name: string, gameOf: (task: Task) => R3lGame): WorkflowSpec {
  return {
    repeatable: true,
    readsPrompt: false,
    workflowArgs: [],
    description: `R3L's RAFT baseline: up to ${MAX_ATTEMPTS} answers with feedback per rollout; unsolved training rollouts train nothing`,
    run: async (context) => {
      const { task, model, seed, runIdBase, isEval } = context;
      const game = gameOf(task);
      const rollouts = isEval ? 1 : context.repeatTimes;
      return Promise.all(
        Array.from({ length: rollouts }, async (_, i) => {
          const rollout = await playRollout(game, context, mixSeed(seed, runIdBase + i), name);
          return rolloutExperience(model, rollout, runIdBase + i, isEval);
        }),
      );
    },
  };
}

export const raftBaselineCountdownWorkflow = r3lRaftWorkflow('RAFT_baseline_countdown_workflow', countdownGame);
export const raftBaselineDapoWorkflow = r3lRaftWorkflow('RAFT_baseline_dapo_workflow', dapoGame);

// the names as the examples' configs and upstream's registry spell them, and the lower-case spelling that R3L's own
// repository registered them under before (Trinity's registry matches names exactly)
WORKFLOWS.register('RAFT_baseline_countdown_workflow', raftBaselineCountdownWorkflow);
WORKFLOWS.register('RAFT_baseline_dapo_workflow', raftBaselineDapoWorkflow);
WORKFLOWS.register(
  'raft_baseline_countdown_workflow',
  raftBaselineCountdownWorkflow,
  'RAFT_baseline_countdown_workflow (its lower-case spelling)',
);
WORKFLOWS.register(
  'raft_baseline_dapo_workflow',
  raftBaselineDapoWorkflow,
  'RAFT_baseline_dapo_workflow (its lower-case spelling)',
);
