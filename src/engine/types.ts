// The rollout engine's public types: what generate() and score() take (GenerateRequest, ScoreOptions), what they
// resolve with (GenerateResult, ScoreResult), how they fail (GenerationError and its reason), and the engine's options.
// The engine (./rollout-engine.ts), the worker engine (./worker-engine.ts), the pool (./engine-pool.ts) and chat
// (./chat.ts) all speak these types, so they live apart from any one engine.
import type { ImageProcessorConfig, ImageSource, PagedKVCacheStats } from '../model/index.js';
import type { ChatInputMessage, Tokenizer, ToolDefinition } from '../tokenizer/index.js';
import type { RoutedExpertIds } from './routed-experts.js';
import type { SamplingParams } from './sampling.js';
import type { FinishReason } from './stopping.js';

export interface GenerateOptions extends Partial<SamplingParams> {
  /** New tokens per sample, at most (default: whatever fits in a cache slot after the prompt). */
  maxTokens?: number;
  /** Samples of the prompt (default 1); each decodes in its own slot. */
  n?: number;
  /**
   * Seed of the sampling generators: sample 0 uses `seed`, sample i a seed derived from (seed, i). Without a seed
   * each sample gets a random one. Greedy decoding (temperature 0) draws nothing.
   */
  seed?: number | bigint;
  /** Ids that end a sample (added to the eos ids). The stop id stays in the token ids; the text leaves it out. */
  stopTokenIds?: readonly number[];
  /** Strings that end a sample (needs a tokenizer): the text is cut where the string begins; see ./stopping.ts. */
  stop?: string | readonly string[];
  /** Do not stop at the eos ids (benchmarks, fixed-length rollouts). */
  ignoreEos?: boolean;
  /** Leave special tokens out of the text (default true). Token ids always keep them. */
  skipSpecialTokens?: boolean;
  /**
   * Requests with the same key share one turn of the round-robin admission (./rollout-engine.ts's header): an
   * HTTP request with several prompts gives them all its key. Default: a key of the request's own.
   */
  fairShareKey?: string;
  /** Cancels the request: it is rejected with GenerationError('aborted') and its slots are freed. */
  signal?: AbortSignal;
  /** Rejects the request with GenerationError('timeout') after this long (default: the engine's requestTimeoutMs). */
  timeoutMs?: number;
  /** Called with each generated token as it is sampled (streaming); it must not throw. */
  onToken?: (event: TokenEvent) => void;
  /**
   * Also keep, at each position, this many most likely tokens of the distribution `logprobs` are read from
   * (OpenAI's top_logprobs; default 0: none). At most the vocabulary size.
   */
  topLogprobs?: number;
}

/** One generated token of sample `index`, as it is sampled. */
export interface TokenEvent {
  index: number;
  tokenId: number;
  logprob: number;
  /** The most likely tokens at this position, with topLogprobs > 0. */
  topLogprobs?: TopLogprob[];
}

/** One of the most likely tokens at a position: log_softmax(logits / temperature)[tokenId], as Completion.logprobs. */
export interface TopLogprob {
  tokenId: number;
  logprob: number;
}

export interface GenerateRequest extends GenerateOptions {
  /** The prompt's token ids (used exactly as given)... */
  promptIds?: readonly number[];
  /** ...or its text, encoded with the engine's tokenizer (no special tokens added). */
  prompt?: string;
  /**
   * A vision-language model's images, in the order of their placeholder runs in the prompt (each image's
   * <|image_pad|> x its token count, as ./vision-chat.ts expands them): data URLs, local file paths, encoded bytes or
   * images already decoded (DecodedImage, which chat() sends: not decoded again) (./vision-requests.ts). Refused
   * ('invalid') by a text-only model.
   */
  images?: readonly ImageSource[];
  /**
   * The chat the prompt ids were rendered from, given with `images` (./chat.ts, the single-turn workflows). An engine
   * that takes images only inside chat messages (an OpenAI-compatible server: ../openai/remote-images.ts) sends these
   * messages, each image part carrying its image of `images` as a data URL, and checks that the server read these
   * ids; the embedded engine reads the ids alone. Without it such an engine refuses images.
   */
  renderedFrom?: RenderedChat;
}

