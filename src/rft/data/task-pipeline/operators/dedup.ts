// Duplicate removal (Data-Juicer's `document_deduplicator` and `document_minhash_deduplicator`, by those names). Both
// keep the first row of a group and drop the later ones, so the output is a subsequence of the input.
//
// Exact: rows whose text (after `lowercase` / `ignore_non_character`) is identical are duplicates.
//
// Near (MinHash + LSH, Broder 1997; Leskovec et al., Mining of Massive Datasets ch. 3): a row's shingles S are its
// `window_size`-grams of words (tokenization space) or characters (character). With n seeded hash functions h_i,
//   sig_i(S) = min_{s ∈ S} h_i(s),   P[sig_i(A) = sig_i(B)] = J(A, B) = |A ∩ B| / |A ∪ B|.
// The n values are cut into b bands of r rows; two rows are candidates when some band is equal in both:
//   P[candidate] = 1 − (1 − J^r)^b,
// with (b, r) chosen, unless given, as datasketch's MinHashLSH chooses them around the threshold t:
//   argmin_{b·r ≤ n}  ½ ∫₀ᵗ 1 − (1 − s^r)^b ds  +  ½ ∫ₜ¹ (1 − s^r)^b ds      (false positives + false negatives). A candidate is a
// duplicate when its exact shingle Jaccard with a kept row is ≥ t (so only LSH misses are approximate, never a false
// drop); rows are scanned in order and each is compared with the rows kept so far.
import { mixSeed } from '../../../buffer/random.js';
import { TASK_OPERATORS } from '../registry.js';
import { requireText } from '../rows.js';
import type { TaskOperatorModule, TaskRow } from '../types.js';

export interface ExactDedupOptions {
  /** The field compared ('' : the taskset's prompt_key). */
  textKey: string;
  lowercase: boolean;
  /** Compare only letters and digits (whitespace and punctuation removed). */
  ignoreNonCharacter: boolean;
}

const normalize = (text: string, lowercase: boolean, ignoreNonCharacter: boolean): string => {
  let t = lowercase ? text.toLowerCase() : text;
  if (ignoreNonCharacter) t = t.replace(/[^\p{L}\p{N}]/gu, '');
  return t;
};

export const documentDeduplicator: TaskOperatorModule<ExactDedupOptions> = {
  description: 'drops rows whose text equals an earlier row’s',
  defaults: { textKey: '', lowercase: false, ignoreNonCharacter: false },
  run(rows, options, context) {
    const key = options.textKey || context.textKey;
    const seen = new Set<string>();
    const kept: TaskRow[] = [];
    rows.forEach((row, i) => {
      const text = normalize(requireText(row, key, context.name, i), options.lowercase, options.ignoreNonCharacter);
      if (seen.has(text)) return;
      seen.add(text);
      kept.push(row);
    });
    return kept;
  },
};

export interface MinHashDedupOptions {
  textKey: string;
  /** space: shingles of words; character: shingles of characters. */
  tokenization: string;
  windowSize: number;
  lowercase: boolean;
  /** A regular expression whose matches are removed before shingling ('' : none). */
  ignorePattern: string;
  numPermutations: number;
  jaccardThreshold: number;
  /** LSH bands and rows per band (0: chosen from the threshold; b·r must not exceed num_permutations). */
  numBands: number;
  numRowsPerBand: number;
}

/** The word or character `window`-grams of `text`; a text shorter than the window is one shingle. */
export function shingles(text: string, tokenization: 'space' | 'character', window: number): Set<string> {
  const tokens = tokenization === 'space' ? text.split(/\s+/).filter((t) => t.length > 0) : [...text];
  const joiner = tokenization === 'space' ? ' ' : '';
  const out = new Set<string>();
  if (tokens.length <= window) {
    out.add(tokens.join(joiner));
    return out;
  }
  for (let i = 0; i + window <= tokens.length; i++) out.add(tokens.slice(i, i + window).join(joiner));
  return out;
}

export function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  if (a.size === 0 && b.size === 0) return 1;
  let inter = 0;
  for (const s of a) if (b.has(s)) inter++;
  return inter / (a.size + b.size - inter);
}

