// Generates the quickstart's data: addition problems "a+b=" in three disjoint sets.
//   sft.jsonl    demonstrations (prompt, response) for the SFT warm-up stage, written by a fallible expert: when the
//                units column carries (a % 10 + b % 10 >= 10) it forgets to add the carry to the tens column with
//                probability `forgetCarry` (37+45= → "72" instead of "82"); every other answer is exact
//   train.jsonl  problems for GRPO, with exact answers (the verifier compares the answer with `response`)
//   eval.jsonl   held-out problems with exact answers, never trained on
// So SFT imitates an expert that is right on about 73% of problems, and GRPO with the exact verifier can do better
// than its demonstrations: the model has seen the carry done right, and the reward tells it when to do it.
// Usage: node --import tsx examples/quickstart/make-data.ts OUT_DIR [--seed N] [--max N] [--forget-carry P]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

export interface QuickstartData {
  sft: { prompt: string; response: string }[];
  train: { prompt: string; response: string }[];
  eval: { prompt: string; response: string }[];
}

/** The fallible expert's answer: a + b, except that a units carry is dropped when `forget` is true. */
export function expertAnswer(a: number, b: number, forget: boolean): string {
  const carry = (a % 10) + (b % 10) >= 10;
  return String(forget && carry ? a + b - 10 : a + b);
}

/**
 * Every pair a+b with 0 <= a, b < max, shuffled with `seed` and split into SFT, GRPO and eval sets; SFT answers come
 * from the fallible expert (see the header), the others are exact.
 */
export function makeAdditionData(seed = 0, max = 100, evalCount = 200, sftCount = 2000, forgetCarry = 0.6): QuickstartData {
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
  const row = ([a, b]: [number, number]) => ({ prompt: `${a}+${b}=`, response: String(a + b) });
  const demonstration = ([a, b]: [number, number]) => ({
    prompt: `${a}+${b}=`,
    response: expertAnswer(a, b, random() < forgetCarry),
  });
  return {
    eval: pairs.slice(0, evalCount).map(row),
    sft: pairs.slice(evalCount, evalCount + sftCount).map(demonstration),
    train: pairs.slice(evalCount + sftCount).map(row),
  };
}

function writeJsonl(file: string, rows: readonly object[]): void {
  writeFileSync(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      seed: { type: 'string', default: '0' },
      max: { type: 'string', default: '100' },
      'forget-carry': { type: 'string', default: '0.6' },
    },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--seed N] [--max N] [--forget-carry P]');
  const forgetCarry = Number(values['forget-carry']);
  if (!(forgetCarry >= 0 && forgetCarry <= 1))
    throw new Error(`--forget-carry must be in [0, 1], got '${values['forget-carry']}'`);
  const data = makeAdditionData(Number(values.seed), Number(values.max), 200, 2000, forgetCarry);
  const exact = (prompt: string) =>
    prompt
      .slice(0, -1)
      .split('+')
      .map(Number)
      .reduce((x, y) => x + y, 0);
  const right = data.sft.filter((r) => Number(r.response) === exact(r.prompt)).length;
  mkdirSync(out, { recursive: true });
  for (const [name, rows] of Object.entries(data)) writeJsonl(join(out, `${name}.jsonl`), rows);
  console.log(
    `wrote ${out}: ${data.sft.length} SFT demonstrations (${((100 * right) / data.sft.length).toFixed(1)}% right), ` +
      `${data.train.length} GRPO problems, ${data.eval.length} eval problems`,
  );
}
