// Chat completions over a rollout engine: messages → the tokenizer's chat template with add_generation_prompt →
// prompt ids → generate → the assistant message. The prompt and completion ids are the exact ids the model saw and
// produced (never re-tokenised from text), so a trainer can score the same tokens.
//
// With `conversation` (a ConversationTracker), a call whose messages extend an earlier call's messages and reply
// continues from that call's exact ids (./conversation.ts) and each choice records its turn; with `tools`, Hermes-style
// <tool_call> blocks in the text become the message's tool_calls (./tool-calls.ts).
import type { ChatMessage, Tokenizer, ToolCall, ToolDefinition } from '../tokenizer/index.js';
import type { ConversationPrompt, ConversationTracker, ConversationTurn } from './conversation.js';
import type { Completion, GenerateOptions, GenerateRequest, GenerateResult } from './rollout-engine.js';
import type { FinishReason } from './stopping.js';
import { parseToolCalls } from './tool-calls.js';

export interface ChatOptions extends GenerateOptions {
  /** Tool definitions the template renders (OpenAI format); tool calls in the reply are parsed. */
  tools?: ToolDefinition[];
  /** Extra chat-template variables (e.g. { enable_thinking: false } for Qwen3). */
  templateVariables?: Record<string, unknown>;
  /** Continue recorded conversations exactly and record this call's turns. */
  conversation?: ConversationTracker;
  /** Kept with each recorded turn (conversation only). */
  turnMeta?: Record<string, unknown>;
}

export interface AssistantMessage {
  role: 'assistant';
  content: string;
  tool_calls?: ToolCall[];
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
  /** The recorded turn (with `conversation`): the whole conversation's exact tokens and action mask. */
  turn?: ConversationTurn;
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
  const { tools, templateVariables, conversation, turnMeta, ...generateOptions } = options;
  const conversationOptions = { ...(tools ? { tools } : {}), ...(templateVariables ? { templateVariables } : {}) };
  let prompt: ConversationPrompt | null = null;
  let promptIds: number[];
  if (conversation) {
    prompt = conversation.prompt(messages, conversationOptions);
    promptIds = prompt.promptIds;
  } else {
    promptIds = tokenizer.encodeChat(messages, {
      addGenerationPrompt: true,
      ...(tools ? { tools } : {}),
      ...(templateVariables ? { variables: templateVariables } : {}),
    });
  }
  const result = await engine.generate({ ...generateOptions, promptIds });
  const choices = result.completions.map((completion) => {
    const choice = toChoice(completion, tools !== undefined && tools.length > 0);
    if (conversation && prompt) {
      choice.turn = conversation.record(prompt, {
        completionIds: choice.completionIds,
        logprobs: choice.logprobs,
        finishReason: choice.finishReason,
        reply: choice.message,
        ...(turnMeta ? { meta: turnMeta } : {}),
      });
    }
    return choice;
  });
  return { ...(choices[0] as ChatChoice), promptIds: result.promptIds, choices };
}

function toChoice(completion: Completion, parseTools: boolean): ChatChoice {
  const text = completion.text ?? '';
  const parsed = parseTools ? parseToolCalls(text) : null;
  const message: AssistantMessage =
    parsed && parsed.toolCalls.length > 0
      ? { role: 'assistant', content: parsed.content, tool_calls: parsed.toolCalls }
      : { role: 'assistant', content: text };
  return {
    index: completion.index,
    message,
    completionIds: completion.tokenIds,
    logprobs: completion.logprobs,
    finishReason: completion.finishReason,
    stopReason: completion.stopReason,
  };
}
