// The rollout engine's options resolved: defaults filled in and each checked, naming the option (RangeError). The
// constructor and RolloutEngine.load (which checks the cache's size from config.json before reading any weight) both
// read them from here.
import { type CausalLM, checkKVCacheFits, type LoadModelOptions, type ModelConfig } from '../model/index.js';
import type { CacheLayout } from './sequence-slots.js';
import type { RolloutEngineOptions } from './types.js';
import { languageConfigOf } from './vision-requests.js';

export const DEFAULT_SLOTS = 8;
export const DEFAULT_MAX_LENGTH = 2048;
export const DEFAULT_MAX_PREFILL_TOKENS = 8192;
export const DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60 * 1000;
export const DEFAULT_DECODE_KEY_BUCKET = 32;
export const DEFAULT_BLOCK_SIZE = 16;

/** A positive integer option, or a RangeError naming it. */
export function positiveOption(name: string, value: number): number {
  if (!Number.isInteger(value) || value <= 0)
    throw new RangeError(`RolloutEngine: ${name} must be a positive integer, got ${String(value)}`);
  return value;
}

/** maxPrefillTokens with its default, and chunkedPrefill checked against it and the other options. */
export function prefillSettings(options: RolloutEngineOptions, slots: number): { maxPrefillTokens: number; chunked: boolean } {
  const maxPrefillTokens = positiveOption('maxPrefillTokens', options.maxPrefillTokens ?? DEFAULT_MAX_PREFILL_TOKENS);
  const chunked = options.chunkedPrefill ?? false;
  // vLLM refuses max_num_batched_tokens < max_num_seqs likewise: a step's budget holds one token per decoding sequence
  if (chunked && maxPrefillTokens < slots)
    throw new RangeError(
      `RolloutEngine: with chunkedPrefill, maxPrefillTokens (${maxPrefillTokens}) must be at least slots (${slots}): ` +
        "a step's token budget holds one token for each decoding sequence",
    );
  // a prompt's experts are recorded from its one prefill forward
  if (chunked && options.recordRoutedExperts)
    throw new RangeError('RolloutEngine: recordRoutedExperts cannot be used with chunkedPrefill');
  return { maxPrefillTokens, chunked };
}

/** The KV cache's settings with their defaults (the constructor, and load() before it reads any weight). */
export function cacheSettings(config: ModelConfig, options: RolloutEngineOptions): CacheLayout {
  const slots = positiveOption('slots', options.slots ?? DEFAULT_SLOTS);
  const maxLength = positiveOption('maxLength', options.maxLength ?? Math.min(config.maxPositionEmbeddings, DEFAULT_MAX_LENGTH));
  const prefixCaching = options.enablePrefixCaching ?? false;
  // a prompt's cached prefix is not run again, so its tokens' experts could not be recorded
  if (prefixCaching && options.recordRoutedExperts)
    throw new RangeError('RolloutEngine: recordRoutedExperts cannot be used with enablePrefixCaching');
  const layout = options.kvCache ?? (prefixCaching ? 'paged' : 'slots');
  if (layout === 'slots') {
    for (const key of ['kvBlocks', 'kvBlockSize'] as const)
      if (options[key] !== undefined) throw new RangeError(`RolloutEngine: ${key} needs kvCache 'paged'`);
    if (prefixCaching) throw new RangeError("RolloutEngine: enablePrefixCaching needs kvCache 'paged'");
    return { slots, maxLength, paged: null };
  }
  if (layout !== 'paged') throw new RangeError(`RolloutEngine: kvCache must be 'slots' or 'paged', got ${String(layout)}`);
  const blockSize = positiveOption('kvBlockSize', options.kvBlockSize ?? DEFAULT_BLOCK_SIZE);
  // default: the slot layout's memory (slots × maxLength positions) plus the scratch block
  const numBlocks = positiveOption('kvBlocks', options.kvBlocks ?? Math.ceil((slots * maxLength) / blockSize) + 1);
  return { slots, maxLength, paged: { numBlocks, blockSize, prefixCaching } };
}

/** config.json's eos_token_id (one id or a list). */
export function configEosIds(model: CausalLM): number[] {
  const eos = model.config.raw.eos_token_id;
  if (typeof eos === 'number') return [eos];
  return Array.isArray(eos) ? eos.filter((v): v is number => typeof v === 'number') : [];
}

/**
 * Throws when the KV cache that `options` ask for cannot fit on the device (checkKVCacheFits), from the model folder's
 * config.json: RolloutEngine.load refuses it before reading any weight.
 */
export function checkCacheFitsModel(
  dir: string,
  options: RolloutEngineOptions,
  dtype: LoadModelOptions['dtype'],
  device: string | undefined,
): void {
  const config = languageConfigOf(dir); // a vision-language folder: its language model's
  const { slots, maxLength, paged } = cacheSettings(config, options);
  checkKVCacheFits({
    numLayers: config.numHiddenLayers,
    numKeyValueHeads: config.numKeyValueHeads,
    headDim: config.headDim,
    // a paged cache is numBlocks × blockSize positions, as one slot of that length would be
    ...(paged ? { slots: 1, maxLength: paged.numBlocks * paged.blockSize } : { slots, maxLength }),
    dtype: dtype ?? 'float32',
    ...(device ? { device } : {}),
  });
}
