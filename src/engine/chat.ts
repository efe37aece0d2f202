// Chat completions over a rollout engine: messages → the tokenizer's chat template with add_generation_prompt →
// prompt ids → generate → the assistant message. The prompt and completion ids are the exact ids the model saw and
// produced (never re-tokenised from text), so a trainer can score the same tokens.
//
// With `conversation` (a ConversationTracker), a call whose messages extend an earlier call's messages and reply
// continues from that call's exact ids (./conversation.ts) and each choice records its turn; with `tools`, Hermes-style
// <tool_call> blocks in the text become the message's tool_calls (./tool-calls.ts). With a vision-language engine,
// messages may hold image content parts: each image's placeholder run is expanded to its token count and the images
// go with the request as decoded once (./vision-chat.ts), and the messages as the request's renderedFrom (an
// OpenAI-compatible server takes images only inside chat messages); the result's `images` are their data URLs.
import type { DecodedImage } from '../model/index.js';
import type { ChatInputMessage, Tokenizer, ToolCall, ToolDefinition } from '../tokenizer/index.js';
import type { ConversationPrompt, ConversationTracker, ConversationTurn } from './conversation.js';
import type { Completion, GenerateOptions, GenerateRequest, GenerateResult, RenderedChat } from './types.js';
import type { RoutedExpertIds } from './routed-experts.js';
import type { FinishReason } from './stopping.js';
import { parseToolCalls } from './tool-calls.js';
import { type ChatImages, chatImages, expandImagePads, hasImageParts, type ImagePrompts } from './vision-chat.js';

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
  /** See Completion.routedExperts (an engine with recordRoutedExperts). */
  routedExperts?: RoutedExpertIds;
}

/** All n choices, with the first one's fields at the top level for the common n = 1 case. */
export interface ChatResult extends ChatChoice {
  /** The rendered prompt's ids, exactly as the model read them. */
  promptIds: number[];
  choices: ChatChoice[];
  /** The prompt's images as data URLs, in placeholder order (messages with image parts). */
  images?: string[];
}

/** What chat() needs of an engine. */
export interface ChatEngine {
  readonly tokenizer: Tokenizer | null;
  /** A vision-language model's image token and processor; absent or null: image parts are refused. */
  readonly vision?: ImagePrompts | null;
  generate(request: GenerateRequest): Promise<GenerateResult>;
}

export async function chat(
  engine: ChatEngine,
  messages: readonly ChatInputMessage[],
  options: ChatOptions = {},
): Promise<ChatResult> {
  const { tools, templateVariables, conversation, turnMeta, ...generateOptions } = options;
  // a text chat reaches generate() synchronously, as before images existed (callers may rely on its order)
  const images = hasImageParts(messages) ? await chatImages(messages, engine.vision) : null;
  const prompt = renderChatPrompt(engine.tokenizer, messages, { ...options, images });
  // an image prompt carries the chat it was rendered from: a server that takes images only in chat messages sends it
  const withImages = prompt.requestImages ? { images: prompt.requestImages, renderedFrom: prompt.renderedFrom } : {};
  const request = { ...generateOptions, promptIds: prompt.promptIds, ...withImages };
  return chatResult(await engine.generate(request), prompt, options);
}

/** A rendered chat prompt: its ids and, with a conversation, what it continues. */
export interface ChatPrompt {
  promptIds: number[];
  conversation: ConversationPrompt | null;
  /** The images' data URLs (./vision-chat.ts), in placeholder order. */
  images?: readonly string[];
  /** The same images as the generate request carries them: decoded once (./vision-chat.ts), not decoded again. */
  requestImages?: readonly DecodedImage[];
  /** With images: the chat rendered (GenerateRequest.renderedFrom, for servers that take images only in chats). */
  renderedFrom?: RenderedChat;
}

/**
 * chat()'s first half: messages → prompt ids (continuing a recorded conversation when given one), each image's
 * placeholder run expanded to its token count (`images`, from chatImages).
 */
