// Messages between the workflow runner (main thread) and a workflow worker thread (./worker-main.ts).
//
// The worker runs user workflow code; the model stays on the main thread. The worker's model handle is an ordinary
// EngineModelHandle over a backend whose generate() crosses to the main thread (chat templates, conversations,
// toExperience, recordedExperiences and the OpenAI endpoint all run in the worker, on the same code as in-process);
// its tokenizer's methods are synchronous, so they are asked over a second port the worker waits on with Atomics.
// Auxiliary models stay here too: the worker makes its own `openai` clients on their endpoints (HTTP works from any
// thread) and reports each call's usage; logprobs() and their tokenizers cross to the main thread like generate().
import type { MessagePort } from 'node:worker_threads';
import type { GenerateRequest, GenerateResult } from '../../../engine/types.js';
import type { ImagePrompts } from '../../../engine/vision-chat.js';
import type { AuxiliaryCall } from '../../auxiliary/usage.js';
import type { Task } from '../../task.js';
import type { PromptLimit } from '../prompt-truncation.js';

/** A generate request as it crosses threads: plain data (no signal, no onToken callback). */
export type PlainGenerateRequest = Omit<GenerateRequest, 'signal' | 'onToken'>;

/** A streamed token event (GenerateRequest.onToken's argument). */
export type TokenEvent = Parameters<NonNullable<GenerateRequest['onToken']>>[0];

/** What the worker needs to know of the main thread's tokenizer (its non-method members). */
export interface TokenizerInfo {
  vocabSize: number;
  hasChatTemplate: boolean;
  eosTokenIds: number[];
  padTokenId: number | null;
  bosTokenId: number | null;
}

/** The tokenizer methods a worker may call (synchronously). */
export const TOKENIZER_METHODS = [
  'encode',
  'decode',
  'tokenToId',
  'idToToken',
  'isSpecial',
  'applyChatTemplate',
  'encodeChat',
] as const;
export type TokenizerMethod = (typeof TOKENIZER_METHODS)[number];

/** An auxiliary model as a worker sees it: its endpoint (for clients made there) and its tokenizer's members. */
export interface AuxiliaryInfo {
  name: string;
  modelName: string;
  baseURL: string;
  apiKey: string | null;
  tokenizer: TokenizerInfo | null;
  /** Its positions per sequence when known (AuxiliaryModel.contextLength); null: unknown. */
  contextLength: number | null;
}

/** One attempt of a workflow, as the worker starts it. */
export interface AttemptStart {
  /** Serial of the attempt on its worker: model calls of an earlier attempt are refused. */
  attempt: number;
  spec: string;
  baseDir: string | undefined;
  task: Task;
  repeatTimes: number;
  runIdBase: number;
  seed: number;
  isEval: boolean;
  modelVersion: number;
  tokenizer: TokenizerInfo | null;
  /** The rollout model's prompt rule (../prompt-truncation.ts), applied by the worker's attempt handle. */
  promptLimit: PromptLimit | null;
  /** A vision-language rollout model's image token and processor (chat renders image parts in the worker). */
  vision: ImagePrompts | null;
  /** The run's auxiliary models, in config order. */
  auxiliary: AuxiliaryInfo[];
}

export type ToWorker =
  | { type: 'load'; id: number; spec: string; baseDir: string | undefined }
  | { type: 'run'; start: AttemptStart }
  | { type: 'abort'; attempt: number; reason: string }
  | { type: 'generated'; call: number; ok: true; value: GenerateResult; modelVersion: number }
  | { type: 'generated'; call: number; ok: false; error: SentError }
  | { type: 'token'; call: number; token: TokenEvent }
  | { type: 'auxiliaryScored'; call: number; ok: true; value: number[] }
  | { type: 'auxiliaryScored'; call: number; ok: false; error: SentError };

export type FromWorker =
  | { type: 'ready'; syncPort: MessagePort; syncFlag: SharedArrayBuffer }
  | { type: 'loaded'; id: number; ok: true; repeatable: boolean; description: string }
  | { type: 'loaded'; id: number; ok: false; error: SentError }
  | { type: 'result'; attempt: number; ok: true; value: unknown }
  | { type: 'result'; attempt: number; ok: false; error: SentError; unsendable?: boolean }
  | { type: 'generate'; attempt: number; call: number; request: PlainGenerateRequest; stream: boolean }
  | { type: 'cancel'; call: number }
  /** `model`: an auxiliary model's tokenizer instead of the rollout model's. */
  | { type: 'tokenizer'; attempt: number; method: TokenizerMethod; args: unknown[]; model?: string }
  | {
      type: 'auxiliaryScore';
      attempt: number;
      call: number;
      name: string;
      promptIds: number[];
      completionIds: number[];
      temperature?: number;
    }
  | { type: 'auxiliaryUsage'; attempt: number; name: string; call: AuxiliaryCall };

/** The reply to a 'tokenizer' call, on the sync port. */
export type SyncReply = { ok: true; value: unknown } | { ok: false; error: SentError };

/** An error as it crosses threads (name, message and a GenerationError's reason survive). */
export interface SentError {
  name: string;
  message: string;
  reason?: string;
}

export function sendError(error: unknown): SentError {
  if (error instanceof Error) {
    const reason = (error as { reason?: unknown }).reason;
    return { name: error.name, message: error.message, ...(typeof reason === 'string' ? { reason } : {}) };
  }
  return { name: 'Error', message: String(error) };
}

/** The error again on the receiving side (a GenerationError keeps its name and `reason`, not its class). */
export function receivedError(sent: SentError): Error {
  const error = new Error(sent.message);
  error.name = sent.name;
  if (sent.reason !== undefined) Object.assign(error, { reason: sent.reason });
  return error;
}
