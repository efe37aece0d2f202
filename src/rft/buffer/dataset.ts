// Training data read straight from a dataset file (trainer_input.experience_buffer with storage_type file, as
// Trinity's SFT/DPO data): each row becomes an Experience with exact token ids.
//   SFT row   {prompt, response}  or  {messages: [...]}   (keys from the format config)
//   tokens  = chat_template(system?, user prompt, add_generation_prompt) ++ encode(response) ++ eos
//   DPO row   {prompt, chosen, rejected}                  (schema dpo: chosen/rejected keys from the format config)
//   tokens  = chat_template(...) (the prompt); chosen / rejected = encode(answer) ++ eos
// The reader hands out rows in file order, epoch after epoch; the position follows from the step, so a resumed
// trainer continues exactly where the checkpoint was.
import type { Tokenizer } from '../../tokenizer/index.js';
import type { ChatTurn, Experience } from '../experience.js';
import { readJsonl } from './jsonl.js';

export interface DatasetFormat {
  promptKey?: string;
  responseKey?: string;
  /** Rows carry a conversation (role/content list) under this key; the last assistant turn is the response. */
  messagesKey?: string;
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

/** Reads a DPO dataset (JSONL rows {prompt, chosen, rejected}) into experiences with chosen/rejected ids. */
export async function loadDpoDataset(file: string, tokenizer: Tokenizer, format: DatasetFormat = {}): Promise<Experience[]> {
  const promptKey = format.promptKey ?? 'prompt';
  const chosenKey = format.chosenKey ?? 'chosen';
  const rejectedKey = format.rejectedKey ?? 'rejected';
  const eos = tokenizer.eosTokenIds[0];
  const answer = (text: string) => [...tokenizer.encode(text), ...(eos === undefined ? [] : [eos])];
  const out: Experience[] = [];
  for await (const { line, value } of readJsonl(file)) {
    const where = `${file}:${line}`;
    const row = value as Record<string, unknown>;
    for (const key of [promptKey, chosenKey, rejectedKey]) {
      if (row === null || typeof row !== 'object' || typeof row[key] !== 'string')
        throw new DatasetError(where, `'${key}' must be a string`);
    }
    const messages = [
      ...(format.systemPrompt ? [{ role: 'system' as const, content: format.systemPrompt }] : []),
      { role: 'user' as const, content: row[promptKey] as string },
    ];
    const promptIds = tokenizer.encodeChat(messages, { addGenerationPrompt: true });
    out.push({
      eid: `${file}:${line}`,
      tokens: promptIds,
      promptLength: promptIds.length,
      chosen: answer(row[chosenKey] as string),
      rejected: answer(row[rejectedKey] as string),
      info: { taskId: typeof row.id === 'string' ? row.id : `dpo:${line}` },
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
  for await (const { line, value } of readJsonl(file)) {
    const where = `${file}:${line}`;
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
      messages = conversation.slice(0, -1) as ChatTurn[];
      response = last.content;
    } else {
      const prompt = row[promptKey];
      const answer = row[responseKey];
      if (typeof prompt !== 'string') throw new DatasetError(where, `'${promptKey}' must be a string`);
      if (typeof answer !== 'string') throw new DatasetError(where, `'${responseKey}' must be a string`);
      messages = [
        ...(format.systemPrompt ? [{ role: 'system', content: format.systemPrompt }] : []),
        { role: 'user', content: prompt },
      ];
      response = answer;
    }
    const promptIds = tokenizer.encodeChat(messages as Parameters<Tokenizer['encodeChat']>[0], { addGenerationPrompt: true });
    const responseIds = [...tokenizer.encode(response), ...(eos === undefined ? [] : [eos])];
    out.push({
      eid: `${file}:${line}`,
      tokens: [...promptIds, ...responseIds],
      promptLength: promptIds.length,
      actionMask: responseIds.map(() => 1),
      info: { taskId: typeof row.id === 'string' ? row.id : `sft:${line}` },
      responseText: response,
    });
  }
  if (out.length === 0) throw new DatasetError(file, 'the dataset has no rows');
  return out;
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
