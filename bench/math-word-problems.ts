// The rollouts of bench:long-grpo (bench/long-grpo.bench.ts): GSM8K-like math word problems made by code, and GRPO
// rows over them whose response lengths follow a stated long-tail distribution, so that both sides of the benchmark
// (ours and TRL's GRPOTrainer, bench/long_grpo_trl.py) train on the very same token ids.
//
//   task       one of TEMPLATES with integers from a seeded generator: a question, its exact integer answer, and a
//              worked solution (the steps a reasoning model writes)
//   prompt     the question in the tokenizer's chat template (one user message, add_generation_prompt; Qwen3's
//              template with enable_thinking, its default)
//   response   "<think>" + the solution's steps, repeated as a model re-checks its work, cut to the drawn length L,
//              then "</think>", the final line "The answer is \boxed{x}." and the end-of-turn token, all within L;
//              x is the answer (reward 1) or off by one to nine (reward 0), a fair coin per row
//   L          lognormal: L = round(median · e^(σ z)), z ~ N(0, 1) (Box–Muller), clamped to [the final line's
//              length + 1, cap]; p99 = median · e^(2.326 σ)
//
// Everything is a pure function of the seed, so a rerun trains the same rows.
import type { Tokenizer } from '../src/tokenizer/index.js';

export interface MathTask {
  question: string;
  answer: number;
  /** The worked solution's steps, one sentence each, the last one reaching the answer. */
  steps: string[];
}

/** A seeded uniform generator on (0, 1) (a 31-bit linear congruential generator: reproducible, not random-quality). */
export function uniformGenerator(seed: number): () => number {
  let state = (Math.abs(Math.floor(seed)) % 2 ** 31) + 1;
  return () => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return (state + 0.5) / 2 ** 31;
  };
}

const NAMES = ['Maya', 'Omar', 'Lena', 'Tariq', 'Sofia', 'Kenji', 'Amara', 'Lucas', 'Priya', 'Jonas'];

/** Each template draws its integers with `int(lo, hi)` and returns the task. */
const TEMPLATES: ((name: string, int: (lo: number, hi: number) => number) => MathTask)[] = [
  (name, int) => {
    const [have, bags, each] = [int(3, 40), int(2, 9), int(3, 24)];
    const bought = bags * each;
    return {
      question: `${name} has ${have} apples. ${name} buys ${bags} bags with ${each} apples in each bag. How many apples does ${name} have now?`,
      answer: have + bought,
      steps: [
        `Each bag holds ${each} apples, so ${bags} bags hold ${bags} × ${each} = ${bought} apples.`,
        `${name} started with ${have} apples, so now ${name} has ${have} + ${bought} = ${have + bought} apples.`,
      ],
    };
  },
  (name, int) => {
    const [price, count] = [int(2, 15), int(2, 12)];
    const cost = price * count;
    const note = Math.ceil((cost + 1) / 10) * 10; // the next round ten above the cost
    return {
      question: `A notebook costs $${price}. ${name} buys ${count} notebooks and pays with $${note}. How much change does ${name} get?`,
      answer: note - cost,
      steps: [
        `${count} notebooks at $${price} each cost ${count} × ${price} = ${cost} dollars.`,
        `${name} pays $${note}, so the change is ${note} - ${cost} = ${note - cost} dollars.`,
      ],
    };
  },
  (name, int) => {
    const [speed, hours, minutes] = [int(3, 60), int(1, 6), int(1, 5) * 10];
    const first = speed * hours;
    const second = (speed * minutes) / 60;
    const rounded = Math.round(second);
    return {
      question: `${name} drives at ${speed} km per hour for ${hours} hours and then for ${minutes} more minutes at the same speed. How many kilometres does ${name} drive, rounded to a whole number?`,
      answer: first + rounded,
      steps: [
        `In ${hours} hours at ${speed} km per hour ${name} drives ${speed} × ${hours} = ${first} km.`,
        `${minutes} minutes is ${minutes}/60 of an hour, so that part is ${speed} × ${minutes}/60 = ${second.toFixed(2)} km, about ${rounded} km.`,
        `In total ${first} + ${rounded} = ${first + rounded} km.`,
      ],
    };
  },
  (name, int) => {
    const [rows, seats, empty] = [int(5, 30), int(8, 25), int(1, 40)];
    const total = rows * seats; // at least 40, so never fewer seats than empty ones
    const taken = total - empty;
    return {
      question: `A theatre has ${rows} rows of ${seats} seats. At ${name}'s show ${empty} seats stay empty. How many seats are taken?`,
      answer: taken,
      steps: [
        `The theatre has ${rows} × ${seats} = ${total} seats.`,
        `With ${empty} empty, ${total} - ${empty} = ${taken} seats are taken.`,
      ],
    };
  },
  (name, int) => {
    const [weekly, weeks, spent] = [int(5, 50), int(3, 20), int(1, 9) * 10];
    const saved = weekly * weeks;
    return {
      question: `${name} saves $${weekly} every week for ${weeks} weeks, then spends $${spent} on a gift. How many dollars are left?`,
      answer: saved - spent,
      steps: [
        `Over ${weeks} weeks ${name} saves ${weekly} × ${weeks} = ${saved} dollars.`,
        `After the gift, ${saved} - ${spent} = ${saved - spent} dollars are left.`,
      ],
    };
  },
];