/** The chat a prompt was rendered from (GenerateRequest.renderedFrom). */
export interface RenderedChat {
  messages: readonly ChatInputMessage[];
  tools?: readonly ToolDefinition[];
  /** Chat-template variables of the call (the tokenizer's templateDefaults apply under them). */
  templateVariables?: Readonly<Record<string, unknown>>;
}

export interface Completion {
  /** Which of the n samples. */
  index: number;
  /** Generated ids, ending with the stop token or the token that completed a stop string when finishReason is 'stop'. */
  tokenIds: number[];
  /** log_softmax(logits / temperature)[id] of each generated id, before top-k/top-p/min-p (temperature 0: 1). */
  logprobs: number[];
  /** With topLogprobs k > 0: per generated id, the k most likely tokens at its position, most likely first. */
  topLogprobs?: TopLogprob[][];
  /** An engine with recordRoutedExperts: each fed token's chosen experts per sparse layer (./routed-experts.ts). */
  routedExperts?: RoutedExpertIds;
  /** Decoded tokenIds without a final stop token, cut before a stop string; null when the engine has no tokenizer. */
  text: string | null;
  finishReason: FinishReason;
  /** The stop token id or stop string that ended the sample; null for 'length'. */
  stopReason: number | string | null;
}

export interface GenerateResult {
  promptIds: number[];
  completions: Completion[];
}

export interface ScoreOptions {
  /** Also keep each position's k most likely tokens (default 0). At most the vocabulary size. */
  topLogprobs?: number;
  /** τ of the distribution: log_softmax(logits / τ) (default 1: the raw distribution, as vLLM's prompt log-probs). */
  temperature?: number;
  /** Rejects with GenerationError('aborted') when it fires before the forward runs. */
  signal?: AbortSignal;
}

/** Log-probs of given token ids under the model (vLLM's prompt_logprobs). */
export interface ScoreResult {
  /** log p(ids[t] | ids[<t]) at each position; null at position 0 (nothing precedes it). */
  logprobs: (number | null)[];
  /** With topLogprobs k > 0: per position the k most likely tokens, most likely first; [] at position 0. */
  topLogprobs?: TopLogprob[][];
}

/**
 * Why a request failed: 'invalid' is the caller's mistake (an HTTP 400), the others are not (./rollout-engine.ts's
 * header says when each happens).
 */
export type GenerationFailure = 'invalid' | 'aborted' | 'timeout' | 'closed' | 'failed';

export class GenerationError extends Error {
  readonly reason: GenerationFailure;
  constructor(reason: GenerationFailure, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'GenerationError';
    this.reason = reason;
  }
}

/** What an engine is doing now, and its counters so far (RolloutEngine.stats). */
export interface RolloutEngineStats {
  requests: number;
  running: number;
  /** Sequences waiting to start (preempted ones included). */
  waiting: number;
  freeSlots: number;
  steps: number;
  closed: boolean;
  /** Positions run through prefill forwards so far (prompts past their cached prefix, recomputed sequences). */
  prefillTokens: number;
  /** Prompt chunks run so far (chunkedPrefill): a prompt prefilled over k steps counts k, one run whole 0. */
  prefillChunks: number;
  /** Sequences preempted so far (paged: blocks ran out mid-decode); each was recomputed later. */
  preemptions: number;
  /** The paged cache's blocks and prefix-cache counters (hits, misses, evictions in blocks); null for 'slots'. */
  kvCache: PagedKVCacheStats | null;
}

