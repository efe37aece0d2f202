// Generates the quickstart's data: two-digit addition problems with exact answers, in three disjoint sets. Numbers
// are written with a fixed width ("07+45=" → "052"): each digit then sits at the same place in every problem, which
// a small model learns reliably (unpadded, "7+45=" → "52", SFT succeeded for one seed in three).
//   sft.jsonl    expert demonstrations (prompt, response) for the SFT warm-up stage
//   train.jsonl  problems for GRPO (the verifier compares the answer with `response`)
//   eval.jsonl   held-out problems, never trained on
// Usage: node --import tsx examples/quickstart/make-data.ts OUT_DIR [--seed N] [--max N]
import { parseArgs } from 'node:util';
import { writeJsonlSets } from 'trinity-rft/rft';

export interface QuickstartData {
  sft: { prompt: string; response: string }[];
  train: { prompt: string; response: string }[];
  eval: { prompt: string; response: string }[];
}

/** Every pair a+b with 0 <= a, b < max, shuffled with `seed` and split into SFT, GRPO and eval sets. */
export function makeAdditionData(seed = 0, max = 100, evalCount = 500, sftCount = 2000): QuickstartData {
  let state = (seed * 2654435761 + 1) >>> 0;
  const random = () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const pairs: [number, number][] = [];
  for (let a = 0; a < max; a++) for (let b = 0; b < max; b++) pairs.push([a, b]);
  for (let i = pairs.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [pairs[i], pairs[j]] = [pairs[j] as [number, number], pairs[i] as [number, number]];
  }
  const width = String(max - 1).length;
  const pad = (n: number, w: number) => String(n).padStart(w, '0');
  const row = ([a, b]: [number, number]) => ({ prompt: `${pad(a, width)}+${pad(b, width)}=`, response: pad(a + b, width + 1) });
  return {
    eval: pairs.slice(0, evalCount).map(row),
    sft: pairs.slice(evalCount, evalCount + sftCount).map(row),
    train: pairs.slice(evalCount + sftCount).map(row),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: { seed: { type: 'string', default: '0' }, max: { type: 'string', default: '100' } },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--seed N] [--max N]');
  const data = makeAdditionData(Number(values.seed), Number(values.max));
  writeJsonlSets(out, data);
  console.log(
    `wrote ${out}: ${data.sft.length} SFT demonstrations, ${data.train.length} GRPO problems, ${data.eval.length} eval problems`,
  );
}
