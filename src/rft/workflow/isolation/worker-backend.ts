// The worker thread's side of the model (see ./protocol.ts): a RolloutBackend whose generate() is answered by the
// main thread and whose tokenizer asks the main thread's tokenizer synchronously. chat() renders here with the
// engine's own chat(), as every engine does, so conversations continue from exact ids in the worker.
import { type MessagePort, parentPort, receiveMessageOnPort } from 'node:worker_threads';
import type { AuxiliaryCall } from '../../auxiliary/usage.js';
import { type ChatOptions, type ChatResult, chat } from '../../../engine/chat.js';
import type { GenerateRequest, GenerateResult } from '../../../engine/types.js';
import type { ImagePrompts } from '../../../engine/vision-chat.js';
import type { ChatMessage, Tokenizer } from '../../../tokenizer/index.js';
import { meteredModel, NamedModels } from '../../auxiliary/metered.js';
import type { AuxiliaryModels } from '../../auxiliary/types.js';
import type { RolloutBackend } from '../model-handle.js';
import {
  type AuxiliaryInfo,
  type FromWorker,
  receivedError,
  type SyncReply,
  type TokenEvent,
  type TokenizerInfo,
  type TokenizerMethod,
  type ToWorker,
} from './protocol.js';

/** How long a tokenizer call waits for the main thread (it answers from its event loop, which never blocks long). */
const SYNC_TIMEOUT_MS = 300_000;

const post = (message: FromWorker): void => (parentPort as NonNullable<typeof parentPort>).postMessage(message);

interface PendingCall {
  resolve: (result: GenerateResult) => void;
  reject: (error: Error) => void;
  onToken: ((event: TokenEvent) => void) | undefined;
}

export class WorkerBackend implements RolloutBackend {
  tokenizer: Tokenizer | null = null;
  /** The rollout model's image token and processor for this attempt (null: a text model). */
  vision: ImagePrompts | null = null;
  /** Serial of the running attempt (stamped on every call; the main thread refuses stale ones). */
  attempt = 0;
  readonly #pending = new Map<number, PendingCall>();
  readonly #scoring = new Map<number, { resolve: (value: number[]) => void; reject: (error: Error) => void }>();
  readonly #syncPort: MessagePort;
  readonly #syncFlag: Int32Array;
  #nextCall = 1;

  readonly #onModelVersion: (version: number) => void;

  /** `onModelVersion` gets the weights version the main thread reports with each answer. */
  constructor(syncPort: MessagePort, syncFlag: SharedArrayBuffer, onModelVersion: (version: number) => void) {
    this.#syncPort = syncPort;
    this.#syncFlag = new Int32Array(syncFlag);
    this.#onModelVersion = onModelVersion;
  }

