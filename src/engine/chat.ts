// Chat completions over a rollout engine: messages → the tokenizer's chat template with add_generation_prompt →
// prompt ids → generate → the assistant message. The prompt and completion ids are the exact ids the model saw and
// produced (never re-tokenised from text), so a trainer can score the same tokens.
import type { ChatMessage, Tokenizer, ToolDefinition } from '../tokenizer/index.js';
import type { Completion, GenerateOptions, GenerateRequest, GenerateResult } from './rollout-engine.js';
import type { FinishReason } from './stopping.js';

export interface ChatOptions extends GenerateOptions {
  /** Tool definitions the template renders (OpenAI format). */
  tools?: ToolDefinition[];
  /** Extra chat-template variables (e.g. { enable_thinking: false } for Qwen3). */
  templateVariables?: Record<string, unknown>;
}

export interface AssistantMessage {
  role: 'assistant';
  content: string;
}

export interface ChatChoice {
  index: number;
  message: AssistantMessage;
  /** The generated ids exactly (a final stop token included); see Completion.tokenIds. */
  completionIds: number[];
  /** log_softmax(logits / temperature) of each completion id; see Completion.logprobs. */
  logprobs: number[];
  finishReason: FinishReason;
  stopReason: number | string | null;
}

/** All n choices, with the first one's fields at the top level for the common n = 1 case. */
export interface ChatResult extends ChatChoice {
  /** The rendered prompt's ids, exactly as the model read them. */
  promptIds: number[];
  choices: ChatChoice[];
}

/** What chat() needs of an engine. */
export interface ChatEngine {
  readonly tokenizer: Tokenizer | null;
  generate(request: GenerateRequest): Promise<GenerateResult>;
}

export async function chat(engine: ChatEngine, messages: readonly ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
  const tokenizer = engine.tokenizer;
  if (tokenizer === null)
    throw new TypeError('chat: the engine has no tokenizer (create it with one, or call generate() with ids)');
  if (!tokenizer.hasChatTemplate) throw new TypeError('chat: the tokenizer has no chat_template (tokenizer_config.json)');
  if (messages.length === 0) throw new RangeError('chat: messages is empty');
  const { tools, templateVariables, ...generateOptions } = options;
  const promptIds = tokenizer.encodeChat(messages, {
    addGenerationPrompt: true,
    ...(tools ? { tools } : {}),
    ...(templateVariables ? { variables: templateVariables } : {}),
  });
  const result = await engine.generate({ ...generateOptions, promptIds });
  const choices = result.completions.map(toChoice);
  return { ...(choices[0] as ChatChoice), promptIds: result.promptIds, choices };
}

function toChoice(completion: Completion): ChatChoice {
  return {
    index: completion.index,
    message: { role: 'assistant', content: completion.text ?? '' },
    completionIds: completion.tokenIds,
    logprobs: completion.logprobs,
    finishReason: completion.finishReason,
    stopReason: completion.stopReason,
  };
}
