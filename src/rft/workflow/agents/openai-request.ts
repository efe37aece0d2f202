// What the agent workflows (./tool-agent.ts, ./react-agent.ts, ./email-search.ts) share about their calls to the
// rollout model's OpenAI endpoint: the request fields a task's rollout args become, one call of a conversation, and the
// refusal that means the conversation is full.
import type OpenAI from 'openai';
import type { Task } from '../../task.js';
import { rolloutOptions } from '../single-turn.js';

type RequestParams = OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming;
type AssistantMessage = OpenAI.Chat.Completions.ChatCompletionMessage;

/** True when the server refused a call because the conversation no longer fits the model's context. */
export function isOpenAIContextFull(error: unknown): boolean {
  const e = error as { status?: unknown; code?: unknown };
  return e !== null && typeof e === 'object' && e.status === 400 && e.code === 'context_length_exceeded';
}

/** The OpenAI request fields of the task's rollout args (temperature, top_p, top_k, min_p, max_tokens). */
export function requestFields(task: Task, workflowName: string): Partial<RequestParams> {
  const options = rolloutOptions(task.rolloutArgs ?? {}, workflowName);
  const fields: Partial<RequestParams> & { top_k?: number; min_p?: number } = {};
  if (options.temperature !== undefined) fields.temperature = options.temperature;
  if (options.topP !== undefined) fields.top_p = options.topP;
  if (options.topK !== undefined) fields.top_k = options.topK; // extensions this server (and vLLM) accept
  if (options.minP !== undefined) fields.min_p = options.minP;
  if (options.maxTokens !== undefined) fields.max_tokens = options.maxTokens;
  return fields;
}

/**
 * One call of an agent's conversation: the assistant message as the server returned it (append it as it is: the next
 * call continues its exact ids), or null when the server refused the call because the conversation no longer fits and
 * `mayBeFull` (a conversation past its first call; a first call that does not fit is an error). `who` names the agent
 * in the error for a reply without choices.
 */
export async function chatTurn(
  client: OpenAI,
  request: RequestParams,
  options: { who: string; mayBeFull: boolean; signal?: AbortSignal | undefined },
): Promise<AssistantMessage | null> {
  options.signal?.throwIfAborted();
  let completion: OpenAI.Chat.Completions.ChatCompletion;
  try {
    completion = await client.chat.completions.create(request, options.signal ? { signal: options.signal } : {});
  } catch (error) {
    if (options.mayBeFull && isOpenAIContextFull(error)) return null;
    throw error;
  }
  const reply = completion.choices[0]?.message;
  if (reply === undefined) throw new Error(`${options.who}: the server returned no choices`);
  return reply;
}
