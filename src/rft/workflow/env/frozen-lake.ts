// FrozenLake (after gymnasium's FrozenLake-v1, as Trinity-RFT's frozen_lake_workflow plays it): walk across a
// frozen lake from the start to the goal without falling into a hole. Reward 1 on reaching the goal, else 0.
//
// A map is generated from (seed, size, p), two layouts:
//   Trinity's (default)  Trinity-RFT v0.6's generate_random_map bit for bit, so a Trinity row's seed names the same
//                        map here as there: numpy's Generator(PCG64(SeedSequence(seed))) (./numpy-random.ts) draws
//                        every cell F with probability p else H (choice, row by row), then start and goal cells
//                        (integers(0, size) for start row, start column, goal row, goal column; again while equal),
//                        which overwrite those cells; a map is kept when Trinity's depth-first check reaches G from a
//                        cell at most env_max_steps (default 8) moves deep, else the next one is drawn
//   corners              start top-left, goal bottom-right (gymnasium's own generate_random_map layout), the other
//                        cells frozen with probability p, drawn with ../../buffer/random.ts; kept when a path exists
//                        (BFS; with env_max_steps, one of at most that many moves)
// Either way the same (seed, size, p) always gives the same map, and every map has a path.
// The model sees the grid as text, one row per line, and answers with a move:
//
//   _P__        P player   _ frozen   O hole   G goal
//   _O_O        Up / Down / Left / Right; a move off the grid leaves the player in place;
//   ___O        slippery (is_slippery: true): the move goes as intended or to either side, 1/3 each (gymnasium)
//   O__G
//
// Task arguments (row fields or workflow_args): seed (default: the task's index), size (4), p (0.8),
// corners (false), is_slippery (false), env_max_steps (the map check's depth, above; Trinity's layout 8, corners none),
// desc (a fixed map, rows of S F H G, instead of a generated one), plus the environment
// workflow's max_steps (default 10; Trinity's newer name agent_max_steps), experience_mode ('episode') and
// invalid_action_penalty (default 0, as Trinity scores an invalid reply: a no-op worth 0; a penalty such as 0.1 per
// invalid reply teaches the answer format sooner, and belongs on training tasksets only, so that an eval taskset's mean
// reward stays the success rate).
// Trinity's rows, {seed, size, p, index, uid} with no prompt column, are tasks as they are.
import { seededRandom } from '../../buffer/random.js';
import { NumpyGenerator } from './numpy-random.js';
import { WORKFLOWS } from '../workflow-registry.js';
import type { Environment, EnvironmentStep } from './environment.js';
import { environmentWorkflow } from './environment.js';
import { boolArg, DELTA, DIRECTIONS, type Direction, intArg, numberArg, parseAction } from './grid.js';

export const FROZEN_LAKE_SYSTEM_PROMPT = 'Move P to G. Avoid O. Reply Up, Down, Left or Right.';

/** Map cells as gymnasium writes them: S start, F frozen, H hole, G goal. */
export interface FrozenLakeMap {
  size: number;
  rows: string[];
  start: number;
  goal: number;
}

export interface FrozenLakeParams {
  seed: number;
  size: number;
  /** Probability that a cell (other than start and goal) is frozen. */
  p: number;
  /** Start top-left and goal bottom-right (gymnasium's layout) instead of two random cells. */
  corners?: boolean;
  /**
   * Trinity's env_max_steps: the depth its map check searches to (Trinity's layout; default 8), or the longest
   * shortest path a corners map may have (default: any).
   */
  maxPathSteps?: number;
}

/** Trinity's default env_max_steps (v0.6). */
export const TRINITY_ENV_MAX_STEPS = 8;
/** Maps drawn before giving up on (seed, size, p) (Trinity draws forever). */
const MAX_DRAWS = 10_000;

/** A random map with a path from start to goal (see the header for the two layouts); the same params, the same map. */
export function generateFrozenLake(params: FrozenLakeParams): FrozenLakeMap {
  const { seed, size, p } = params;
  if (!Number.isInteger(size) || size < 2) throw new RangeError(`frozen lake: size must be an integer >= 2, got ${size}`);
  if (!(p > 0 && p <= 1)) throw new RangeError(`frozen lake: p must be in (0, 1], got ${p}`);
  const map = params.corners ? cornersLake(params) : trinityLake(params);
  if (map !== null) return map;
  const within = params.maxPathSteps === undefined ? '' : ` within ${params.maxPathSteps} moves (env_max_steps)`;
  throw new Error(`frozen lake: no map with a path${within} found for seed ${seed}, size ${size}, p ${p} in ${MAX_DRAWS} draws`);
}

const lakeOf = (size: number, cells: readonly string[]): FrozenLakeMap => ({
  size,
  rows: Array.from({ length: size }, (_, r) => cells.slice(r * size, (r + 1) * size).join('')),
  start: cells.indexOf('S'),
  goal: cells.indexOf('G'),
});

