// Seeded pseudo-random numbers for selectors and replay noise: reproducible runs need streams that depend only on
// (seed, epoch, step ...), so resuming from saved state gives the same choices. splitmix32 mixing + mulberry32.

/** Mixes a list of integers into one 32-bit seed. */
export function mixSeed(...keys: number[]): number {
  let h = 0x9e3779b9;
  for (const key of keys) {
    h = Math.imul(h ^ (key >>> 0) ^ Math.floor(key / 2 ** 32), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** A uniform [0, 1) generator from a seed (mulberry32). */
export function seededRandom(...keys: number[]): () => number {
  let state = mixSeed(...keys);
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Fisher–Yates permutation of 0..n-1. */
export function permutation(n: number, random: () => number): number[] {
  const order = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [order[i], order[j]] = [order[j] as number, order[i] as number];
  }
  return order;
}

/** Standard normal sample (Box–Muller). */
export function gaussian(random: () => number): number {
  const u = 1 - random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * random());
}

/** Gamma(shape, 1) sample (Marsaglia–Tsang; shape < 1 boosted). */
export function gammaSample(shape: number, random: () => number): number {
  if (shape < 1) return gammaSample(shape + 1, random) * random() ** (1 / shape);
  const d = shape - 1 / 3;
  const c = 1 / Math.sqrt(9 * d);
  for (;;) {
    let x: number;
    let v: number;
    do {
      x = gaussian(random);
      v = 1 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const u = random();
    if (u < 1 - 0.0331 * x ** 4 || Math.log(u) < 0.5 * x * x + d * (1 - v + Math.log(v))) return d * v;
  }
}

/** Beta(alpha, beta) sample. */
export function betaSample(alpha: number, beta: number, random: () => number): number {
  const x = gammaSample(alpha, random);
  const y = gammaSample(beta, random);
  return x / (x + y);
}
