// Reaching a judge: the auxiliary model a reward names, and one chat call to it.
//
// A judge that answers garbage is a counted failure (./judge-answer.ts); a judge that cannot be reached (no auxiliary
// models configured, an unknown name, a failed HTTP call) is an error: the workflow attempt fails and is retried as
// configured, like any other attempt that cannot finish.
import type { AuxiliaryModel, AuxiliaryModels } from '../auxiliary/types.js';

/** The auxiliary model named `name` ('' = the first one, as Trinity-RFT's judges take auxiliary_models[0]). */
export function judgeModel(models: AuxiliaryModels | undefined, name: string, where: string): AuxiliaryModel {
  if (models === undefined || models.list.length === 0)
    throw new Error(`${where} needs a judge model in explorer.auxiliary_models, and this run has none`);
  if (name === '') return models.list[0] as AuxiliaryModel;
  try {
    return models.get(name);
  } catch (error) {
    throw new Error(`${where}: judge_model: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * What a judge call reads of its model: an auxiliary model, or an OpenAI-compatible endpoint a reward reaches by
 * itself (./trajectory-accuracy.ts: OpenJudge's judge named by environment variables).
 */
export type JudgeEndpoint = Pick<AuxiliaryModel, 'name' | 'modelName' | 'tokenizer' | 'contextLength' | 'openai'>;

/** A judge prompt turn (judges are asked in system and user turns only). */
export interface JudgeMessage {
  role: 'system' | 'user';
  content: string;
}

export interface JudgeCallOptions {
  maxTokens: number;
  temperature: number;
  signal?: AbortSignal;
}

/**
 * The max_tokens of a judge call: the reward's max_tokens, bounded by what the prompt leaves of the judge's context
 * when both are known (an embedded judge with its tokenizer):
 *   max_tokens = min(requested, contextLength − promptTokens)
 * An embedded engine refuses prompt + max_tokens > its context, so an unbounded default failed every call on a judge
 * with a small max_model_len. A prompt that leaves no room is an error that names both lengths.
 */
export function judgeMaxTokens(
  judge: JudgeEndpoint,
  messages: readonly JudgeMessage[],
  requested: number,
  where: string,
): number {
  if (judge.contextLength === undefined || judge.tokenizer === null) return requested;
  const promptTokens = judge.tokenizer.encodeChat(messages, { addGenerationPrompt: true }).length;
  const room = judge.contextLength - promptTokens;
  if (room < 1) {
    throw new Error(
      `${where}: the judge prompt is ${promptTokens} tokens and judge '${judge.name}' has a context of ` +
        `${judge.contextLength} (max_model_len): no room for its answer; raise its max_model_len or shorten the prompt`,
    );
  }
  return Math.min(requested, room);
}

/**
 * At the start of a run: the judge must fit its fixed prompt (`messages`: the template with the responses and every
 * per-task value left empty) and the shortest useful reply (`reply`: its verdict line) in its context,
 *   tokens(chat_template(messages, add_generation_prompt)) + tokens(reply) ≤ contextLength,
 * else every call would fail: an error naming the judge, its context and the prompt's size. Not checked where a size
 * is unknown (a remote judge without a tokenizer or a context length).
 */
export function checkJudgeRoom(judge: AuxiliaryModel, messages: readonly JudgeMessage[], reply: string, where: string): void {
  if (judge.contextLength === undefined || judge.tokenizer === null) return;
  const promptTokens = judge.tokenizer.encodeChat(messages, { addGenerationPrompt: true }).length;
  const replyTokens = judge.tokenizer.encode(reply).length;
  if (promptTokens + replyTokens <= judge.contextLength) return;
  throw new Error(
    `${where}: judge '${judge.name}' has a context of ${judge.contextLength} tokens (max_model_len), and its prompt ` +
      `without the task's text and the responses is already ${promptTokens} tokens: no room for its reply ` +
      `(${JSON.stringify(reply)} alone is ${replyTokens}), so every call would fail; raise the judge's max_model_len ` +
      'or shorten system_prompt, prompt_template or the rubric',
  );
}

/** The judge's answer text to one chat call ('' when it returned no choice or no content). */
export async function askJudge(
  judge: JudgeEndpoint,
  messages: readonly JudgeMessage[],
  options: JudgeCallOptions,
  where: string,
): Promise<string> {
  const client = await judge.openai();
  try {
    const completion = await client.chat.completions.create(
      {
        model: judge.modelName,
        messages: messages.map(({ role, content }) => ({ role, content })),
        max_tokens: judgeMaxTokens(judge, messages, options.maxTokens, where),
        temperature: options.temperature,
      },
      options.signal ? { signal: options.signal } : {},
    );
    return completion.choices[0]?.message?.content ?? '';
  } catch (error) {
    if (options.signal?.aborted) throw error; // the attempt's own timeout or stop: keep its error as it is
    throw new Error(`${where}: the call to judge '${judge.name}' failed: ${(error as Error).message}`, { cause: error });
  }
}

/** [system?, user] chat messages for a judge. */
export const judgeMessages = (systemPrompt: string, user: string): JudgeMessage[] => [
  ...(systemPrompt !== '' ? [{ role: 'system' as const, content: systemPrompt }] : []),
  { role: 'user', content: user },
];

/** Shared argument checks of the judge rewards; each error names the argument. */
export function checkJudgeArgs(
  options: { maxTokens?: number; temperature?: number; fallbackReward: number; minScore?: number; maxScore?: number },
  where: string,
): void {
  if (options.maxTokens !== undefined && !(Number.isInteger(options.maxTokens) && options.maxTokens >= 1))
    throw new Error(`${where}: argument 'max_tokens' must be a positive integer, got ${options.maxTokens}`);
  if (options.temperature !== undefined && !(options.temperature >= 0 && options.temperature <= 2))
    throw new Error(`${where}: argument 'temperature' must be in [0, 2], got ${options.temperature}`);
  if (!Number.isFinite(options.fallbackReward))
    throw new Error(`${where}: argument 'fallback_reward' must be a finite number, got ${options.fallbackReward}`);
  if (options.minScore !== undefined && options.maxScore !== undefined) {
    if (!(Number.isFinite(options.minScore) && Number.isFinite(options.maxScore) && options.minScore < options.maxScore))
      throw new Error(
        `${where}: arguments 'min_score' (${options.minScore}) and 'max_score' (${options.maxScore}) must be finite with min_score < max_score`,
      );
  }
}
