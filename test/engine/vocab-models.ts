// Model folders whose config.json vocab_size and tokenizer disagree, as real checkpoints do (Qwen pads its embedding
// to a multiple of 128 rows beyond the tokenizer; a tokenizer can also carry more tokens than the model has rows).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initModel } from '../../src/model/index.js';
import { DEFAULT_ALPHABET, writeCharTokenizer } from '../../src/tokenizer/index.js';
import { fixtureModelWithTokenizer, writeFixtureTokenizer } from './helpers.js';

/** The vocab_size of paddedVocabModel(); its tokenizer has 128 ids (4 specials + 124 characters). */
export const PADDED_VOCAB = 160;
export const TOKENIZER_VOCAB = 128;

/**
 * A small random Qwen2 model with vocab_size 160 (embedding rows) beside the 128-id fixture tokenizer: ids 128..159
 * are tokens of the model that the tokenizer does not know.
 */
export function paddedVocabModel(): string {
  const dir = mkdtempSync(join(tmpdir(), 'engine-padded-vocab-'));
  // 4 specials + 96 default characters + 60 more (U+00C0..U+00FB) = 160 ids fix vocab_size...
  const extra = Array.from({ length: 60 }, (_, i) => String.fromCharCode(0xc0 + i)).join('');
  const { config } = initModel(dir, {
    alphabet: `${DEFAULT_ALPHABET}${extra}`,
    hiddenSize: 32,
    numLayers: 1,
    numHeads: 2,
    numKeyValueHeads: 1,
    maxPositionEmbeddings: 64,
    seed: 5,
  });
  if (config.vocab_size !== PADDED_VOCAB) throw new Error(`padded model: vocab_size ${String(config.vocab_size)}, expected 160`);
  writeFixtureTokenizer(dir); // ...then the tokenizer is replaced by the 128-id one
  return dir;
}

/** A character the wider tokenizer of widerTokenizerModel() maps to id 128, which the model does not have. */
export const BEYOND_MODEL_CHAR = 'Ā';

/** The 128-token fixture model qwen2-tied beside a 132-id tokenizer: text with U+0100..U+0103 encodes to ids ≥ 128. */
export function widerTokenizerModel(): string {
  const dir = fixtureModelWithTokenizer('qwen2-tied');
  const size = writeCharTokenizer(dir, `${DEFAULT_ALPHABET}àáâãäåæçèéêëìíîïðñòóôõöøùúûüĀāĂă`);
  if (size !== 132) throw new Error(`wider tokenizer has ${size} ids, expected 132`);
  return dir;
}
