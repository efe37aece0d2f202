// Training data read straight from a dataset (trainer_input.experience_buffer with storage_type file, as
// Trinity's SFT/DPO data): each row becomes an Experience with exact token ids. Rows come from ./rows.ts: JSONL,
// JSON or parquet files, the `split` and `subset` of a Hugging Face dataset folder or hub cache (./split.ts).
//   SFT row   {prompt, response}  or  {messages: [...]}   (keys from the format config)
//   tokens  = chat_template(system?, user prompt, add_generation_prompt) ++ encode(response) ++ eos
//   multi-turn (format enableConcatenatedMultiTurn, Trinity's enable_concatenated_multi_turn): a {messages: [...]}
//   row trains every assistant turn; tokens are laid out exactly as a multi-turn rollout produces them
//   (src/engine/conversation.ts): the first prompt, then each assistant turn as generated (its text ++ eos, mask 1)
//   followed by what the chat template renders before the next one (end of turn, user/tool turns, generation
//   prompt; mask 0). Without it only the last assistant turn is trained.
//   DPO row, three forms (keys from the format config: promptKey, messagesKey, chosenKey, rejectedKey):
//     plain          {prompt: text, chosen: text, rejected: text}
//                    tokens = chat_template(system?, user prompt); chosen / rejected = encode(answer) ++ eos
//     messages       {messages: [prompt turns], chosen: [assistant turns], rejected: [assistant turns]}
//                    (Trinity's prompt_type messages; the prompt turns may also be the prompt column)
//     conversations  {chosen: [whole conversation], rejected: [whole conversation]}: the prompt is the turns both
//                    share, the answers what follows (TRL's implicit prompt). Rows without the chosen/rejected
//                    columns read `chosen_messages` / `rejected_messages` (the columns of Trinity's DPO experiences).
//                    tokens = chat_template(prompt turns, add_generation_prompt); chosen / rejected = what the
//                    template renders for the answer turns after it, up to the last end-of-turn token
//   turns     a turn's null fields are dropped (datasets fills the fields a turn lacks with null, parquet keeps
//             them); a column holding a conversation as JSON text is parsed
//   tools     a row's tools (format toolsKey, default "tools"; Trinity's tools_key) are given to the chat template
//   images    SFT rows' images (format imageKey, Trinity's image_key; ./dataset-images.ts) join the first user turn as
//             content parts; the prompt ids hold each image's placeholder tokens and the experience its images
// The reader hands out rows in file order, epoch after epoch; the position follows from the step, so a resumed
// trainer continues exactly where the checkpoint was.
import {
  ConversationTracker,
  type ConversationTokens,
  type ConversationTurn,
  conversationTokens,
} from '../../engine/conversation.js';
import type { ChatMessage, Tokenizer, ToolDefinition } from '../../tokenizer/index.js';
import type { ChatTurn, Experience } from '../experience.js';
import { datasetVision, expandImageTokens, imageBaseDir, promptWithImages, rowImageUrls } from './dataset-images.js';
import { DatasetReadError, readDatasetRows } from './rows.js';
import { parseTools, TasksetError } from './taskset.js';

export interface DatasetFormat {
  /** The split of a folder dataset (default 'train'; ./split.ts); a file is the train split. */
  split?: string;
  /** The subset (Hugging Face config; Trinity's subset_name) of a folder dataset; unset: the default one. */
  subset?: string | null;
  /** Column of the row's tools (default "tools"), passed to the chat template. */
  toolsKey?: string;
  promptKey?: string;
  responseKey?: string;
  /** Rows carry a conversation (role/content list) under this key: SFT, the last assistant turn is the response;
   * DPO, the prompt turns. */
  messagesKey?: string;
  /** Train every assistant turn of a messages row, not only the last (Trinity's enable_concatenated_multi_turn). */
  enableConcatenatedMultiTurn?: boolean;
  /** Per-row system prompt column (plaintext rows); else `systemPrompt`. */
  systemPromptKey?: string;
  systemPrompt?: string;
  /** DPO datasets: the preferred and the rejected answer columns (default chosen / rejected). */
  chosenKey?: string;
  rejectedKey?: string;
  /** SFT rows' images column (Trinity's image_key; ./dataset-images.ts). */
  imageKey?: string;
  /** The model folder whose image processor and image token id lay out imageKey's placeholders (set by the stage). */
  modelDir?: string;
}