  /** The main thread's tokenizer for this attempt (null: the model has none). */
  useTokenizer(info: TokenizerInfo | null): void {
    this.tokenizer = info === null ? null : tokenizerProxy(info, (method, args) => this.#tokenizerCall(method, args));
  }

  /** Handles the main thread's answers; true when `message` was one. */
  receive(message: ToWorker): boolean {
    if (message.type === 'auxiliaryScored') {
      const pending = this.#scoring.get(message.call);
      this.#scoring.delete(message.call);
      if (message.ok) pending?.resolve(message.value);
      else pending?.reject(receivedError(message.error));
      return true;
    }
    if (message.type === 'token') {
      this.#pending.get(message.call)?.onToken?.(message.token);
      return true;
    }
    if (message.type !== 'generated') return false;
    const pending = this.#pending.get(message.call);
    this.#pending.delete(message.call);
    if (pending === undefined) return true;
    if (message.ok) {
      this.#onModelVersion(message.modelVersion);
      pending.resolve(message.value);
    } else pending.reject(receivedError(message.error));
    return true;
  }

  generate(request: GenerateRequest): Promise<GenerateResult> {
    const { signal, onToken, ...plain } = request;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const call = this.#nextCall++;
    return new Promise<GenerateResult>((resolve, reject) => {
      const onAbort = () => {
        this.#pending.delete(call);
        post({ type: 'cancel', call });
        reject(signal?.reason);
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      const settle =
        <T>(fn: (value: T) => void) =>
        (value: T) => {
          signal?.removeEventListener('abort', onAbort);
          fn(value);
        };
      this.#pending.set(call, { resolve: settle(resolve), reject: settle(reject), onToken });
      post({ type: 'generate', attempt: this.attempt, call, request: plain, stream: onToken !== undefined });
    });
  }

  chat(messages: readonly ChatMessage[], options: ChatOptions = {}): Promise<ChatResult> {
    return chat(this, messages, options);
  }

  /**
   * The attempt's auxiliary models: clients made here on their endpoints, logprobs() and tokenizers answered by the
   * main thread, every call counted there (an 'auxiliaryUsage' message) and aborted with `signal`.
   */
  auxiliaryModels(infos: readonly AuxiliaryInfo[], signal: AbortSignal): AuxiliaryModels {
    const attempt = this.attempt;
    const usage = { record: (name: string, call: AuxiliaryCall) => post({ type: 'auxiliaryUsage', attempt, name, call }) };
    return new NamedModels(
      infos.map((info) =>
        meteredModel(
          {
            name: info.name,
            modelName: info.modelName,
            tokenizer:
              info.tokenizer === null
                ? null
                : tokenizerProxy(info.tokenizer, (method, args) => this.#tokenizerCall(method, args, info.name)),
            ...(info.contextLength !== null ? { contextLength: info.contextLength } : {}),
            endpoint: async () => ({ baseURL: info.baseURL, apiKey: info.apiKey }),
            baseUrl: async () => info.baseURL,
            openai: () => Promise.reject(new Error('unused: the metered view makes its own client')),
            logprobs: (promptIds, completionIds, options = {}) => {
              if (options.signal?.aborted) return Promise.reject(options.signal.reason);
              const call = this.#nextCall++;
              return new Promise<number[]>((resolve, reject) => {
                const onAbort = () => {
                  this.#scoring.delete(call);
                  reject(options.signal?.reason);
                };
                options.signal?.addEventListener('abort', onAbort, { once: true });
                const settle =
                  <T>(fn: (value: T) => void) =>
                  (value: T) => {
                    options.signal?.removeEventListener('abort', onAbort);
                    fn(value);
                  };
                this.#scoring.set(call, { resolve: settle(resolve), reject: settle(reject) });
                post({
                  type: 'auxiliaryScore',
                  attempt,
                  call,
                  name: info.name,
                  promptIds: [...promptIds],
                  completionIds: [...completionIds],
                  ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
                });
              });
            },
          },
          { signal, usage },
        ),
      ),
    );
  }

  /** A tokenizer method on the main thread, synchronously: post, then wait on the flag the main thread raises. */
  #tokenizerCall(method: TokenizerMethod, args: unknown[], model?: string): unknown {
    Atomics.store(this.#syncFlag, 0, 0);
    post({ type: 'tokenizer', attempt: this.attempt, method, args, ...(model !== undefined ? { model } : {}) });
    if (Atomics.wait(this.#syncFlag, 0, 0, SYNC_TIMEOUT_MS) === 'timed-out')
      throw new Error(`tokenizer.${method}: the main thread did not answer within ${SYNC_TIMEOUT_MS / 1000} s`);
    const reply = receiveMessageOnPort(this.#syncPort)?.message as SyncReply | undefined;
    if (reply === undefined) throw new Error(`tokenizer.${method}: the main thread's answer is missing`);
    if (!reply.ok) throw receivedError(reply.error);
    return reply.value;
  }
}

/** A Tokenizer whose methods run on the main thread's tokenizer; the compiler checks every public member is here. */
function tokenizerProxy(info: TokenizerInfo, call: (method: TokenizerMethod, args: unknown[]) => unknown): Tokenizer {
  const proxy: { [K in keyof Tokenizer]: Tokenizer[K] } = {
    vocabSize: info.vocabSize,
    hasChatTemplate: info.hasChatTemplate,
    eosTokenIds: info.eosTokenIds,
    padTokenId: info.padTokenId,
    bosTokenId: info.bosTokenId,
    templateDefaults: {}, // renders run on the main thread's tokenizer, with its defaults (the run's enable_thinking)
    encode: (...args) => call('encode', args) as number[],
    decode: (...args) => call('decode', args) as string,
    tokenToId: (...args) => call('tokenToId', args) as number | null,
    idToToken: (...args) => call('idToToken', args) as string | null,
    isSpecial: (...args) => call('isSpecial', args) as boolean,
    applyChatTemplate: (...args) => call('applyChatTemplate', args) as string,
    encodeChat: (...args) => call('encodeChat', args) as number[],
  };
  // Tokenizer has private fields, so no other object is one to the type checker; every public member is here.
  return proxy as unknown as Tokenizer;
}
