// Training data read straight from a dataset file (trainer_input.experience_buffer with storage_type file, as
// Trinity's SFT/DPO data): each row becomes an Experience with exact token ids.
//   SFT row   {prompt, response}  or  {messages: [...]}   (keys from the format config)
//   tokens  = chat_template(system?, user prompt, add_generation_prompt) ++ encode(response) ++ eos
//   multi-turn (format enableConcatenatedMultiTurn, Trinity's enable_concatenated_multi_turn): a {messages: [...]}
//   row trains every assistant turn; tokens are laid out exactly as a multi-turn rollout produces them
//   (src/engine/conversation.ts): the first prompt, then each assistant turn as generated (its text ++ eos, mask 1)
//   followed by what the chat template renders before the next one (end of turn, user/tool turns, generation
//   prompt; mask 0). Without it only the last assistant turn is trained.
//   DPO row   {prompt, chosen, rejected}                  (schema dpo: chosen/rejected keys from the format config)
//   tokens  = chat_template(...) (the prompt); chosen / rejected = encode(answer) ++ eos
//   tools     a row's tools (format toolsKey, default "tools"; Trinity's tools_key) are given to the chat template
//   split     a folder dataset reads the files of format.split (default 'train'; ./split.ts), in name order
// The reader hands out rows in file order, epoch after epoch; the position follows from the step, so a resumed
// trainer continues exactly where the checkpoint was.
import { basename } from 'node:path';
import {
  ConversationTracker,
  type ConversationTokens,
  type ConversationTurn,
  conversationTokens,
} from '../../engine/conversation.js';
import type { ChatMessage, Tokenizer, ToolDefinition } from '../../tokenizer/index.js';
import type { ChatTurn, Experience } from '../experience.js';
import { readJsonl } from './jsonl.js';
import { SplitError, splitFiles } from './split.js';
import { parseTools, TasksetError } from './taskset.js';

export interface DatasetFormat {
  /** The split of a folder dataset (default 'train'; ./split.ts); a file is the train split. */
  split?: string;
  /** Column of the row's tools (default "tools"), passed to the chat template. */
  toolsKey?: string;
  promptKey?: string;
  responseKey?: string;
  /** Rows carry a conversation (role/content list) under this key; the last assistant turn is the response. */
  messagesKey?: string;
  /** Train every assistant turn of a messages row, not only the last (Trinity's enable_concatenated_multi_turn). */
  enableConcatenatedMultiTurn?: boolean;
  /** Per-row system prompt column (plaintext rows); else `systemPrompt`. */
  systemPromptKey?: string;
  systemPrompt?: string;
  /** DPO datasets: the preferred and the rejected answer columns (default chosen / rejected). */
  chosenKey?: string;
  rejectedKey?: string;
}

export class DatasetError extends Error {
  constructor(where: string, detail: string) {
    super(`${where}: ${detail}`);
    this.name = 'DatasetError';
  }
}

/** The JSONL rows of a dataset's split, each with where it was read (file:line). */
async function* datasetRows(path: string, format: DatasetFormat): AsyncGenerator<{ where: string; row: string; value: unknown }> {
  let files: string[];
  try {
    files = splitFiles(path, format.split ?? 'train');
  } catch (error) {
    if (error instanceof SplitError) throw new DatasetError(error.where, error.detail);
    throw error;
  }
  for (const file of files) {
    // `row` names the row in default task ids: its line, with the file's name when the split has several files
    for await (const { line, value } of readJsonl(file)) {
      yield { where: `${file}:${line}`, row: files.length === 1 ? String(line) : `${basename(file)}:${line}`, value };
    }
  }
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

/** Reads a DPO dataset (JSONL rows {prompt, chosen, rejected}) into experiences with chosen/rejected ids. */
export async function loadDpoDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  const promptKey = format.promptKey ?? 'prompt';
  const chosenKey = format.chosenKey ?? 'chosen';
  const rejectedKey = format.rejectedKey ?? 'rejected';
  const eos = tokenizer.eosTokenIds[0];
  const answer = (text: string) => [...tokenizer.encode(text), ...(eos === undefined ? [] : [eos])];
  const out: Experience[] = [];
  for await (const { where, row: rowName, value } of datasetRows(file, format)) {
    const row = value as Record<string, unknown>;
    for (const key of [promptKey, chosenKey, rejectedKey]) {
      if (row === null || typeof row !== 'object' || typeof row[key] !== 'string')
        throw new DatasetError(where, `'${key}' must be a string`);
    }
    const system = systemPromptOf(row, format, where);
    const messages = [
      ...(system ? [{ role: 'system' as const, content: system }] : []),
      { role: 'user' as const, content: row[promptKey] as string },
    ];
    const promptIds = tokenizer.encodeChat(messages, { addGenerationPrompt: true, ...rowTools(row, format, where) });
    out.push({
      eid: where,
      tokens: promptIds,
      promptLength: promptIds.length,
      chosen: answer(row[chosenKey] as string),
      rejected: answer(row[rejectedKey] as string),
      info: { taskId: typeof row.id === 'string' ? row.id : `dpo:${rowName}` },
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
}

/** Reads an SFT dataset (JSONL) into experiences. */
export async function loadSftDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  const promptKey = format.promptKey ?? 'prompt';
  const responseKey = format.responseKey ?? 'response';
  const eos = tokenizer.eosTokenIds[0];
  const out: Experience[] = [];
  for await (const { where, row: rowName, value } of datasetRows(file, format)) {
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      throw new DatasetError(where, 'a row must be a JSON object');
    const row = value as Record<string, unknown>;
    let messages: ChatTurn[];
    let response: string;
    if (format.messagesKey) {
      const conversation = row[format.messagesKey];
      if (!Array.isArray(conversation) || conversation.length < 2) {
        throw new DatasetError(where, `'${format.messagesKey}' must be a list of at least two {role, content} turns`);
      }
      const last = conversation.at(-1) as ChatTurn;
      if (last.role !== 'assistant' || typeof last.content !== 'string')
        throw new DatasetError(where, `the last turn of '${format.messagesKey}' must be the assistant's`);
      if (format.enableConcatenatedMultiTurn) {
        out.push({
          eid: where,
          ...concatenatedConversationTokens(conversation as ChatTurn[], tokenizer, where, rowTools(row, format, where).tools),
          info: { taskId: typeof row.id === 'string' ? row.id : `sft:${rowName}` },
          messages: conversation as ChatTurn[],
        });
        continue;
      }
      messages = conversation.slice(0, -1) as ChatTurn[];
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
    const promptIds = tokenizer.encodeChat(messages as Parameters<Tokenizer['encodeChat']>[0], {
      addGenerationPrompt: true,
      ...rowTools(row, format, where),
    });
    const responseIds = [...tokenizer.encode(response), ...(eos === undefined ? [] : [eos])];
    out.push({
      eid: where,
      tokens: [...promptIds, ...responseIds],
      promptLength: promptIds.length,
      actionMask: responseIds.map(() => 1),
      info: { taskId: typeof row.id === 'string' ? row.id : `sft:${rowName}` },
      responseText: response,
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
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
