// Generates the Sokoban example's data: 6x6 rooms with one box, named by seed, in three disjoint sets.
//   sft.jsonl    demonstrations as chat messages (multi-turn SFT) by an ε-greedy demonstrator: the BFS solver's move,
//                except that with probability ε (--epsilon, default 0.25) it makes a random move; episodes are kept
//                whether they solve the level or not when ε > 0 (only solved ones otherwise)
//   train.jsonl  levels for GRPO ({seed}; sokoban_workflow generates the level from it by reverse play)
//   eval.jsonl   held-out levels, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/sokoban/make-data.ts OUT_DIR [--size N] [--max-solution-steps N] [--max-steps N]
//          [--epsilon E] [--train N] [--eval N] [--sft N]
import { parseArgs } from 'node:util';
import {
  epsilonGreedyMove,
  generateSokoban,
  renderSokoban,
  SOKOBAN_SYSTEM_PROMPT,
  SokobanEnv,
  seededEpisodeData,
  seededRandom,
  solveSokoban,
  writeJsonlSets,
} from 'trinity-rft/rft';

export function makeSokobanData(options: {
  size: number;
  maxSolutionSteps: number;
  /** Probability that the demonstrator makes a random move (any of the four) instead of the solver's. */
  epsilon: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const level = (seed: number) =>
    generateSokoban({ seed, width: options.size, height: options.size, maxSolutionSteps: options.maxSolutionSteps });
  // The demonstrator's draws, one stream per demonstration (seeded by its level's seed).
  const draws = new WeakMap<SokobanEnv, () => number>();
  return seededEpisodeData({
    counts: options,
    layout: (seed) => renderSokoban(level(seed)),
    environment: (seed) => {
      const env = new SokobanEnv(level(seed));
      draws.set(env, seededRandom(seed, 0x50b));
      return env;
    },
    expert: (env) =>
      epsilonGreedyMove(() => solveSokoban(env.level, env.state)?.[0] ?? 'Up', options.epsilon, draws.get(env) as () => number),
    systemPrompt: SOKOBAN_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
    keepFailed: options.epsilon > 0,
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      size: { type: 'string', default: '6' },
      'max-solution-steps': { type: 'string', default: '6' },
      'max-steps': { type: 'string', default: '10' },
      epsilon: { type: 'string', default: '0.25' },
      train: { type: 'string', default: '2000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '2000' },
    },
  });
  const out = positionals[0];
  if (!out)
    throw new Error(
      'usage: make-data.ts OUT_DIR [--size N] [--max-solution-steps N] [--max-steps N] [--epsilon E] [--train N] [--eval N] [--sft N]',
    );
  const data = await makeSokobanData({
    size: Number(values.size),
    maxSolutionSteps: Number(values['max-solution-steps']),
    epsilon: Number(values.epsilon),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  writeJsonlSets(out, data);
  console.log(
    `wrote ${out}: ${data.sft.length} demonstrations, ${data.train.length} GRPO levels, ${data.eval.length} eval levels`,
  );
}