/** Trinity-RFT's generate_random_map on numpy's generator (the header's first layout), or null after MAX_DRAWS. */
function trinityLake({ seed, size, p, maxPathSteps = TRINITY_ENV_MAX_STEPS }: FrozenLakeParams): FrozenLakeMap | null {
  const numpy = new NumpyGenerator(seed);
  const probabilities = [p, 1 - p]; // choice(['F', 'H'], p=[p, 1 - p])
  for (let draw = 0; draw < MAX_DRAWS; draw++) {
    const cells: string[] = Array.from({ length: size * size }, () => (numpy.choiceIndex(probabilities) === 0 ? 'F' : 'H'));
    let start: number;
    let goal: number;
    do {
      start = numpy.integers(0, size) * size;
      start += numpy.integers(0, size);
      goal = numpy.integers(0, size) * size;
      goal += numpy.integers(0, size);
    } while (start === goal);
    cells[start] = 'S';
    cells[goal] = 'G';
    const map = lakeOf(size, cells);
    if (trinityReachesGoal(map, maxPathSteps)) return map;
  }
  return null;
}

/**
 * Trinity's map check (its is_valid): depth-first from S over non-hole cells, each cell expanded once, neighbours
 * in the order down, right, up, left; true as soon as a cell at most maxDepth moves deep (along the search's own
 * path, not the shortest) has G beside it.
 */
function trinityReachesGoal(map: FrozenLakeMap, maxDepth: number): boolean {
  const order: readonly Direction[] = ['Down', 'Right', 'Up', 'Left'];
  const stack: [number, number][] = [[map.start, 0]];
  const expanded = new Set<number>();
  while (stack.length > 0) {
    const [cell, depth] = stack.pop() as [number, number];
    if (depth > maxDepth || expanded.has(cell)) continue;
    expanded.add(cell);
    for (const direction of order) {
      const next = frozenLakeMove(map, cell, direction);
      if (next === cell) continue; // off the grid
      if (next === map.goal) return true;
      if (cellAt(map, next) !== 'H') stack.push([next, depth + 1]);
    }
  }
  return false;
}

/** The corners layout (the header's second), or null after MAX_DRAWS. */
function cornersLake({ seed, size, p, maxPathSteps }: FrozenLakeParams): FrozenLakeMap | null {
  const random = seededRandom(seed, size, Math.round(p * 1e6));
  const last = size * size - 1;
  for (let draw = 0; draw < MAX_DRAWS; draw++) {
    const cells = Array.from({ length: last + 1 }, (_, i) => (i === 0 ? 'S' : i === last ? 'G' : random() < p ? 'F' : 'H'));
    const map = lakeOf(size, cells);
    const path = solveFrozenLake(map);
    if (path !== null && (maxPathSteps === undefined || path.length <= maxPathSteps)) return map;
  }
  return null;
}

const cellAt = (map: FrozenLakeMap, index: number): string => map.rows[Math.floor(index / map.size)]?.[index % map.size] ?? 'H';

/** The cell a move leads to (the same cell when it would leave the grid). */
export function frozenLakeMove(map: FrozenLakeMap, from: number, direction: Direction): number {
  const [dr, dc] = DELTA[direction];
  const r = Math.floor(from / map.size) + dr;
  const c = (from % map.size) + dc;
  return r < 0 || r >= map.size || c < 0 || c >= map.size ? from : r * map.size + c;
}

/** A shortest list of moves from `from` (default the start) to the goal avoiding holes, or null (BFS). */
export function solveFrozenLake(map: FrozenLakeMap, from = map.start): Direction[] | null {
  const previous = new Map<number, [number, Direction]>();
  const seen = new Set([from]);
  const queue = [from];
  for (let head = 0; head < queue.length; head++) {
    const cell = queue[head] as number;
    if (cell === map.goal) {
      const path: Direction[] = [];
      for (let at = cell; at !== from; ) {
        const [before, move] = previous.get(at) as [number, Direction];
        path.push(move);
        at = before;
      }
      return path.reverse();
    }
    for (const direction of DIRECTIONS) {
      const next = frozenLakeMove(map, cell, direction);
      if (seen.has(next) || cellAt(map, next) === 'H') continue;
      seen.add(next);
      previous.set(next, [cell, direction]);
      queue.push(next);
    }
  }
  return null;
}

/** The grid as the model sees it (see the header). */
export function renderFrozenLake(map: FrozenLakeMap, position: number): string {
  const glyph: Record<string, string> = { S: '_', F: '_', H: 'O', G: 'G' };
  return map.rows
    .map((row, r) => [...row].map((cell, c) => (r * map.size + c === position ? 'P' : (glyph[cell] ?? cell))).join(''))
    .join('\n');
}