export class DatasetError extends Error {
  constructor(where: string, detail: string) {
    super(`${where}: ${detail}`);
    this.name = 'DatasetError';
  }
}

/** The rows of a dataset's split (./rows.ts), each with where it was read; read errors become DatasetErrors. */
export async function* datasetRows(
  path: string,
  format: DatasetFormat,
): AsyncGenerator<{ where: string; row: string; value: unknown }> {
  try {
    for await (const { where, name, value } of readDatasetRows(path, { split: format.split, subset: format.subset })) {
      yield { where, row: name, value };
    }
  } catch (error) {
    if (error instanceof DatasetReadError) throw new DatasetError(error.where, error.detail);
    throw error;
  }
}

/**
 * A conversation column's turns: a list of {role, ...} objects (or that list as JSON text), each without its null
 * fields; `key` and `where` name it in errors.
 */
function conversationOf(value: unknown, key: string, where: string): ChatTurn[] {
  let list = value;
  if (typeof value === 'string') {
    try {
      list = JSON.parse(value);
    } catch (error) {
      throw new DatasetError(where, `'${key}' is text but not JSON: ${(error as Error).message}`);
    }
  }
  if (!Array.isArray(list)) {
    throw new DatasetError(
      where,
      `'${key}' must be a list of {role, content} turns, got ${value === null ? 'null' : typeof value}`,
    );
  }
  return list.map((turn, i) => {
    if (
      turn === null ||
      typeof turn !== 'object' ||
      Array.isArray(turn) ||
      typeof (turn as { role?: unknown }).role !== 'string'
    ) {
      throw new DatasetError(where, `'${key}'[${i}] must be a {role, content} object`);
    }
    return Object.fromEntries(Object.entries(turn).filter(([, v]) => v !== null && v !== undefined)) as ChatTurn;
  });
}

/** The row's system prompt (format systemPromptKey, a string when present), else the format's systemPrompt. */
function systemPromptOf(row: Record<string, unknown>, format: DatasetFormat, where: string): string | undefined {
  const key = format.systemPromptKey;
  const value = key === undefined ? undefined : row[key];
  if (value === undefined || value === null) return format.systemPrompt;
  if (typeof value !== 'string') throw new DatasetError(where, `'${key}' must be a string`);
  return value;
}

/** The row's tools (format toolsKey), as chat template options. */
function rowTools(row: Record<string, unknown>, format: DatasetFormat, where: string): { tools?: ToolDefinition[] } {
  const key = format.toolsKey ?? 'tools';
  try {
    const tools = parseTools(row[key], key, where);
    return tools === undefined ? {} : { tools };
  } catch (error) {
    if (error instanceof TasksetError) throw new DatasetError(where, error.message.slice(where.length + 2));
    throw error;
  }
}

/** Turn-by-turn equality of two chat turns (the fields a dataset gives them). */
const sameTurn = (a: ChatTurn, b: ChatTurn): boolean => JSON.stringify(a) === JSON.stringify(b);