export function renderChatPrompt(
  tokenizer: Tokenizer | null,
  messages: readonly ChatInputMessage[],
  options: Pick<ChatOptions, 'tools' | 'templateVariables' | 'conversation'> & { images?: ChatImages | null } = {},
): ChatPrompt {
  const prompt = renderTextPrompt(tokenizer, messages, options);
  const images = options.images;
  if (!images) return prompt;
  const { imageTokenId, tokenCounts, dataUrls, decoded } = images;
  const turn = prompt.conversation;
  const parallel = turn ? [turn.generatedMask, turn.logprobs] : [];
  let expanded: ReturnType<typeof expandImagePads>;
  try {
    expanded = expandImagePads(prompt.promptIds, imageTokenId, tokenCounts, parallel);
  } catch (error) {
    throw new RangeError(`chat: ${(error as Error).message}`, { cause: error });
  }
  if (turn) {
    if (turn.parent === null) turn.rootPromptLength = expanded.ids.length; // a fresh conversation: the whole prompt
    turn.promptIds = expanded.ids;
    [turn.generatedMask, turn.logprobs] = expanded.parallel as [number[], number[]];
    turn.images = [...dataUrls];
  }
  const { tools, templateVariables } = options;
  const renderedFrom = { messages, ...(tools ? { tools } : {}), ...(templateVariables ? { templateVariables } : {}) };
  return { promptIds: expanded.ids, conversation: turn, images: dataUrls, requestImages: decoded, renderedFrom };
}

function renderTextPrompt(
  tokenizer: Tokenizer | null,
  messages: readonly ChatInputMessage[],
  options: Pick<ChatOptions, 'tools' | 'templateVariables' | 'conversation'>,
): ChatPrompt {
  if (tokenizer === null)
    throw new TypeError('chat: the engine has no tokenizer (create it with one, or call generate() with ids)');
  if (!tokenizer.hasChatTemplate)
    throw new TypeError(
      'chat: the tokenizer has no chat template (chat_template.jinja, or chat_template in tokenizer_config.json)',
    );
  if (messages.length === 0) throw new RangeError('chat: messages is empty');
  const { tools, templateVariables, conversation } = options;
  if (conversation) {
    const prompt = conversation.prompt(messages, {
      ...(tools ? { tools } : {}),
      ...(templateVariables ? { templateVariables } : {}),
    });
    return { promptIds: prompt.promptIds, conversation: prompt };
  }
  const promptIds = tokenizer.encodeChat(messages, {
    addGenerationPrompt: true,
    ...(tools ? { tools } : {}),
    ...(templateVariables ? { variables: templateVariables } : {}),
  });
  return { promptIds, conversation: null };
}

/** chat()'s second half: the engine's completions → assistant messages (tool calls parsed), turns recorded. */
export function chatResult(
  result: GenerateResult,
  prompt: ChatPrompt,
  options: Pick<ChatOptions, 'tools' | 'conversation' | 'turnMeta'> & { parseToolCalls?: boolean } = {},
): ChatResult {
  const { tools, conversation, turnMeta } = options;
  const parseTools = options.parseToolCalls ?? (tools !== undefined && tools.length > 0);
  const choices = result.completions.map((completion) => {
    const choice = toChoice(completion, parseTools);
    if (conversation && prompt.conversation) {
      choice.turn = conversation.record(prompt.conversation, {
        completionIds: choice.completionIds,
        logprobs: choice.logprobs,
        finishReason: choice.finishReason,
        reply: choice.message,
        ...(turnMeta ? { meta: turnMeta } : {}),
      });
    }
    return choice;
  });
  const images = prompt.images ? { images: [...prompt.images] } : {};
  return { ...(choices[0] as ChatChoice), promptIds: result.promptIds, choices, ...images };
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
    ...(completion.routedExperts ? { routedExperts: completion.routedExperts } : {}),
  };
}
