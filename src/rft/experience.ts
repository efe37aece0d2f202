// The Experience record: what a workflow produces and the trainer learns from (Trinity-RFT's
// trinity/common/experience.py, same field meanings, camelCase). Plain JSON-serialisable data — token ids and
// per-token numbers as arrays — so it moves through buffers (memory, SQLite, JSONL) and across threads unchanged.
//
//   tokens        = prompt ids ++ response ids                       length T
//   promptLength  = number of prompt ids                             response = tokens[promptLength:]
//   logprobs      = rollout log-probabilities of the response ids    length T - promptLength
//   actionMask    = 1 where the model produced the response token    length T - promptLength (multi-turn: 0 for
//                   (0 for tool/environment/user tokens spliced in)  tokens that were not generated)
//   temperature   = τ of logprobs = log_softmax(logits / τ)[token]   the sampling temperature (greedy: 1); top-k,
//                                                                    top-p and min-p do not enter the logprobs
//                                                                    (../engine/sampling.ts); absent = 1 (not
//                                                                    sampled: SFT/DPO data)
//   routedExperts = a mixture-of-experts rollout's chosen experts per token and sparse layer (router replay;
//                   ./routed-experts.ts)
//   images        = a vision-language prompt's images, in the order of their placeholders in tokens, as
//                   `data:image/...;base64,` URLs (Trinity's multi_modal_inputs; the trainer runs the image
//                   processor on them again, so the experience stays JSON and independent of files)

import { type RoutedExperts, routedExpertsProblem } from './routed-experts.js';

export interface ExperienceInfo {
  /** Weights version that produced the rollout (synchronizer step). */
  modelVersion?: number;
  /** Task identity: responses to the same task form a group (GRPO and friends). */
  taskId?: string;
  /** Which repeat of the task (0 .. repeat_times-1). */
  runId?: number;
  /** Explorer step that produced it. */
  step?: number;
  /** Step-wise (multi-turn) runs: index of this step inside its run. */
  stepIndex?: number;
  /** Times a replay buffer has handed it to the trainer. */
  useCount?: number;
  /** Expert (SFT) data mixed into RL (MIX/CHORD). */
  isExpert?: boolean;
  /**
   * Step-wise runs: the state the step acted from, hashed (advantage_fn gigpo's anchor states; Trinity's name). An
   * episode experience with step_spans: one per turn.
   */
  env_state_hash?: string | string[];
  /** Step-wise runs: the step's own reward r_t (advantage_fn gigpo; Trinity's name). With step_spans: one per turn. */
  step_reward?: number | number[];
  /** An episode experience: each turn's reply as [start, end) among its response positions (advantage_fn gigpo). */
  step_spans?: [number, number][];
  [key: string]: unknown;
}

/** An OpenAI content part of a turn: text, or an image (a data:image/...;base64 URL) for a vision-language model. */
export type ChatContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface ChatTurn {
  role: string;
  /** Text, or content parts (a vision-language prompt's images and text: format.image_key). */
  content: string | ChatContentPart[];
  [key: string]: unknown;
}

/** A turn's content as text: text parts joined, each image as "<image>" (for display). */
export function contentText(content: ChatTurn['content']): string {
  return typeof content === 'string' ? content : content.map((part) => (part.type === 'text' ? part.text : '<image>')).join('');
}

export interface Experience {
  /** Unique id (buffers deduplicate and resume by it). */
  eid: string;
  tokens: number[];
  promptLength: number;
  /** Rollout log-probs of the response tokens (absent for SFT/offline data). */
  logprobs?: number[];
  /**
   * The temperature the response was sampled at, which logprobs are taken at (greedy: 1); the trainer computes this
   * row's log-probs at it. Absent: 1.
   */
  temperature?: number;
  actionMask?: number[];
  /** Scalar reward of the whole response. */
  reward?: number;
  /** Per-response-token rewards (PPO/REINFORCE++ with KL penalty in the reward, process rewards). */
  tokenLevelReward?: number[];
  /** Per-response-token advantages and returns, once computed. */
  advantages?: number[];
  returns?: number[];
  /** Teacher log-probs of the response tokens (on-policy distillation). */
  teacherLogprobs?: number[];
  truncateStatus?: 'prompt_truncated' | 'response_truncated';
  info: ExperienceInfo;
  /** Rollout metrics reported by the workflow. */
  metrics?: Record<string, number>;
  promptText?: string;
  responseText?: string;
  messages?: ChatTurn[];
  /** Router replay: the experts the rollout's tokens were routed to (./routed-experts.ts). */
  routedExperts?: RoutedExperts;
  /** Vision-language prompts: the images whose placeholder tokens `tokens` holds, in order, as base64 data URLs. */
  images?: string[];
  /** DPO pairs: chosen and rejected response ids after the shared prompt. */
  chosen?: number[];
  rejected?: number[];
}

