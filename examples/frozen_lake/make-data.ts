// Generates the FrozenLake example's data: 4x4 maps named by seed, in three disjoint sets.
//   sft.jsonl    expert demonstrations: whole episodes played by the BFS solver, as chat messages (multi-turn SFT)
//   train.jsonl  maps for GRPO ({seed}; frozen_lake_workflow generates the map from it)
//   eval.jsonl   held-out maps, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/frozen_lake/make-data.ts OUT_DIR [--size N] [--train N] [--eval N] [--sft N]
import { parseArgs } from 'node:util';
import {
  FROZEN_LAKE_SYSTEM_PROMPT,
  FrozenLakeEnv,
  generateFrozenLake,
  renderFrozenLake,
  seededEpisodeData,
  solveFrozenLake,
  writeJsonlSets,
} from 'trinity-rft/rft';

export function makeFrozenLakeData(options: {
  size: number;
  p: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const map = (seed: number) => generateFrozenLake({ seed, size: options.size, p: options.p });
  return seededEpisodeData({
    counts: options,
    layout: (seed) => {
      const m = map(seed);
      return renderFrozenLake(m, m.start);
    },
    environment: (seed) => new FrozenLakeEnv(map(seed)),
    expert: (env) => solveFrozenLake(env.map, env.position)?.[0] ?? 'Up',
    systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
  });
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
  writeJsonlSets(out, data);
  console.log(`wrote ${out}: ${data.sft.length} expert episodes, ${data.train.length} GRPO maps, ${data.eval.length} eval maps`);
}
