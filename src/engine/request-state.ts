// One generate() request inside the engine (./rollout-engine.ts): its state (the prepared request, the settle
// functions of its promise, its cleanup), its n sequences (one per sample, each with its own generator, stop-string
// matcher, cache slot and tokens so far), the Completion each sequence ends as, and the abort signal and timeout that
// can end it early. The engine's loop decides when a sequence waits, runs and finishes; this file says what a request
// and a sequence are.
import type { Tokenizer } from '../tokenizer/index.js';
import * as torch from '../torch/index.js';
import { type PreparedRequest, sampleSeed } from './prepare-request.js';
import type { SequenceRouting } from './routed-experts.js';
import { completionText, type FinishReason, StopStringMatcher } from './stopping.js';
import {
  type Completion,
  type GenerateRequest,
  type GenerateResult,
  GenerationError,
  type TokenEvent,
  type TopLogprob,
} from './types.js';
import type { VisionRequest } from './vision-requests.js';

export interface Finish {
  reason: FinishReason;
  stopReason: number | string | null;
}

export interface RequestState extends PreparedRequest {
  readonly id: number;
  /** The fairShareKey asked for; null: the request is its own key (see shareKey in ./rollout-engine.ts). */
  readonly fairShareKey: string | null;
  readonly onToken: ((event: TokenEvent) => void) | null;
  readonly sequences: Sequence[];
  readonly resolve: (result: GenerateResult) => void;
  readonly reject: (error: Error) => void;
  settled: boolean;
  unfinished: number;
  cleanup: () => void;
  /** A vision-language model's images of the request (./vision-requests.ts), set before it queues. */
  vision?: VisionRequest;
}

/** A prepared request's state with its n sequences, not yet queued (its cleanup is set when it is watched). */
export function createRequestState(
  prepared: PreparedRequest,
  request: Pick<GenerateRequest, 'onToken' | 'fairShareKey'>,
  id: number,
  settle: Pick<RequestState, 'resolve' | 'reject'>,
  tokenizer: Tokenizer | null,
): RequestState {
  const state: RequestState = {
    ...prepared,
    ...settle,
    onToken: request.onToken ?? null,
    id,
    fairShareKey: request.fairShareKey ?? null,
    sequences: [],
    settled: false,
    unfinished: prepared.n,
    cleanup: () => {},
  };
  state.sequences.push(...createSequences(state, tokenizer));
  return state;
}

export interface Sequence {
  readonly request: RequestState;
  readonly index: number;
  readonly generator: torch.Generator | null;
  readonly matcher: StopStringMatcher | null;
  /** The cache slot while prefilled or decoding; -1 while waiting or after it left. */
  slot: number;
  readonly tokenIds: number[];
  readonly logprobs: number[];
  readonly topLogprobs: TopLogprob[][];
  /** The routed experts so far (an engine with recordRoutedExperts), else null. */
  routing: SequenceRouting | null;
  finish: Finish | null;
}

/** Request `state`'s n sequences, waiting for a slot: sample i draws with a generator seeded sampleSeed(seed, i). */
export function createSequences(state: RequestState, tokenizer: Tokenizer | null): Sequence[] {
  return Array.from({ length: state.n }, (_, i) => ({
    request: state,
    index: i,
    // a CPU generator whatever the device (see drawFromCdf): no per-row kernel launches on a GPU, and a seed
    // draws the same uniforms on every device
    generator: state.params.temperature === 0 ? null : new torch.Generator(sampleSeed(state.seed, i)),
    matcher:
      state.stops !== null && tokenizer !== null
        ? new StopStringMatcher(state.stops, tokenizer, { skipSpecialTokens: state.skipSpecialTokens })
        : null,
    slot: -1,
    tokenIds: [],
    logprobs: [],
    topLogprobs: [],
    routing: null,
    finish: null,
  }));
}