/** The `index`-th task of a seeded stream. */
export function mathTask(seed: number, index: number): MathTask {
  const uniform = uniformGenerator(seed * 100_003 + index * 7919 + 17);
  const int = (lo: number, hi: number) => lo + Math.floor(uniform() * (hi - lo + 1));
  const template = TEMPLATES[int(0, TEMPLATES.length - 1)] as (typeof TEMPLATES)[number];
  return template(NAMES[int(0, NAMES.length - 1)] as string, int);
}

/** The reward rule both sides share: 1 when the last \boxed{n} of the response is the answer, else 0. */
export function boxedAnswerReward(response: string, answer: number): number {
  const found = [...response.matchAll(/\\boxed\{(-?\d+)\}/g)];
  const last = found.at(-1)?.[1];
  return last !== undefined && Number(last) === answer ? 1 : 0;
}

export interface LengthDistribution {
  median: number;
  /** σ of ln L. */
  sigma: number;
  cap: number;
}

/** p99 of the distribution before the cap: median · e^(2.326 σ). */
export const lengthP99 = (d: LengthDistribution): number => Math.round(d.median * Math.exp(2.326 * d.sigma));

export interface GrpoRow {
  question: string;
  answer: number;
  prompt_ids: number[];
  completion_ids: number[];
  reward: number;
}

/**
 * `tasks` prompts × `group` responses for one GRPO step (see the header), rows of one group adjacent. `seed` and
 * `step` fix everything.
 */
export function grpoRows(
  tokenizer: Tokenizer,
  options: { seed: number; step: number; tasks: number; group: number; lengths: LengthDistribution },
): GrpoRow[] {
  const { seed, step, tasks, group, lengths } = options;
  const uniform = uniformGenerator(seed * 1_000_003 + step * 65_537 + 1);
  const endOfTurn = tokenizer.eosTokenIds[0];
  if (endOfTurn === undefined) throw new Error('bench:long-grpo: the tokenizer has no end-of-turn (eos) token');
  const rows: GrpoRow[] = [];
  for (let t = 0; t < tasks; t++) {
    const task = mathTask(seed, step * tasks + t);
    const promptIds = tokenizer.encodeChat([{ role: 'user', content: task.question }], { addGenerationPrompt: true });
    const thinking = tokenizer.encode(`<think>\n${task.steps.join('\n')}\n`);
    const recheck = tokenizer.encode(`Let me check this again.\n${task.steps.join('\n')}\n`);
    for (let r = 0; r < group; r++) {
      const right = uniform() < 0.5;
      const given = right ? task.answer : task.answer + 1 + Math.floor(uniform() * 9);
      const final = tokenizer.encode(`</think>\n\nThe answer is \\boxed{${given}}.`);
      const z = Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
      const length = Math.max(final.length + 2, Math.min(lengths.cap, Math.round(lengths.median * Math.exp(lengths.sigma * z))));
      const body: number[] = [...thinking];
      while (body.length < length) body.push(...recheck);
      const completion = [...body.slice(0, length - final.length - 1), ...final, endOfTurn];
      const text = tokenizer.decode(completion, { skipSpecialTokens: true });
      rows.push({
        question: task.question,
        answer: task.answer,
        prompt_ids: promptIds,
        completion_ids: completion,
        reward: boxedAnswerReward(text, task.answer),
      });
    }
  }
  return rows;
}
