// The LoRA dropout's random numbers (the scheme is in lora.ts's header): a counter-based stream in which draw n takes
// U from a fresh generator seeded with splitmix64(seed, n), so that its whole state is { seed, draws }.
//
//   keep = U[0, 1) < 1 - p,   dropout(x) = x * (keep / (1 - p))
import type { Tensor } from '../torch/index.js';
import * as torch from '../torch/index.js';

/** The dropout stream's state (see the header): its seed and how many masks it has drawn. */
export interface LoraDropoutState {
  seed: number;
  draws: number;
}

const U64 = (1n << 64n) - 1n;
/** Generator seeds stay below 2^63 (the addon reads them as int64). */
const SEED_MASK = (1n << 63n) - 1n;

/** splitmix64's output n for `seed` (Steele, Lea, Flood 2014): well-mixed 64-bit values from (seed, n). */
function splitmix64(seed: number, n: number): bigint {
  let z = (BigInt.asUintN(64, BigInt(seed)) + BigInt(n + 1) * 0x9e3779b97f4a7c15n) & U64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & U64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & U64;
  return z ^ (z >> 31n);
}

/** The counter-based stream of dropout masks (see the header). */
export class DropoutStream {
  #seed: number | null;
  draws = 0;

  /** Without a seed, one is drawn from libtorch's global generator when first needed (so torch.manualSeed governs it). */
  constructor(seed: number | null) {
    this.#seed = seed;
  }

  get seed(): number {
    this.#seed ??= torch.scope(() => torch.randint(0, 2 ** 31 - 1, [1]).item());
    return this.#seed;
  }

  set seed(seed: number) {
    this.#seed = seed;
  }

  /** keep [shape] (bool): U[0, 1) < 1 - p from the stream's next generator. */
  nextKeepMask(shape: readonly number[], p: number, device: string): Tensor {
    const generator = new torch.Generator(splitmix64(this.seed, this.draws) & SEED_MASK, device);
    this.draws++;
    return torch.rand(shape, { dtype: 'float32', device, generator }).lt(1 - p);
  }
}

/** The state as given or read from a checkpoint, checked; `where` names its source in errors. */
export function checkDropoutState(state: unknown, where: string): LoraDropoutState {
  const s = (state ?? {}) as Partial<Record<keyof LoraDropoutState, unknown>>;
  if (typeof s.seed !== 'number' || !Number.isSafeInteger(s.seed))
    throw new RangeError(`${where}: seed must be an integer, got ${JSON.stringify(s.seed)}`);
  if (typeof s.draws !== 'number' || !Number.isSafeInteger(s.draws) || s.draws < 0)
    throw new RangeError(`${where}: draws must be a non-negative integer, got ${JSON.stringify(s.draws)}`);
  return { seed: s.seed, draws: s.draws };
}
