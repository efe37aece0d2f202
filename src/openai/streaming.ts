// Streamed completions: token events from the engine → chunks (a shape builds them: chat or text) → server-sent
// events.
//
// Text is sent as it is generated, less a stop string the text now holds (the token that completes one arrives before
// the engine ends the sequence) and what could still turn out to be the start of one or (with tools) of a <tool_call>
// block, so the concatenated deltas always equal the final text: a stop string is cut from the end text, and a tool
// call leaves the text to arrive whole in the closing chunk. Each delta carries the tokens it covers
// (ids, log-probs, top log-probs); a token whose text is held back rides with the next delta that is sent.
//
// A request that fails before its first chunk (a bad stop id, a closed engine) is still an HTTP error, not a stream;
// after that, an error is one `data: {error}` event, as OpenAI's streams end.
import type { ServerResponse } from 'node:http';
import {
  earliestStop,
  type GenerateResult,
  IncrementalDetokenizer,
  TOOL_CALL_OPEN,
  type TokenEvent,
  type TopLogprob,
} from '../engine/index.js';
import type { Tokenizer } from '../tokenizer/index.js';
import { asHttpError } from './protocol.js';
import type { TokenSpan } from './responses.js';

/** How one endpoint's chunks look. */
export interface StreamShape<Chunk> {
  /** Hold back text from a <tool_call> on (its calls come in the closing chunk). */
  holdToolCalls: boolean;
  /** The chunk that opens choice `index` (chat: the role), or null. */
  first(index: number): Chunk | null;
  /** Text of choice `index` that is now safe to send, and the tokens it covers. */
  delta(index: number, text: string, span: TokenSpan): Chunk;
  /** The final text of each completion (in result order) and the closing chunks. */
  end(result: GenerateResult): { texts: string[]; chunks: Chunk[] };
  /** The usage chunk after the closing ones, or null (not asked for). */
  usage(result: GenerateResult): Chunk | null;
}

export interface StreamOptions<Chunk> {
  tokenizer: Tokenizer;
  /** Completions generated (choice indices 0..n-1). */
  n: number;
  /** The stop strings generation ends at: the text that could begin one is held back. */
  stops: readonly string[];
  skipSpecialTokens: boolean;
  shape: StreamShape<Chunk>;
  /** Starts generation, calling onToken for each token as it is sampled. */
  generate(onToken: (event: TokenEvent) => void): Promise<GenerateResult>;
}

/** Starts generating; resolves with the chunks once the first one is ready (or rejects when generation failed first). */
export async function streamChunks<Chunk>(options: StreamOptions<Chunk>): Promise<AsyncIterable<Chunk>> {
  const { shape } = options;
  const queue = new ChunkQueue<Chunk>();
  const streams = Array.from({ length: options.n }, () => ({
    detokenizer: new IncrementalDetokenizer(options.tokenizer, { skipSpecialTokens: options.skipSpecialTokens }),
    sent: '',
    pending: { ids: [] as number[], logprobs: [] as number[], topLogprobs: [] as TopLogprob[][] },
  }));
  const take = (s: (typeof streams)[number]): TokenSpan => {
    const span = { ...s.pending, topLogprobs: s.pending.topLogprobs.length > 0 ? s.pending.topLogprobs : undefined };
    s.pending = { ids: [], logprobs: [], topLogprobs: [] };
    return span;
  };
  for (let i = 0; i < options.n; i++) {
    const first = shape.first(i);
    if (first !== null) queue.push(first);
  }
  const onToken = (event: TokenEvent) => {
    const s = streams[event.index];
    if (s === undefined) return;
    s.pending.ids.push(event.tokenId);
    s.pending.logprobs.push(event.logprob);
    if (event.topLogprobs) s.pending.topLogprobs.push(event.topLogprobs);
    s.detokenizer.push(event.tokenId);
    const safe = safeText(s.detokenizer.text, options.stops, shape.holdToolCalls);
    if (safe.length > s.sent.length && safe.startsWith(s.sent)) {
      queue.push(shape.delta(event.index, safe.slice(s.sent.length), take(s)));
      s.sent = safe;
    }
  };
  options.generate(onToken).then(
    (result) => {
      const { texts, chunks } = shape.end(result);
      result.completions.forEach((completion, k) => {
        const s = streams[completion.index];
        if (s === undefined) return;
        const text = texts[k] ?? '';
        const rest = text.startsWith(s.sent) ? text.slice(s.sent.length) : '';
        if (rest.length > 0 || s.pending.ids.length > 0) queue.push(shape.delta(completion.index, rest, take(s)));
      });
      for (const chunk of chunks) queue.push(chunk);
      const usage = shape.usage(result);
      if (usage !== null) queue.push(usage);
      queue.end();
    },
    (error: unknown) => queue.fail(asHttpError(error)),
  );
  await queue.started();
  return queue;
}

