// Generates the Sokoban example's data: 6x6 rooms with one box, named by seed, in three disjoint sets.
//   sft.jsonl    expert demonstrations: whole episodes played by the BFS solver, as chat messages (multi-turn SFT)
//   train.jsonl  levels for GRPO ({seed}; sokoban_workflow generates the level from it by reverse play)
//   eval.jsonl   held-out levels, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/sokoban/make-data.ts OUT_DIR [--size N] [--max-solution-steps N] [--train N] ...
import { parseArgs } from 'node:util';
import {
  generateSokoban,
  renderSokoban,
  SOKOBAN_SYSTEM_PROMPT,
  SokobanEnv,
  seededEpisodeData,
  solveSokoban,
  writeJsonlSets,
} from 'trinity-rft/rft';

export function makeSokobanData(options: {
  size: number;
  maxSolutionSteps: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const level = (seed: number) =>
    generateSokoban({ seed, width: options.size, height: options.size, maxSolutionSteps: options.maxSolutionSteps });
  return seededEpisodeData({
    counts: options,
    layout: (seed) => renderSokoban(level(seed)),
    environment: (seed) => new SokobanEnv(level(seed)),
    expert: (env) => solveSokoban(env.level, env.state)?.[0] ?? 'Up',
    systemPrompt: SOKOBAN_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
  });
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
  writeJsonlSets(out, data);
  console.log(
    `wrote ${out}: ${data.sft.length} expert episodes, ${data.train.length} GRPO levels, ${data.eval.length} eval levels`,
  );
}
