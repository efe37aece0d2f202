// A generate() request checked against the engine and resolved into its prepared form: the prompt as ids (a text
// prompt encoded), every limit checked (ids inside the vocabulary, prompt + maxTokens inside a cache slot, sampling
// parameters in range), defaults filled in (maxTokens: the room left in the slot, n: 1, a random seed, the eos ids as
// stop ids). A failed check throws a RangeError or TypeError naming the field; the engine turns it into
// GenerationError('invalid') before anything runs. Also each sample's seed, derived from the request's.
import { randomBytes } from 'node:crypto';
import type { Tokenizer } from '../tokenizer/index.js';
import { resolveSamplingParams, type SamplingParams } from './sampling.js';
import { type GenerateRequest, GenerationError } from './types.js';
import type { VisionInputs, VisionRequest } from './vision-requests.js';

/** A checked request with its defaults filled in. */
export interface PreparedRequest {
  readonly promptIds: number[];
  readonly params: SamplingParams;
  readonly maxTokens: number;
  readonly n: number;
  readonly seed: number | bigint;
  readonly stopIds: ReadonlySet<number>;
  readonly stops: readonly string[] | null;
  readonly skipSpecialTokens: boolean;
  readonly topLogprobs: number;
}

/** What a request is checked against: the engine's tokenizer, vocabulary, cache slot length and eos ids. */
export interface RequestLimits {
  readonly tokenizer: Tokenizer | null;
  readonly vocabSize: number;
  readonly maxLength: number;
  readonly eosTokenIds: readonly number[];
}

/**
 * generate()'s admission: the engine open, the request not aborted, the request prepared, and a vision-language engine's images checked against the prompt
 * (their decoding goes on in the returned promise, ./vision-requests.ts). A failed check throws
 * GenerationError('invalid') naming it; anything else thrown is a bug and propagates.
 */
export function admitRequest(
  request: GenerateRequest,
  engine: RequestLimits & { isClosed: boolean; vision: VisionInputs | null; model: { config: { architecture: string } } },
): { prepared: PreparedRequest; images: Promise<VisionRequest> | null } {
  if (engine.isClosed) throw new GenerationError('closed', 'RolloutEngine is closed: generate() was called after close()');
  if (request.signal?.aborted)
    throw new GenerationError('aborted', 'generate: the request was aborted before it started', { cause: request.signal.reason });
  try {
    const prepared = prepareRequest(request, engine);
    if (engine.vision) return { prepared, images: engine.vision.admit(prepared.promptIds, request.images) };
    if (request.images?.length)
      throw new TypeError(`generate: images need a vision-language model, not ${engine.model.config.architecture}`);
    return { prepared, images: null };
  } catch (error) {
    // the request checks throw RangeError / TypeError (SamplingParamsError is a RangeError)
    if (error instanceof RangeError || error instanceof TypeError)
      throw new GenerationError('invalid', error.message, { cause: error });
    throw error;
  }
}

/** Checks a request against the engine and fills its defaults. */
export function prepareRequest(request: GenerateRequest, engine: RequestLimits): PreparedRequest {
  let promptIds: number[];
  if (request.promptIds !== undefined && request.prompt !== undefined)
    throw new TypeError('generate: give promptIds or prompt, not both');
  if (request.promptIds !== undefined) promptIds = [...request.promptIds];
  else if (request.prompt !== undefined) {
    if (engine.tokenizer === null)
      throw new TypeError('generate: a text prompt needs an engine with a tokenizer (or give promptIds)');
    promptIds = engine.tokenizer.encode(request.prompt);
  } else throw new TypeError('generate: the request needs promptIds or prompt');
  if (promptIds.length === 0) throw new RangeError('generate: the prompt is empty (at least one token is needed)');
  const vocab = engine.vocabSize;
  checkTokenIds('prompt', promptIds, vocab);
  const room = engine.maxLength - promptIds.length;
  if (room < 1) {
    throw new RangeError(
      `generate: the prompt has ${promptIds.length} tokens; the engine's maxLength (${engine.maxLength} positions per slot) leaves no room for a completion`,
    );
  }
  const maxTokens = request.maxTokens ?? room;
  if (!Number.isInteger(maxTokens) || maxTokens < 1)
    throw new RangeError(`generate: maxTokens must be a positive integer, got ${String(maxTokens)}`);
  if (maxTokens > room) {
    throw new RangeError(
      `generate: prompt (${promptIds.length} tokens) + maxTokens (${maxTokens}) exceeds the engine's maxLength of ${engine.maxLength} positions per slot`,
    );
  }
  const n = request.n ?? 1;
  if (!Number.isInteger(n) || n < 1) throw new RangeError(`generate: n must be a positive integer, got ${String(n)}`);
  const seed = request.seed ?? randomSeed();
  if (typeof seed === 'number' ? !Number.isSafeInteger(seed) || seed < 0 : seed < 0n || seed >= 1n << 64n)
    throw new RangeError(`generate: seed must be a non-negative integer below 2^64, got ${String(seed)}`);
  if (request.timeoutMs !== undefined && !(request.timeoutMs > 0))
    throw new RangeError(`generate: timeoutMs must be > 0 (Infinity: none), got ${String(request.timeoutMs)}`);
  const stopTokenIds = [...(request.stopTokenIds ?? [])];
  checkTokenIds('stopTokenIds', stopTokenIds, vocab);
  const stopIds = new Set([...stopTokenIds, ...(request.ignoreEos ? [] : engine.eosTokenIds)]);
  const stopList = request.stop === undefined ? [] : typeof request.stop === 'string' ? [request.stop] : [...request.stop];
  if (stopList.some((s) => typeof s !== 'string' || s.length === 0))
    throw new TypeError('generate: stop strings must be non-empty strings');
  if (stopList.length > 0 && engine.tokenizer === null)
    throw new TypeError('generate: stop strings need an engine with a tokenizer (use stopTokenIds instead)');
  if (request.fairShareKey !== undefined && typeof request.fairShareKey !== 'string')
    throw new TypeError(`generate: fairShareKey must be a string, got ${typeof request.fairShareKey}`);
  const topLogprobs = request.topLogprobs ?? 0;
  if (!Number.isInteger(topLogprobs) || topLogprobs < 0 || topLogprobs > vocab)
    throw new RangeError(`generate: topLogprobs must be an integer in [0, ${vocab}], got ${String(topLogprobs)}`);
  return {
    promptIds,
    params: resolveSamplingParams(request),
    maxTokens,
    n,
    seed,
    stopIds,
    stops: stopList.length > 0 ? stopList : null,
    skipSpecialTokens: request.skipSpecialTokens ?? true,
    topLogprobs,
  };
}

/** Throws a RangeError naming the first entry of `ids` that is not a token id (an integer in [0, vocab)). */
export function checkTokenIds(what: string, ids: readonly number[], vocab: number): void {
  const bad = ids.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= vocab);
  if (bad !== -1)
    throw new RangeError(`generate: ${what}[${bad}] = ${String(ids[bad])} is not a token id (vocabulary size ${vocab})`);
}

function randomSeed(): bigint {
  return randomBytes(8).readBigUInt64LE() >> 1n;
}

/** Sample 0 uses the seed itself; sample i > 0 a splitmix64 mix of (seed, i), so samples never share a stream. */
export function sampleSeed(seed: number | bigint, index: number): number | bigint {
  if (index === 0) return seed;
  const mask = (1n << 64n) - 1n;
  let z = (BigInt(seed) + BigInt(index) * 0x9e3779b97f4a7c15n) & mask;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask;
  return (z ^ (z >> 31n)) >> 1n;
}
