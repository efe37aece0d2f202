// Generates the FrozenLake example's data: 4x4 maps named by seed, in three disjoint sets.
//   sft.jsonl    expert demonstrations: whole episodes played by the BFS solver, as chat messages (multi-turn SFT)
//   train.jsonl  maps for GRPO ({seed}; frozen_lake_workflow generates the map from it)
//   eval.jsonl   held-out maps, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/frozen_lake/make-data.ts OUT_DIR [--size N] [--train N] [--eval N] [--sft N]
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import {
  FROZEN_LAKE_SYSTEM_PROMPT,
  FrozenLakeEnv,
  generateFrozenLake,
  playEpisode,
  renderFrozenLake,
  solveFrozenLake,
} from '../../src/rft/workflow/env/index.js';

const EVAL_SEEDS = 0;
const TRAIN_SEEDS = 100_000;
const SFT_SEEDS = 200_000;

export async function makeFrozenLakeData(options: {
  size: number;
  p: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const layout = (seed: number) => {
    const map = generateFrozenLake({ seed, size: options.size, p: options.p });
    return renderFrozenLake(map, map.start);
  };
  const evalSeeds = Array.from({ length: options.eval }, (_, i) => EVAL_SEEDS + i);
  const held = new Set(evalSeeds.map(layout));
  const pick = (first: number, count: number) => {
    const seeds: number[] = [];
    for (let seed = first; seeds.length < count; seed++) if (!held.has(layout(seed))) seeds.push(seed);
    return seeds;
  };
  const sft = [];
  for (const seed of pick(SFT_SEEDS, options.sft)) {
    const env = new FrozenLakeEnv(generateFrozenLake({ seed, size: options.size, p: options.p }));
    const episode = await playEpisode(env, () => solveFrozenLake(env.map, env.position)?.[0] ?? 'Up', {
      systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
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
      size: { type: 'string', default: '4' },
      p: { type: 'string', default: '0.8' },
      'max-steps': { type: 'string', default: '8' },
      train: { type: 'string', default: '2000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '2000' },
    },
  });
  const out = positionals[0];
  if (!out) throw new Error('usage: make-data.ts OUT_DIR [--size N] [--p P] [--max-steps N] [--train N] [--eval N] [--sft N]');
  const data = await makeFrozenLakeData({
    size: Number(values.size),
    p: Number(values.p),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  mkdirSync(out, { recursive: true });
  for (const [name, rows] of Object.entries(data))
    writeFileSync(join(out, `${name}.jsonl`), `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
  console.log(`wrote ${out}: ${data.sft.length} expert episodes, ${data.train.length} GRPO maps, ${data.eval.length} eval maps`);
}