/** Perpendicular moves of each move (the slippery lake's side slips). */
const SIDES: Readonly<Record<Direction, readonly [Direction, Direction]>> = {
  Up: ['Left', 'Right'],
  Down: ['Left', 'Right'],
  Left: ['Up', 'Down'],
  Right: ['Up', 'Down'],
};

export class FrozenLakeEnv implements Environment {
  readonly map: FrozenLakeMap;
  readonly isSlippery: boolean;
  readonly #random: () => number;
  position: number;
  done = false;
  success = false;

  constructor(map: FrozenLakeMap, options: { isSlippery?: boolean; seed?: number } = {}) {
    this.map = map;
    this.isSlippery = options.isSlippery ?? false;
    this.#random = seededRandom(options.seed ?? 0);
    this.position = map.start;
  }

  reset(): string {
    this.position = this.map.start;
    this.done = false;
    this.success = false;
    return this.render();
  }

  render(): string {
    return renderFrozenLake(this.map, this.position);
  }

  step(reply: string): EnvironmentStep {
    if (this.done) throw new Error('frozen lake: the episode is over (reset first)');
    const action = parseAction(reply);
    if (action === null) return { observation: this.render(), reward: 0, done: false, invalidAction: true };
    let move = action;
    if (this.isSlippery) {
      const roll = Math.floor(this.#random() * 3);
      if (roll > 0) move = SIDES[action][roll - 1] as Direction;
    }
    this.position = frozenLakeMove(this.map, this.position, move);
    const cell = cellAt(this.map, this.position);
    this.success = cell === 'G';
    this.done = cell === 'G' || cell === 'H';
    return { observation: this.render(), reward: this.success ? 1 : 0, done: this.done };
  }

  metrics(): Record<string, number> {
    return { success: this.success ? 1 : 0, fell: this.done && !this.success ? 1 : 0 };
  }
}

/**
 * A fixed map as Trinity's workflow_args desc gives it: square, rows of S (start), F (frozen), H (hole), G (goal),
 * one S and one G. Throws naming what is wrong.
 */
export function frozenLakeFromDesc(desc: unknown, who = 'frozen_lake_workflow'): FrozenLakeMap {
  const rows = desc;
  if (!Array.isArray(rows) || rows.length < 2 || !rows.every((row) => typeof row === 'string'))
    throw new Error(`${who}: desc must be a list of at least 2 rows of S/F/H/G, got ${JSON.stringify(desc)}`);
  const size = rows.length;
  const bad = rows.findIndex((row: string) => row.length !== size || !/^[SFHG]+$/.test(row));
  if (bad >= 0)
    throw new Error(`${who}: desc row ${bad} (${JSON.stringify(rows[bad])}) must be ${size} of S/F/H/G (the map is square)`);
  const cells = rows.join('');
  const count = (c: string) => cells.split(c).length - 1;
  if (count('S') !== 1 || count('G') !== 1)
    throw new Error(`${who}: desc must have one S and one G, got ${count('S')} and ${count('G')}`);
  return { size, rows: [...rows], start: cells.indexOf('S'), goal: cells.indexOf('G') };
}

/** The map and options of a task from its arguments (see the header). */
export function frozenLakeFromArgs(
  args: Readonly<Record<string, unknown>>,
  defaults: { seed: number },
): { map: FrozenLakeMap; isSlippery: boolean } {
  const who = 'frozen_lake_workflow';
  const isSlippery = boolArg(args, 'is_slippery', false, who);
  if (args.desc !== undefined && args.desc !== null) return { map: frozenLakeFromDesc(args.desc, who), isSlippery };
  const maxPathSteps = args.env_max_steps === undefined ? undefined : intArg(args, 'env_max_steps', 0, who, 1);
  const map = generateFrozenLake({
    seed: intArg(args, 'seed', defaults.seed, who),
    size: intArg(args, 'size', 4, who, 2, 32),
    p: numberArg(args, 'p', 0.8, who, Number.MIN_VALUE, 1),
    corners: boolArg(args, 'corners', false, who),
    ...(maxPathSteps !== undefined ? { maxPathSteps } : {}),
  });
  return { map, isSlippery };
}

export const frozenLakeWorkflow = environmentWorkflow(
  'frozen_lake_workflow',
  ({ task, args, seed }) => {
    const { map, isSlippery } = frozenLakeFromArgs(args, { seed: task.index });
    return new FrozenLakeEnv(map, { isSlippery, seed });
  },
  {
    systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
    environmentArgs: ['seed', 'size', 'p', 'corners', 'is_slippery', 'env_max_steps', 'desc'],
    layoutArgs: ['seed', 'size', 'p', 'desc'],
    maxSteps: 10,
    invalidActionPenalty: 0,
    description: 'FrozenLake grid world: reach G avoiding holes, one move per turn (reward 1 on success)',
  },
);

WORKFLOWS.register('frozen_lake_workflow', frozenLakeWorkflow);