export interface RolloutEngineOptions {
  /** Needed for text, stop strings, `prompt` and chat(); its eos ids stop generation. */
  tokenizer?: Tokenizer | null;
  /** Sequences decoded at once (KV-cache slots; paged: block tables). Default 8. */
  slots?: number;
  /**
   * The KV cache's layout: 'slots' (each sequence reserves maxLength positions, ../model/kv-cache.ts) or 'paged'
   * (blocks of kvBlockSize positions taken as a sequence grows, shared by the samples of a prompt, sequences
   * preempted and recomputed when blocks run out; ../model/paged-kv-cache.ts). Default 'paged' with
   * enablePrefixCaching, else 'slots'.
   */
  kvCache?: 'slots' | 'paged';
  /** Paged: blocks of storage. Default ⌈slots × maxLength / kvBlockSize⌉ + 1 (the slot layout's memory). */
  kvBlocks?: number;
  /** Paged: positions per block. Default 16. */
  kvBlockSize?: number;
  /**
   * Keep full blocks of finished sequences keyed by their prefix, and prefill only past the longest cached prefix of
   * a prompt (vLLM's enable_prefix_caching). A weight sync empties it. Needs kvCache 'paged' (its default then).
   * Default false.
   */
  enablePrefixCaching?: boolean;
  /** Cache positions per slot: prompt + completion. Default min(max_position_embeddings, 2048). */
  maxLength?: number;
  /**
   * Padded prompt tokens per prefill forward (a longer prompt still runs, alone). With chunkedPrefill, the token
   * budget of one engine step (vLLM's max_num_batched_tokens): each decoding sequence counts one, the prefill forward
   * gets the rest, and a longer prompt runs in chunks; at least `slots` then. Default 8192.
   */
  maxPrefillTokens?: number;
  /**
   * Prefill a prompt longer than a step's budget (maxPrefillTokens) in chunks, one per engine step, each followed by
   * the decode step of the running sequences, so they are not stalled by it (vLLM's enable_chunked_prefill;
   * ./prefill-batch.ts). The same tokens as without, log-probs up to float rounding. Default false.
   */
  chunkedPrefill?: boolean;
  /** Ids that end generation. Default: the tokenizer's eos ids, else config.json's eos_token_id. */
  eosTokenIds?: readonly number[];
  /** Default per-request timeout in ms (Infinity: none). Default 30 minutes. */
  requestTimeoutMs?: number;
  /** close() also disposes the model (RolloutEngine.load sets this). Default false. */
  ownsModel?: boolean;
  /**
   * Capture each decode step's forward once per shape and replay it in one native call (./decode-steps.ts); replays
   * give the same results bit for bit as eager steps of the same shape. Default true; false (and true refused) for a
   * mixture-of-experts model, whose steps' shapes follow the routing (so no CUDA graphs for it either).
   */
  captureDecode?: boolean;
  /**
   * Decode steps attend over the cache rounded up to a multiple of this many positions (the extra ones masked), so
   * that one captured shape serves that many tokens. Default 32 with captureDecode, else 1 (the exact length).
   */
  decodeKeyBucket?: number;
  /**
   * Record each captured decode step as a CUDA graph (one launch per step instead of one per op; ./decode-steps.ts).
   * Needs captureDecode and a model on a CUDA device. Default true there.
   */
  cudaGraphs?: boolean;
  /**
   * Mixture of experts: record the experts each token was routed to, per sparse layer, in Completion.routedExperts
   * (vLLM's enable_return_routed_experts; for router replay, algorithm.enable_router_replay). Default false; refused
   * for a dense model.
   */
  recordRoutedExperts?: boolean;
  /**
   * Decode batch-invariant (the model's setBatchInvariant, ../model/batch-invariant.ts; trainer.bitwise_on_policy): a
   * request's tokens and log-probs then do not depend on the other requests in its steps, and equal bit for bit those
   * of a training forward over the same sequence with the mode on. CPU with AVX2/FMA only. Default false.
   */
  batchInvariant?: boolean;
  /**
   * A vision-language model's image processor (preprocessor_config.json; RolloutEngine.load reads the folder's).
   * Default: the model family's processor defaults (Qwen2VLImageProcessor's settings for Qwen2.5-VL or Qwen3-VL).
   */
  imageProcessor?: ImageProcessorConfig;
}
