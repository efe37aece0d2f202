// Generates the FrozenLake example's data: 4x4 maps in gymnasium's layout (start top-left, goal bottom-right, random
// holes), named by seed, in three disjoint sets.
//   sft.jsonl    demonstrations as chat messages (multi-turn SFT) by an ε-greedy demonstrator: the BFS expert's move
//                (--expert optimal, the default) or a walker that heads for the goal without looking at the holes
//                (--expert blind: Down or Right, whichever brings it closer, drawn at random), except that with
//                probability ε (--epsilon, default 0.1) it makes a random move; episodes are kept whether they reach
//                the goal or not when ε > 0 or blind (only solved ones otherwise)
//   train.jsonl  maps for GRPO ({seed}; frozen_lake_workflow generates the map from it)
//   eval.jsonl   held-out maps, never trained on (seeds and layouts disjoint from both training sets)
// Usage: node --import tsx examples/frozen_lake/make-data.ts OUT_DIR [--size N] [--p P] [--max-steps N]
//          [--random-corners] [--expert optimal|blind] [--epsilon E] [--train N] [--eval N] [--sft N]
import { parseArgs } from 'node:util';
import {
  DELTA,
  DIRECTIONS,
  type Direction,
  epsilonGreedyMove,
  FROZEN_LAKE_SYSTEM_PROMPT,
  FrozenLakeEnv,
  generateFrozenLake,
  renderFrozenLake,
  seededEpisodeData,
  seededRandom,
  solveFrozenLake,
  writeJsonlSets,
} from 'trinity-rft/rft';

export type FrozenLakeExpert = 'blind' | 'optimal';

/** The moves from `position` that bring the player closer to the goal (Manhattan distance), holes ignored. */
export function movesTowardGoal(size: number, position: number, goal: number): Direction[] {
  const [r, c] = [Math.floor(position / size), position % size];
  const [gr, gc] = [Math.floor(goal / size), goal % size];
  return DIRECTIONS.filter((d) => {
    const [dr, dc] = DELTA[d];
    return Math.abs(gr - (r + dr)) + Math.abs(gc - (c + dc)) < Math.abs(gr - r) + Math.abs(gc - c);
  });
}

export function makeFrozenLakeData(options: {
  size: number;
  p: number;
  corners: boolean;
  expert: FrozenLakeExpert;
  /** Probability that the demonstrator makes a random move (any of the four) instead of the expert's. */
  epsilon: number;
  maxSteps: number;
  train: number;
  eval: number;
  sft: number;
}) {
  const map = (seed: number) => generateFrozenLake({ seed, size: options.size, p: options.p, corners: options.corners });
  // The blind walker's draws, one stream per demonstration (seeded by its map's seed).
  const draws = new WeakMap<FrozenLakeEnv, () => number>();
  return seededEpisodeData({
    counts: options,
    layout: (seed) => {
      const m = map(seed);
      return renderFrozenLake(m, m.start);
    },
    environment: (seed) => {
      const env = new FrozenLakeEnv(map(seed));
      draws.set(env, seededRandom(seed, 0xb1d));
      return env;
    },
    expert: (env) => {
      const random = draws.get(env) as () => number;
      return epsilonGreedyMove(
        () => {
          if (options.expert === 'optimal') return solveFrozenLake(env.map, env.position)?.[0] ?? 'Up';
          const moves = movesTowardGoal(env.map.size, env.position, env.map.goal);
          return moves[Math.floor(random() * moves.length)] ?? 'Up';
        },
        options.epsilon,
        random,
      );
    },
    systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
    maxSteps: options.maxSteps,
    keepFailed: options.expert === 'blind' || options.epsilon > 0,
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      size: { type: 'string', default: '4' },
      p: { type: 'string', default: '0.8' },
      'random-corners': { type: 'boolean', default: false },
      expert: { type: 'string', default: 'optimal' },
      epsilon: { type: 'string', default: '0.1' },
      'max-steps': { type: 'string', default: '8' },
      train: { type: 'string', default: '4000' },
      eval: { type: 'string', default: '100' },
      sft: { type: 'string', default: '2000' },
    },
  });
  const out = positionals[0];
  const expert = values.expert;
  if (!out || (expert !== 'blind' && expert !== 'optimal'))
    throw new Error(
      'usage: make-data.ts OUT_DIR [--size N] [--p P] [--max-steps N] [--random-corners] [--expert optimal|blind] [--epsilon E] [--train N] [--eval N] [--sft N]',
    );
  const data = await makeFrozenLakeData({
    size: Number(values.size),
    p: Number(values.p),
    corners: !values['random-corners'],
    expert,
    epsilon: Number(values.epsilon),
    maxSteps: Number(values['max-steps']),
    train: Number(values.train),
    eval: Number(values.eval),
    sft: Number(values.sft),
  });
  writeJsonlSets(out, data);
  console.log(`wrote ${out}: ${data.sft.length} demonstrations, ${data.train.length} GRPO maps, ${data.eval.length} eval maps`);
}
