// Generates the Sokoban example's data: 6x6 rooms with one box, named by seed, in three disjoint sets.
//   sft.jsonl    expert demonstrations: whole episodes played by the BFS solver, as chat messages (multi-turn SFT)
//   train.jsonl  levels for GRPO ({seed}; sokoban_workflow generates the level from it by reverse play)
//   eval.jsonl   held-out levels, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/sokoban/make-data.ts OUT_DIR [--size N] [--max-solution-steps N] [--train N] ...
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  generateSokoban,
  playEpisode,
  renderSokoban,
  SOKOBAN_SYSTEM_PROMPT,
  SokobanEnv,
  solveSokoban,
} from '../../src/rft/workflow/env/index.js';

const EVAL_SEEDS = 0;
const TRAIN_SEEDS = 100_000;
const SFT_SEEDS = 200_000;

export async function makeSokobanData(options: {
  size: number;
  maxSolutionSteps: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const level = (seed: number) =>
    generateSokoban({ seed, width: options.size, height: options.size, maxSolutionSteps: options.maxSolutionSteps });
  const evalSeeds = Array.from({ length: options.eval }, (_, i) => EVAL_SEEDS + i);
  const held = new Set(evalSeeds.map((seed) => renderSokoban(level(seed))));
  const pick = (first: number, count: number) => {
    const seeds: number[] = [];
    for (let seed = first; seeds.length < count; seed++) if (!held.has(renderSokoban(level(seed)))) seeds.push(seed);
    return seeds;
  };
  const sft = [];
  for (const seed of pick(SFT_SEEDS, options.sft)) {
    const env = new SokobanEnv(level(seed));
    const episode = await playEpisode(env, () => solveSokoban(env.level, env.state)?.[0] ?? 'Up', {
      systemPrompt: SOKOBAN_SYSTEM_PROMPT,
      maxSteps: options.maxSteps,
    });
    if (episode.reward === 1) sft.push({ seed, messages: episode.messages });
  }
  return {
    train: pick(TRAIN_SEEDS, options.train).map((seed) => ({ seed })),
    eval: evalSeeds.map((seed) => ({ seed })),
    sft,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      size: { type: 'string', default: '6' },
      'max-solution-steps': { type: 'string', default: '6' },
      'max-steps': { type: 'string', default: '10' },
      train: { type: 'string', default: '2000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '2000' },
    },
  });
  const out = positionals[0];
  if (!out)
    throw new Error(
      'usage: make-data.ts OUT_DIR [--size N] [--max-solution-steps N] [--max-steps N] [--train N] [--eval N] [--sft N]',
    );
  const data = await makeSokobanData({
    size: Number(values.size),
    maxSolutionSteps: Number(values['max-solution-steps']),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  mkdirSync(out, { recursive: true });
  for (const [name, rows] of Object.entries(data))
    writeFileSync(join(out, `${name}.jsonl`), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  console.log(
    `wrote ${out}: ${data.sft.length} expert episodes, ${data.train.length} GRPO levels, ${data.eval.length} eval levels`,
  );
}