/** FNV-1a over the UTF-16 code units of `s` (32 bits). */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** murmur3's 32-bit finalizer: a bijection that mixes every input bit into every output bit. */
function fmix32(x: number): number {
  let h = x >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** The MinHash signature of a shingle set under the hash functions h_i(x) = fmix32(fnv1a(x) ⊕ salt_i). */
export function minhashSignature(set: ReadonlySet<string>, salts: Uint32Array): Uint32Array {
  const sig = new Uint32Array(salts.length).fill(0xffffffff);
  for (const s of set) {
    const base = fnv1a(s);
    for (let i = 0; i < salts.length; i++) {
      const h = fmix32(base ^ (salts[i] as number));
      if (h < (sig[i] as number)) sig[i] = h;
    }
  }
  return sig;
}

/** (bands, rows per band) with b·r ≤ n minimizing ½·false-positive area + ½·false-negative area at threshold t. */
export function optimalBands(threshold: number, numPermutations: number): { bands: number; rows: number } {
  const integrate = (f: (s: number) => number, a: number, b: number): number => {
    const steps = 100;
    const h = (b - a) / steps;
    let sum = 0.5 * (f(a) + f(b));
    for (let i = 1; i < steps; i++) sum += f(a + i * h);
    return sum * h;
  };
  let best = { bands: 1, rows: numPermutations, error: Number.POSITIVE_INFINITY };
  for (let b = 1; b <= numPermutations; b++) {
    for (let r = 1; b * r <= numPermutations; r++) {
      const fp = integrate((s) => 1 - (1 - s ** r) ** b, 0, threshold);
      const fn = integrate((s) => (1 - s ** r) ** b, threshold, 1);
      const error = 0.5 * fp + 0.5 * fn;
      if (error < best.error) best = { bands: b, rows: r, error };
    }
  }
  return { bands: best.bands, rows: best.rows };
}

export const documentMinhashDeduplicator: TaskOperatorModule<MinHashDedupOptions> = {
  description: 'drops rows whose shingle Jaccard similarity with an earlier kept row is at least jaccard_threshold',
  defaults: {
    textKey: '',
    tokenization: 'space',
    windowSize: 5,
    lowercase: true,
    ignorePattern: '',
    numPermutations: 256,
    jaccardThreshold: 0.7,
    numBands: 0,
    numRowsPerBand: 0,
  },
  run(rows, o, context) {
    const where = context.name;
    if (o.tokenization !== 'space' && o.tokenization !== 'character')
      throw new Error(`${where}: tokenization must be 'space' or 'character', got '${o.tokenization}'`);
    if (!Number.isInteger(o.windowSize) || o.windowSize < 1) throw new Error(`${where}: window_size must be an integer >= 1`);
    if (!Number.isInteger(o.numPermutations) || o.numPermutations < 1 || o.numPermutations > 4096)
      throw new Error(`${where}: num_permutations must be an integer in [1, 4096]`);
    if (!(o.jaccardThreshold > 0 && o.jaccardThreshold <= 1)) throw new Error(`${where}: jaccard_threshold must be in (0, 1]`);
    const given = o.numBands > 0 || o.numRowsPerBand > 0;
    if (given && (!Number.isInteger(o.numBands) || !Number.isInteger(o.numRowsPerBand) || o.numBands < 1 || o.numRowsPerBand < 1))
      throw new Error(`${where}: num_bands and num_rows_per_band are set together, integers >= 1`);
    if (given && o.numBands * o.numRowsPerBand > o.numPermutations)
      throw new Error(
        `${where}: num_bands × num_rows_per_band (${o.numBands * o.numRowsPerBand}) exceeds num_permutations (${o.numPermutations})`,
      );
    const { bands, rows: perBand } = given
      ? { bands: o.numBands, rows: o.numRowsPerBand }
      : optimalBands(o.jaccardThreshold, o.numPermutations);
    const ignore = o.ignorePattern ? new RegExp(o.ignorePattern, 'gu') : null;
    const salts = Uint32Array.from({ length: o.numPermutations }, (_, i) => mixSeed(context.seed, 0x6d696e68, i));
    const key = o.textKey || context.textKey;

    const buckets: Map<string, number[]>[] = Array.from({ length: bands }, () => new Map());
    const keptSets: Set<string>[] = [];
    const kept: TaskRow[] = [];
    let candidatesChecked = 0;
    rows.forEach((row, i) => {
      let text = requireText(row, key, where, i);
      if (o.lowercase) text = text.toLowerCase();
      if (ignore) text = text.replace(ignore, '');
      const set = shingles(text, o.tokenization as 'space' | 'character', o.windowSize);
      const sig = minhashSignature(set, salts);
      const bandKeys = Array.from({ length: bands }, (_, b) => sig.subarray(b * perBand, (b + 1) * perBand).join(','));
      const candidates = new Set<number>();
      bandKeys.forEach((k, b) => {
        for (const j of (buckets[b] as Map<string, number[]>).get(k) ?? []) candidates.add(j);
      });
      for (const j of candidates) {
        candidatesChecked++;
        if (jaccard(set, keptSets[j] as Set<string>) >= o.jaccardThreshold) return; // a near-duplicate of kept row j
      }
      const index = kept.length;
      kept.push(row);
      keptSets.push(set);
      bandKeys.forEach((k, b) => {
        const bucket = buckets[b] as Map<string, number[]>;
        const list = bucket.get(k);
        if (list) list.push(index);
        else bucket.set(k, [index]);
      });
      if (i % 256 === 255) context.progress(i + 1, rows.length);
    });
    context.progress(rows.length, rows.length);
    context.count('candidates_checked', candidatesChecked);
    context.log(`${where}: LSH ${bands} bands × ${perBand} rows (threshold ${o.jaccardThreshold})`);
    return kept;
  },
};

TASK_OPERATORS.register('document_deduplicator', documentDeduplicator, documentDeduplicator.description);
TASK_OPERATORS.register('document_minhash_deduplicator', documentMinhashDeduplicator, documentMinhashDeduplicator.description);