/** A finished sequence as the caller sees it: its ids and log-probs, and its text (null without a tokenizer). */
export function completionOf(s: Sequence, tokenizer: Tokenizer | null): Completion {
  const state = s.request;
  const f = s.finish as Finish;
  return {
    index: s.index,
    tokenIds: s.tokenIds,
    logprobs: s.logprobs,
    ...(state.topLogprobs > 0 ? { topLogprobs: s.topLogprobs } : {}),
    ...(s.routing ? { routedExperts: s.routing.result() } : {}),
    text:
      tokenizer === null
        ? null
        : completionText(
            tokenizer,
            s.tokenIds,
            { stopToken: typeof f.stopReason === 'number', stops: typeof f.stopReason === 'string' ? state.stops : null },
            { skipSpecialTokens: state.skipSpecialTokens },
          ),
    finishReason: f.reason,
    stopReason: f.stopReason,
  };
}

/** How far a request got, for the message of the error that ends it: tokens so far, samples still waiting. */
export function requestProgress(state: RequestState): string {
  const tokens = state.sequences.reduce((sum, s) => sum + s.tokenIds.length, 0);
  const waiting = state.sequences.filter((s) => s.slot === -1 && s.finish === null).length;
  return `(${tokens} tokens generated over ${state.sequences.length} sample(s)${waiting > 0 ? `, ${waiting} still waiting for a free slot` : ''})`;
}

/**
 * Ends the request through `fail` when its signal fires (GenerationError('aborted')) or timeoutMs passes ('timeout';
 * Infinity: never). Returns the request's cleanup, which removes the listener and the timer when it settles.
 */
export function watchAbortAndTimeout(
  state: RequestState,
  signal: AbortSignal | undefined,
  timeoutMs: number,
  fail: (error: GenerationError) => void,
): () => void {
  const cleanups: (() => void)[] = [];
  if (signal) {
    const onAbort = () =>
      fail(
        new GenerationError('aborted', `generate: request ${state.id} was aborted ${requestProgress(state)}`, {
          cause: signal.reason,
        }),
      );
    signal.addEventListener('abort', onAbort, { once: true });
    cleanups.push(() => signal.removeEventListener('abort', onAbort));
  }
  if (Number.isFinite(timeoutMs)) {
    const timer = setTimeout(
      () =>
        fail(
          new GenerationError(
            'timeout',
            `generate: request ${state.id} timed out after ${timeoutMs} ms ${requestProgress(state)}`,
          ),
        ),
      timeoutMs,
    );
    timer.unref();
    cleanups.push(() => clearTimeout(timer));
  }
  return () => {
    for (const c of cleanups) c();
  };
}

/**
 * Appends the token step values give row `b` (ids [rows], log-probs [rows], then with top log-probs ids [rows, topK]
 * and log-probs [rows, topK]) to `seq`, tells the request's onToken, and applies the stop rules: the sequence's finish,
 * or null when it goes on. `record` runs after the token is appended, before the stop checks. Throws what decoding
 * the text for stop strings throws.
 */
export function acceptSampledToken(
  seq: Sequence,
  values: Float64Array,
  b: number,
  rows: number,
  topK: number,
  record: () => void,
): Finish | null {
  const request = seq.request;
  const token = values[b] as number;
  const logprob = values[rows + b] as number;
  seq.tokenIds.push(token);
  seq.logprobs.push(logprob);
  record();
  let topLogprobs: TopLogprob[] | undefined;
  if (request.topLogprobs > 0) {
    const at = 2 * rows + b * topK;
    topLogprobs = Array.from({ length: request.topLogprobs }, (_, j) => ({
      tokenId: values[at + j] as number,
      logprob: values[at + rows * topK + j] as number,
    }));
    seq.topLogprobs.push(topLogprobs);
  }
  request.onToken?.({ index: seq.index, tokenId: token, logprob, ...(topLogprobs ? { topLogprobs } : {}) });
  if (request.stopIds.has(token)) return { reason: 'stop', stopReason: token };
  const stop = seq.matcher?.push(token) ?? null;
  if (stop !== null) return { reason: 'stop', stopReason: stop };
  return seq.tokenIds.length >= request.maxTokens ? { reason: 'length', stopReason: null } : null;
}

/** A request's line in the admission round-robin: the fairShareKey it asked for, else the request itself. */
export function shareKey(state: RequestState): string | RequestState {
  return state.fairShareKey ?? state;
}
