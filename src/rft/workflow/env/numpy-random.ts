// numpy's default random generator, bit for bit, for the draws Trinity-RFT's environments make from a seed
// (gymnasium's seeding.np_random(seed) = Generator(PCG64(SeedSequence(seed)))), so a Trinity row's seed names the
// same map here as there. Only what those draws use: random(), integers(low, high) and choice with probabilities.
//
//   SeedSequence(seed)   seed → little-endian uint32 words → a pool of 4 words mixed by hashmix/mix (numpy's
//                        bit_generator.pyx constants); generate_state(4, uint64) draws 8 words from the pool
//   PCG64                128-bit LCG  s ← s·M + inc  (M = 0x2360ed051fc65da44385df649fccf645), seeded as
//                        pcg_setseq_128_srandom_r(state = words 0-1, seq = words 2-3); output XSL-RR:
//                        rotr64(hi(s) ⊕ lo(s), s >> 122), taken after each step
//   next32               the low half of one 64-bit output, then its high half (PCG64's has_uint32 buffer)
//   random()             (next64 >> 11) · 2⁻⁵³
//   integers(lo, hi)     hi − lo − 1 = r < 2³²: Lemire's bounded draw on next32: m = next32 · (r + 1), redrawn while
//                        its low 32 bits < (2³² − 1 − r) mod (r + 1); the value is lo + (m >> 32)
//   choice(p)            cdf = cumsum(p) / its last entry; the index of the first cdf entry > random()
// BigInt carries the 128-bit state; these draws are few (a map is tens of them).

const MASK32 = 0xffffffffn;
const MASK64 = 0xffffffffffffffffn;
const MASK128 = (1n << 128n) - 1n;
const PCG_MULTIPLIER = 0x2360ed051fc65da44385df649fccf645n;

// SeedSequence's hashing constants (numpy/random/bit_generator.pyx)
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const POOL_SIZE = 4;

/** A non-negative integer as numpy's SeedSequence reads it: 32-bit words, least significant first ([0] for 0). */
function entropyWords(seed: number): number[] {
  if (!Number.isSafeInteger(seed) || seed < 0) throw new RangeError(`numpy seed must be a non-negative integer, got ${seed}`);
  const words: number[] = [];
  let rest = BigInt(seed);
  do {
    words.push(Number(rest & MASK32));
    rest >>= 32n;
  } while (rest > 0n);
  return words;
}

/** The 4-word pool of SeedSequence(seed). */
function seedPool(seed: number): number[] {
  const entropy = entropyWords(seed);
  let hashConst = INIT_A;
  const hashmix = (value: number): number => {
    let v = (value ^ hashConst) >>> 0;
    hashConst = Math.imul(hashConst, MULT_A) >>> 0;
    v = Math.imul(v, hashConst) >>> 0;
    return (v ^ (v >>> 16)) >>> 0;
  };
  const mix = (x: number, y: number): number => {
    const r = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
    return (r ^ (r >>> 16)) >>> 0;
  };
  const pool = Array.from({ length: POOL_SIZE }, (_, i) => hashmix(entropy[i] ?? 0));
  for (let src = 0; src < POOL_SIZE; src++)
    for (let dst = 0; dst < POOL_SIZE; dst++) if (src !== dst) pool[dst] = mix(pool[dst] as number, hashmix(pool[src] as number));
  for (let src = POOL_SIZE; src < entropy.length; src++)
    for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst] as number, hashmix(entropy[src] as number));
  return pool;
}

/** SeedSequence(seed).generate_state(4, uint64): 8 words drawn from the pool, paired little-endian. */
function seedState(seed: number): bigint[] {
  const pool = seedPool(seed);
  let hashConst = INIT_B;
  const words = Array.from({ length: 8 }, (_, i) => {
    let v = ((pool[i % POOL_SIZE] as number) ^ hashConst) >>> 0;
    hashConst = Math.imul(hashConst, MULT_B) >>> 0;
    v = Math.imul(v, hashConst) >>> 0;
    return (v ^ (v >>> 16)) >>> 0;
  });
  return [0, 1, 2, 3].map((k) => BigInt(words[2 * k] as number) | (BigInt(words[2 * k + 1] as number) << 32n));
}

/** numpy.random.Generator(PCG64(SeedSequence(seed))), the draws listed in the header. */
export class NumpyGenerator {
  #state: bigint;
  readonly #increment: bigint;
  #pendingHalf: number | null = null;

  constructor(seed: number) {
    const [s0, s1, i0, i1] = seedState(seed) as [bigint, bigint, bigint, bigint];
    const initState = (s0 << 64n) | s1;
    const initSeq = (i0 << 64n) | i1;
    this.#increment = ((initSeq << 1n) | 1n) & MASK128;
    this.#state = 0n;
    this.#step();
    this.#state = (this.#state + initState) & MASK128;
    this.#step();
  }

  #step(): void {
    this.#state = (this.#state * PCG_MULTIPLIER + this.#increment) & MASK128;
  }

  /** The next 64-bit output (XSL-RR of the stepped state). */
  next64(): bigint {
    this.#step();
    const xored = ((this.#state >> 64n) ^ this.#state) & MASK64;
    const rotation = this.#state >> 122n;
    return ((xored >> rotation) | (xored << ((64n - rotation) & 63n))) & MASK64;
  }

  /** The next 32-bit output: the low half of a 64-bit one, then its high half. */
  next32(): number {
    if (this.#pendingHalf !== null) {
      const half = this.#pendingHalf;
      this.#pendingHalf = null;
      return half;
    }
    const next = this.next64();
    this.#pendingHalf = Number(next >> 32n);
    return Number(next & MASK32);
  }

  /** Generator.random(): a double in [0, 1). */
  random(): number {
    return Number(this.next64() >> 11n) / 2 ** 53;
  }

  /** Generator.integers(low, high): an integer in [low, high), high − low ≤ 2³². */
  integers(low: number, high: number): number {
    const range = high - low - 1;
    if (!Number.isInteger(range) || range < 0 || range >= 0xffffffff)
      throw new RangeError(`integers(${low}, ${high}): the range must hold 1 to 2^32 - 1 values`);
    if (range === 0) return low;
    const exclusive = BigInt(range + 1);
    let m = BigInt(this.next32()) * exclusive;
    let leftover = m & MASK32;
    if (leftover < exclusive) {
      const threshold = (MASK32 - BigInt(range)) % exclusive;
      while (leftover < threshold) {
        m = BigInt(this.next32()) * exclusive;
        leftover = m & MASK32;
      }
    }
    return low + Number(m >> 32n);
  }

  /** Generator.choice(n, p=probabilities) for one draw: the index picked. */
  choiceIndex(probabilities: readonly number[]): number {
    const cdf: number[] = [];
    let sum = 0;
    for (const p of probabilities) {
      sum += p;
      cdf.push(sum);
    }
    const total = cdf.at(-1) as number;
    const u = this.random();
    const index = cdf.findIndex((c) => c / total > u);
    return index < 0 ? cdf.length : index;
  }
}