/** Writes chunks as server-sent events (`data: <json>`), then `data: [DONE]`; an error mid-stream is its last event. */
export async function writeEventStream(res: ServerResponse, chunks: AsyncIterable<unknown>): Promise<void> {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  try {
    for await (const chunk of chunks) {
      if (res.destroyed) return;
      res.write(`data: ${JSON.stringify(chunk)}\n\n`);
    }
    res.write('data: [DONE]\n\n');
  } catch (error) {
    res.write(`data: ${JSON.stringify(asHttpError(error).toJSON())}\n\n`);
  }
  res.end();
}

/**
 * Text that can be sent now: what comes before a stop string, less what might start one or a tool call (and, with
 * tools, trailing space).
 */
export function safeText(text: string, stops: readonly string[], holdToolCalls: boolean): string {
  const holdBack = Math.max(0, ...stops.map((s) => s.length - 1));
  let end = Math.max(0, text.length - holdBack);
  const stop = earliestStop(text, stops);
  if (stop !== null) end = Math.min(end, stop.index);
  if (holdToolCalls) {
    const open = text.indexOf(TOOL_CALL_OPEN);
    if (open >= 0) end = Math.min(end, open);
    else {
      for (let k = Math.min(TOOL_CALL_OPEN.length - 1, text.length); k > 0; k--) {
        if (TOOL_CALL_OPEN.startsWith(text.slice(text.length - k))) {
          end = Math.min(end, text.length - k);
          break;
        }
      }
    }
    while (end > 0 && /\s/.test(text[end - 1] as string)) end--;
  }
  return text.slice(0, end);
}

/** An async iterable of chunks fed by push(); started() resolves at the first chunk or the end. */
class ChunkQueue<T> implements AsyncIterable<T> {
  readonly #items: T[] = [];
  #done = false;
  #error: Error | null = null;
  #wake: (() => void) | null = null;
  #startedResolve!: () => void;
  #startedReject!: (e: Error) => void;
  readonly #started = new Promise<void>((resolve, reject) => {
    this.#startedResolve = resolve;
    this.#startedReject = reject;
  });
  #hasStarted = false;

  started(): Promise<void> {
    return this.#started;
  }

  push(item: T): void {
    this.#items.push(item);
    this.#start();
    this.#wake?.();
  }

  end(): void {
    this.#done = true;
    this.#start();
    this.#wake?.();
  }

  fail(error: Error): void {
    this.#error = error;
    this.#done = true;
    if (!this.#hasStarted) {
      this.#hasStarted = true;
      this.#startedReject(error);
    }
    this.#wake?.();
  }

  #start(): void {
    if (this.#hasStarted) return;
    this.#hasStarted = true;
    this.#startedResolve();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    for (;;) {
      if (this.#items.length > 0) {
        yield this.#items.shift() as T;
        continue;
      }
      if (this.#error) throw this.#error;
      if (this.#done) return;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
      });
      this.#wake = null;
    }
  }
}
