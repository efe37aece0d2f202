// Images through an OpenAI-compatible server (vLLM serving Qwen2.5-VL; `trinity serve` and the engine_process
// children): such a server takes images only inside chat messages, as OpenAI image_url content parts, and renders the
// chat itself. A generate() request with images carries the chat its prompt ids were rendered from
// (GenerateRequest.renderedFrom: chat(), the single-turn workflows), and the remote engine sends
//
//   POST /v1/chat/completions  the chat's messages, the k-th image_url part's url replaced by images[k] as a data URL
//                              (a file path is read here: the server need not share this file system); its tools;
//                              chat_template_kwargs = the tokenizer's templateDefaults under the call's variables;
//                              the sampling fields of /v1/completions (./remote-protocol.ts); logprobs, top_logprobs
//                              and return_tokens_as_token_ids
//
// then checks the server's prompt_token_ids against the request's ids: equal, or equal to them with each image's
// placeholder run one token long (a server that reports its prompt before the processor expands the runs). The
// completions' ids and log-probs are the server's; their text is decoded here from those ids, as the embedded engine
// decodes it (a server's tool-call or reasoning parser changes nothing). The result's prompt ids are the request's and
// the model handle keeps the images as data URLs, so the trainer recomputes log-probs over the same pixels.
//
// Refused with a GenerationError naming the server: images without the chat they were rendered from (model.generate
// with images, a reply prefix after a chat prompt: never sent as text, where the model would read the placeholders as
// words), images on a rollout model folder that is not a vision-language one, and a prompt the server read otherwise
// (another chat template or image processor, or a continued conversation whose exact ids differ from a fresh render):
// the experience would not be what the server sampled from.
import {
  type Completion,
  completionText,
  type FinishReason,
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type ImagePrompts,
  imageDataUrls,
  type RenderedChat,
} from '../engine/index.js';
import type { ChatContentPart, ChatInputMessage, Tokenizer } from '../tokenizer/index.js';
import { samplingFields, tokensAsIds, topLogprobsOf } from './remote-protocol.js';

/** What the image chat reads of the remote engine. */
export interface ImageChatServer {
  readonly baseURL: string;
  /** The model id the request names (a loaded LoRA adapter's name, or the served model). */
  readonly requestModel: string;
  readonly tokenizer: Tokenizer | null;
  readonly vision: ImagePrompts | null;
}

/** An image request ready to send: its body, and the prompt ids the server must read. */
export interface ImageChatRequest {
  body: Record<string, unknown>;
  promptIds: readonly number[];
}

/** The /v1/chat/completions body of a generate() request with images (see the header); refusals name the server. */
export async function imageChatRequest(server: ImageChatServer, request: GenerateRequest): Promise<ImageChatRequest> {
  const where = server.baseURL;
  const chat = request.renderedFrom;
  if (chat === undefined || request.promptIds === undefined)
    throw new GenerationError(
      'invalid',
      `${where}: an OpenAI-compatible server takes images only inside chat messages (image_url parts), and this ` +
        'request has images without the chat its prompt was rendered from (model.generate with images, or a reply ' +
        'prefix after a chat prompt): send image prompts with model.chat, or run an embedded engine',
    );
  if (server.vision === null)
    throw new GenerationError(
      'invalid',
      `${where}: the request has images, but the rollout model folder is not a vision-language model (config.json ` +
        'model_type qwen2_5_vl): its tokenizer and image processor render the prompt the server is checked against',
    );
  const images = await imageDataUrls(request.images ?? []);
  const templateVariables = { ...server.tokenizer?.templateDefaults, ...chat.templateVariables };
  const body = {
    model: server.requestModel,
    messages: withImageUrls(chat, images, where),
    ...(chat.tools && chat.tools.length > 0 ? { tools: chat.tools } : {}),
    ...(Object.keys(templateVariables).length > 0 ? { chat_template_kwargs: templateVariables } : {}),
    ...samplingFields(request),
    logprobs: true,
    top_logprobs: request.topLogprobs ?? 0,
    return_tokens_as_token_ids: true,
  };
  return { body, promptIds: request.promptIds };
}

/** The chat's messages with the k-th image_url part's url made `images[k]` (their counts must agree). */
function withImageUrls(chat: RenderedChat, images: readonly string[], where: string): ChatInputMessage[] {
  let k = 0;
  const messages = chat.messages.map((message) => {
    if (!Array.isArray(message.content)) return message;
    const content = message.content.map((part): ChatContentPart => {
      if (part.type !== 'image_url') return part;
      const url = images[k++];
      if (url === undefined)
        throw new GenerationError(
          'invalid',
          `${where}: the chat has more image parts than the request's ${images.length} image(s)`,
        );
      return { ...part, image_url: { ...part.image_url, url } };
    });
    return { ...message, content };
  });
  if (k !== images.length)
    throw new GenerationError('invalid', `${where}: the chat has ${k} image part(s) for the request's ${images.length} image(s)`);
  return messages;
}