/** A DPO row as prompt turns and the two answers: text, or assistant turns (see the header's three forms). */
function dpoParts(
  row: Record<string, unknown>,
  format: DatasetFormat,
  where: string,
): { prompt: ChatTurn[]; chosen: string | ChatTurn[]; rejected: string | ChatTurn[] } {
  const promptKey = format.promptKey ?? 'prompt';
  const defaults = format.chosenKey === undefined && format.rejectedKey === undefined;
  // rows without chosen/rejected columns: Trinity's experience columns, whole conversations
  const [chosenKey, rejectedKey] =
    defaults && row.chosen === undefined && row.rejected === undefined && row.chosen_messages !== undefined
      ? ['chosen_messages', 'rejected_messages']
      : [format.chosenKey ?? 'chosen', format.rejectedKey ?? 'rejected'];
  const answer = (key: string): string | ChatTurn[] => {
    const value = row[key];
    if (typeof value === 'string') return value;
    if (value === undefined || value === null) {
      throw new DatasetError(where, `missing '${key}' (the ${key === chosenKey ? 'chosen' : 'rejected'} answer)`);
    }
    if (!Array.isArray(value)) throw new DatasetError(where, `'${key}' must be text or a list of turns, got ${typeof value}`);
    return conversationOf(value, key, where);
  };
  const chosen = answer(chosenKey);
  const rejected = answer(rejectedKey);
  if (typeof chosen !== typeof rejected) {
    throw new DatasetError(where, `'${chosenKey}' and '${rejectedKey}' must both be text or both be lists of turns`);
  }
  const promptFrom = (): ChatTurn[] => {
    if (format.messagesKey !== undefined && row[format.messagesKey] !== undefined && row[format.messagesKey] !== null) {
      return conversationOf(row[format.messagesKey], format.messagesKey, where);
    }
    const prompt = row[promptKey];
    if (typeof prompt === 'string') {
      const system = systemPromptOf(row, format, where);
      return [...(system ? [{ role: 'system', content: system }] : []), { role: 'user', content: prompt }];
    }
    if (prompt === undefined || prompt === null) {
      throw new DatasetError(where, `missing '${format.messagesKey ?? promptKey}' (the prompt)`);
    }
    return conversationOf(prompt, promptKey, where);
  };
  if (typeof chosen === 'string' || typeof rejected === 'string') return { prompt: promptFrom(), chosen, rejected };
  const startsWithAnswer = (turns: ChatTurn[]) => turns[0]?.role === 'assistant';
  if (startsWithAnswer(chosen) && startsWithAnswer(rejected)) return { prompt: promptFrom(), chosen, rejected };
  // whole conversations: the prompt is the turns both share
  let shared = 0;
  while (
    shared < chosen.length &&
    shared < rejected.length &&
    sameTurn(chosen[shared] as ChatTurn, rejected[shared] as ChatTurn)
  ) {
    shared++;
  }
  const parts = { prompt: chosen.slice(0, shared), chosen: chosen.slice(shared), rejected: rejected.slice(shared) };
  for (const [key, turns] of [
    [chosenKey, parts.chosen],
    [rejectedKey, parts.rejected],
  ] as const) {
    if (turns.length === 0 || turns[0]?.role !== 'assistant') {
      throw new DatasetError(
        where,
        `'${key}' must continue the shared prompt (${shared} turns) with an assistant turn, got ${turns.length === 0 ? 'nothing' : `a '${turns[0]?.role}' turn`}`,
      );
    }
  }
  if (parts.prompt.length === 0) throw new DatasetError(where, `'${chosenKey}' and '${rejectedKey}' share no prompt turn`);
  return parts;
}

/**
 * The ids of answer turns after a prompt: what the chat template renders for them after the generation prompt, up to
 * and including the last end-of-turn (eos) token; when the template does not extend the prompt that way, the
 * assistant turns' text, each ++ eos.
 */
function answerTurnIds(
  prompt: ChatTurn[],
  turns: ChatTurn[],
  tokenizer: Tokenizer,
  tools: ToolDefinition[] | undefined,
): number[] {
  const eos = tokenizer.eosTokenIds[0];
  const options = tools === undefined ? {} : { tools };
  const before = tokenizer.applyChatTemplate(prompt as ChatMessage[], { addGenerationPrompt: true, ...options });
  const full = tokenizer.applyChatTemplate([...prompt, ...turns] as ChatMessage[], { addGenerationPrompt: false, ...options });
  if (eos !== undefined && full.startsWith(before)) {
    const ids = tokenizer.encode(full.slice(before.length));
    const end = ids.lastIndexOf(eos);
    if (end >= 0) return ids.slice(0, end + 1);
  }
  return turns
    .filter((t) => t.role === 'assistant')
    .flatMap((t) => [...tokenizer.encode(typeof t.content === 'string' ? t.content : ''), ...(eos === undefined ? [] : [eos])]);
}