/** Response length of an experience. */
export function responseLength(experience: Experience): number {
  return experience.tokens.length - experience.promptLength;
}

/** Checks an experience's shape; returns a list of problems (empty when valid), each naming the field. */
export function validateExperience(e: Experience): string[] {
  const problems: string[] = [];
  if (typeof e.eid !== 'string' || e.eid.length === 0) problems.push('eid must be a non-empty string');
  if (!Array.isArray(e.tokens) || !e.tokens.every((t) => Number.isInteger(t) && t >= 0)) {
    problems.push('tokens must be an array of non-negative integers');
  }
  if (!Number.isInteger(e.promptLength) || e.promptLength < 0 || e.promptLength > (e.tokens?.length ?? 0)) {
    problems.push(`promptLength ${e.promptLength} must be an integer in [0, ${e.tokens?.length ?? 0}]`);
  }
  const n = (e.tokens?.length ?? 0) - (e.promptLength ?? 0);
  for (const key of ['logprobs', 'actionMask', 'tokenLevelReward', 'advantages', 'returns', 'teacherLogprobs'] as const) {
    const v = e[key];
    if (v === undefined) continue;
    if (!Array.isArray(v) || v.length !== n)
      problems.push(`${key} must have one entry per response token (${n}), got ${Array.isArray(v) ? v.length : typeof v}`);
    else if (!v.every((x) => typeof x === 'number' && Number.isFinite(x))) problems.push(`${key} must hold finite numbers`);
  }
  if (
    e.temperature !== undefined &&
    !(typeof e.temperature === 'number' && Number.isFinite(e.temperature) && e.temperature > 0)
  ) {
    problems.push(`temperature must be a finite number > 0, got ${String(e.temperature)}`);
  }
  if (e.reward !== undefined && (typeof e.reward !== 'number' || !Number.isFinite(e.reward))) {
    problems.push(`reward must be a finite number, got ${String(e.reward)}`);
  }
  if (e.info === null || typeof e.info !== 'object') problems.push('info must be an object');
  if (
    e.images !== undefined &&
    !(Array.isArray(e.images) && e.images.every((u) => typeof u === 'string' && u.startsWith('data:image/')))
  )
    problems.push('images must be an array of data:image/...;base64 URLs');
  const routed = routedExpertsProblem(e.routedExperts, e.tokens?.length ?? 0);
  if (routed !== null) problems.push(routed);
  return problems;
}

/** What the trained model can take: token ids below its vocabulary size, sequences within its context length. */
export interface ModelBounds {
  vocabSize: number;
  maxLength: number;
}

/**
 * Checks an experience against the model it will train (on top of validateExperience's shape): the first problem,
 * naming the field, or null. A rollout the model cannot have produced (a token id past the vocabulary, a sequence
 * longer than the context) would make the trainer throw; it is rejected before it reaches the buffer.
 */
export function modelBoundsProblem(e: Experience, bounds: ModelBounds): string | null {
  const shape = validateExperience(e);
  if (shape.length) return shape[0] as string;
  if (e.tokens.length > bounds.maxLength)
    return `tokens: ${e.tokens.length} tokens exceed the model's max length ${bounds.maxLength}`;
  for (const [field, ids] of [
    ['tokens', e.tokens],
    ['chosen', e.chosen],
    ['rejected', e.rejected],
  ] as const) {
    const bad = ids?.find((t) => !(Number.isInteger(t) && t >= 0 && t < bounds.vocabSize));
    if (bad !== undefined) return `${field}: token id ${bad} is outside the vocabulary [0, ${bounds.vocabSize})`;
  }
  return null;
}