/** A chat choice as vLLM and `trinity serve` answer it with return_token_ids and return_tokens_as_token_ids. */
interface ChatChoiceAnswer {
  index: number;
  finish_reason: string | null;
  stop_reason?: number | string | null;
  token_ids?: number[] | null;
  logprobs?: {
    content?: Array<{ token: string; logprob: number; top_logprobs?: Array<{ token: string; logprob: number }> }> | null;
  } | null;
}

/** The server's answer to imageChatRequest's body as generate()'s result (see the header). */
export function imageChatResult(
  server: ImageChatServer,
  request: GenerateRequest,
  sent: ImageChatRequest,
  reply: unknown,
): GenerateResult {
  const where = server.baseURL;
  const answer = reply as { choices?: ChatChoiceAnswer[]; prompt_token_ids?: number[] | null };
  checkServedPrompt(where, answer.prompt_token_ids, sent.promptIds, (server.vision as ImagePrompts).imageTokenId);
  const n = request.n ?? 1;
  const choices = [...(answer.choices ?? [])].sort((a, b) => a.index - b.index);
  if (choices.length !== n) throw new GenerationError('failed', `${where}: asked for ${n} chat choices, got ${choices.length}`);
  const completions = choices.map((choice, index): Completion => {
    const content = choice.logprobs?.content ?? [];
    const tokenIds = choice.token_ids ?? tokensAsIds(content.map((c) => c.token));
    if (tokenIds === null)
      throw new GenerationError(
        'failed',
        `${where}: chat choice ${index} has no token ids (the server needs return_token_ids, vLLM >= 0.10.2, or ` +
          'return_tokens_as_token_ids)',
      );
    if (content.length !== tokenIds.length)
      throw new GenerationError(
        'failed',
        `${where}: chat choice ${index} has ${tokenIds.length} token ids but ${content.length} logprobs`,
      );
    const top = request.topLogprobs ?? 0;
    const topEntries = content.map((c) => Object.fromEntries((c.top_logprobs ?? []).map((t) => [t.token, t.logprob])));
    const finishReason: FinishReason = choice.finish_reason === 'length' ? 'length' : 'stop';
    const stopReason = finishReason === 'stop' ? (choice.stop_reason ?? tokenIds.at(-1) ?? null) : null;
    return {
      index,
      tokenIds,
      logprobs: content.map((c) => c.logprob),
      ...(top > 0 ? { topLogprobs: topLogprobsOf(where, topEntries, tokenIds.length, top) } : {}),
      text: server.tokenizer === null ? null : textOf(server.tokenizer, tokenIds, finishReason, stopReason, request),
      finishReason,
      stopReason,
    };
  });
  return { promptIds: [...sent.promptIds], completions };
}

/** A completion's text from its ids, as the embedded engine makes it: no final stop token, cut at a stop string. */
function textOf(
  tokenizer: Tokenizer,
  tokenIds: readonly number[],
  finishReason: FinishReason,
  stopReason: number | string | null,
  request: GenerateRequest,
): string {
  const last = tokenIds.at(-1);
  const stopToken =
    finishReason === 'stop' && last !== undefined && (stopReason === last || (request.stopTokenIds ?? []).includes(last));
  const stops = finishReason === 'stop' && typeof stopReason === 'string' ? [stopReason] : null;
  return completionText(tokenizer, tokenIds, { stopToken, stops }, { skipSpecialTokens: request.skipSpecialTokens ?? true });
}

/** The server read the request's prompt (see the header), else a GenerationError naming the first differing token. */
function checkServedPrompt(
  where: string,
  served: readonly number[] | null | undefined,
  promptIds: readonly number[],
  imageTokenId: number,
): void {
  if (!served)
    throw new GenerationError(
      'failed',
      `${where}: the chat answer has no prompt_token_ids (an image prompt's ids are checked against the server's: ` +
        'it needs return_token_ids, vLLM >= 0.10.2)',
    );
  const same = (ids: readonly number[]) => ids.length === served.length && ids.every((id, i) => served[i] === id);
  const collapsed = promptIds.filter((id, i) => id !== imageTokenId || promptIds[i - 1] !== imageTokenId);
  if (same(promptIds) || same(collapsed)) return;
  const i = promptIds.findIndex((id, t) => served[t] !== id);
  const at = i === -1 ? promptIds.length : i;
  throw new GenerationError(
    'failed',
    `${where}: the server read another prompt than the one rendered here from the rollout model folder (its chat ` +
      "template or image processor differs, or a continued conversation's exact ids differ from a fresh render): " +
      `token ${at} is ${served[at] ?? '(past its end)'} there, ${promptIds[at] ?? '(past the end)'} here ` +
      `(${served.length} and ${promptIds.length} tokens)`,
  );
}