/** Reads a DPO dataset (rows in any of the header's three forms) into experiences with chosen/rejected ids. */
export async function loadDpoDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  refuseImages(file, format, 'DPO');
  const eos = tokenizer.eosTokenIds[0];
  const textIds = (text: string) => [...tokenizer.encode(text), ...(eos === undefined ? [] : [eos])];
  const out: Experience[] = [];
  for await (const { where, row: rowName, value } of datasetRows(file, format)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value)) {
      throw new DatasetError(where, 'a row must be a JSON object');
    }
    const row = value as Record<string, unknown>;
    const { prompt, chosen, rejected } = dpoParts(row, format, where);
    const { tools } = rowTools(row, format, where);
    const promptIds = tokenizer.encodeChat(prompt as Parameters<Tokenizer['encodeChat']>[0], {
      addGenerationPrompt: true,
      ...(tools === undefined ? {} : { tools }),
    });
    const ids = (answer: string | ChatTurn[]) =>
      typeof answer === 'string' ? textIds(answer) : answerTurnIds(prompt, answer, tokenizer, tools);
    out.push({
      eid: where,
      tokens: promptIds,
      promptLength: promptIds.length,
      chosen: ids(chosen),
      rejected: ids(rejected),
      info: { taskId: typeof row.id === 'string' ? row.id : `dpo:${rowName}` },
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
}

/** Reads an SFT dataset (rows {prompt, response} or {messages}: see the header) into experiences. */
export async function loadSftDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  const promptKey = format.promptKey ?? 'prompt';
  const responseKey = format.responseKey ?? 'response';
  const eos = tokenizer.eosTokenIds[0];
  const { imageKey } = format;
  const vision = imageKey === undefined ? null : datasetVision(format.modelDir, file);
  const baseDir = imageBaseDir(file);
  const out: Experience[] = [];
  for await (const { where, row: rowName, value } of datasetRows(file, format)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new DatasetError(where, 'a row must be a JSON object');
    const row = value as Record<string, unknown>;
    const images = imageKey === undefined ? [] : await rowImageUrls(row[imageKey], imageKey, where, baseDir);
    let messages: ChatTurn[];
    let response: string;
    if (format.messagesKey) {
      const conversation = conversationOf(row[format.messagesKey], format.messagesKey, where);
      if (conversation.length < 2) {
        throw new DatasetError(where, `'${format.messagesKey}' must be a list of at least two {role, content} turns`);
      }
      const last = conversation.at(-1) as ChatTurn;
      if (last.role !== 'assistant' || typeof last.content !== 'string')
        throw new DatasetError(where, `the last turn of '${format.messagesKey}' must be the assistant's`);
      if (format.enableConcatenatedMultiTurn && images.length > 0)
        throw new DatasetError(where, `format.enable_concatenated_multi_turn with images ('${imageKey}') is not supported`);
      if (format.enableConcatenatedMultiTurn) {
        out.push({
          eid: where,
          ...concatenatedConversationTokens(conversation, tokenizer, where, rowTools(row, format, where).tools),
          info: { taskId: typeof row.id === 'string' ? row.id : `sft:${rowName}` },
          messages: conversation,
        });
        continue;
      }
      messages = conversation.slice(0, -1);
      response = last.content;
    } else {
      const prompt = row[promptKey];
      const answer = row[responseKey];
      if (typeof prompt !== 'string') throw new DatasetError(where, `'${promptKey}' must be a string`);
      if (typeof answer !== 'string') throw new DatasetError(where, `'${responseKey}' must be a string`);
      const system = systemPromptOf(row, format, where);
      messages = [...(system ? [{ role: 'system', content: system }] : []), { role: 'user', content: prompt }];
      response = answer;
    }
    if (images.length > 0) messages = withImagesInFirstUserTurn(messages, images, where);
    const templateIds = tokenizer.encodeChat(messages as Parameters<Tokenizer['encodeChat']>[0], {
      addGenerationPrompt: true,
      ...rowTools(row, format, where),
    });
    const promptIds = vision === null ? templateIds : await expandImageTokens(templateIds, images, vision, where);
    const responseIds = [...tokenizer.encode(response), ...(eos === undefined ? [] : [eos])];
    out.push({
      eid: where,
      tokens: [...promptIds, ...responseIds],
      promptLength: promptIds.length,
      actionMask: responseIds.map(() => 1),
      info: { taskId: typeof row.id === 'string' ? row.id : `sft:${rowName}` },
      responseText: response,
      ...(images.length > 0 ? { images } : {}),
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
}

/** format.image_key on a dataset whose rows do not take images (DPO, CPT) is an error, not a dropped setting. */
export function refuseImages(file: string, format: DatasetFormat, kind: string): void {
  if (format.imageKey !== undefined)
    throw new DatasetError(
      file,
      `format.image_key ('${format.imageKey}'): ${kind} datasets take no images here (SFT and tasksets do)`,
    );
}

/** The conversation with `images` in its first user turn (./dataset-images.ts promptWithImages). */
function withImagesInFirstUserTurn(turns: ChatTurn[], images: string[], where: string): ChatTurn[] {
  const first = turns.findIndex((t) => t.role === 'user');
  if (first < 0) throw new DatasetError(where, 'the row has images but no user turn to put them in');
  const turn = turns[first] as ChatTurn;
  if (typeof turn.content !== 'string') throw new DatasetError(where, 'the first user turn already holds content parts');
  return turns.map((t, i) => (i === first ? { ...t, content: promptWithImages(turn.content as string, images, where) } : t));
}

/**
 * A whole conversation as one training sample, every assistant turn trained (see the header): the tokens a rollout
 * that generated these assistant turns would have (a ConversationTracker continues each turn from the exact ids
 * before it), action mask 1 on the assistant turns' tokens and 0 on everything between them.
 */
export function concatenatedConversationTokens(
  conversation: readonly ChatTurn[],
  tokenizer: Tokenizer,
  where = 'conversation',
  tools?: readonly ToolDefinition[],
): Pick<ConversationTokens, 'tokens' | 'promptLength' | 'actionMask'> {
  const options = tools === undefined ? {} : { tools };
  const eos = tokenizer.eosTokenIds[0];
  const tracker = new ConversationTracker(tokenizer);
  let last: ConversationTurn | null = null;
  for (const [i, message] of conversation.entries()) {
    if (message === null || typeof message !== 'object' || typeof message.role !== 'string')
      throw new DatasetError(where, `turn ${i} must be a {role, content} object`);
    if (message.role !== 'assistant') continue;
    if (typeof message.content !== 'string' && !Array.isArray(message.tool_calls))
      throw new DatasetError(where, `assistant turn ${i} has neither text content nor tool_calls`);
    if (i === 0) throw new DatasetError(where, 'the conversation starts with an assistant turn (nothing to answer)');
    const before = conversation.slice(0, i) as ChatMessage[];
    const reply = message as ChatMessage;
    const completionIds = assistantTurnIds(before, reply, tokenizer, eos, tools);
    last = tracker.record(tracker.prompt(before, options), {
      completionIds,
      logprobs: completionIds.map(() => 0),
      finishReason: 'stop',
      reply,
    });
  }
  if (last === null) throw new DatasetError(where, 'the conversation has no assistant turn');
  const { tokens, promptLength, actionMask } = conversationTokens(last);
  return { tokens, promptLength, actionMask };
}

/**
 * The ids the model generates for an assistant turn: what the template renders for it after the generation prompt,
 * up to and including the end-of-turn (eos) token (so tool calls are rendered as the template writes them); when the
 * template does not extend the prompt that way, the reply's text ++ eos.
 */
function assistantTurnIds(
  before: ChatMessage[],
  reply: ChatMessage,
  tokenizer: Tokenizer,
  eos: number | undefined,
  tools: readonly ToolDefinition[] | undefined,
): number[] {
  const withTools = tools === undefined ? {} : { tools: [...tools] };
  const prompt = tokenizer.applyChatTemplate(before, { addGenerationPrompt: true, ...withTools });
  const full = tokenizer.applyChatTemplate([...before, reply], { addGenerationPrompt: false, ...withTools });
  if (eos !== undefined && full.startsWith(prompt)) {
    const ids = tokenizer.encode(full.slice(prompt.length));
    const end = ids.indexOf(eos);
    if (end >= 0) return ids.slice(0, end + 1);
  }
  return [...tokenizer.encode(reply.content ?? ''), ...(eos === undefined ? [] : [eos])];
}

/** Batches from a fixed list, in order, wrapping around epochs; batch b starts at row b * batchSize. */
export class DatasetReader {
  constructor(
    readonly rows: readonly Experience[],
    readonly batchSize: number,
  ) {}

  /** The batch of training step `step` (1-based). */
  batch(step: number): Experience[] {
    const start = ((step - 1) * this.batchSize) % this.rows.length;
    return Array.from({ length: this.batchSize }, (_, i) => this.rows[(start + i) % this.rows.length] as Experience);
  }

  /** Steps for `epochs` passes over the data. */
  stepsFor(epochs: number): number {
    return Math.ceil((this.rows.length * epochs) / this.batchSize);
  }
}
