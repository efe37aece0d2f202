// Sokoban: push every box onto a target. Reward 1 when all boxes are on targets, else 0.
//
// Levels are generated from a seed by reverse play (as gym-sokoban does): start from the solved room (boxes on their
// targets, the player on a free cell) and walk backwards, the player stepping onto free cells and sometimes pulling
// the box behind it along. Every reverse move undoes a legal forward move, so every state reached is solvable; the
// level is the walk's last state with a box off its target. A BFS solver over (player, boxes) states finds
// a shortest solution (expert demonstrations, the difficulty filter max_solution_steps, dead-end detection).
//
// The room is surrounded by walls; the model sees the inside of the ring (the grid's edge is a wall), e.g. 6x6:
//
//   _@__        @ player (+ on a target)   $ box (* on a target)   . target   # wall   _ floor
//   _$#_        Up / Down / Left / Right: walk, or push the box in front (a push into a wall or box is a no-op)
//   ____
//   ._#_
//
// Task arguments (row fields or workflow_args): seed (default: the task's index), width and height (6, the walls
// included), num_boxes (1), num_walls (at most this many inner walls, default 2), reverse_steps (30),
// max_solution_steps (none), end_on_deadlock (true: the episode ends, unsuccessfully, as soon as no solution is
// left), plus the environment workflow's max_steps (default 10), experience_mode and invalid_action_penalty (0.1).
// Rows are {seed, ...} with no prompt column (Trinity-RFT has no Sokoban workflow; the rows take FrozenLake's form).
import { seededRandom } from '../../buffer/random.js';
import { WORKFLOWS } from '../workflow-registry.js';
import type { Environment, EnvironmentStep } from './environment.js';
import { environmentWorkflow } from './environment.js';
import { boolArg, DELTA, DIRECTIONS, type Direction, intArg, parseAction } from './grid.js';

export const SOKOBAN_SYSTEM_PROMPT = 'Sokoban. You are @. Push $ onto . (# is wall). Reply Up, Down, Left or Right.';

/** A room: cells indexed row * width + column. */
export interface SokobanLevel {
  width: number;
  height: number;
  walls: boolean[];
  targets: number[];
  boxes: number[];
  player: number;
}

export interface SokobanParams {
  seed: number;
  width?: number;
  height?: number;
  numBoxes?: number;
  /** At most this many inner walls (a random number 0..numWalls is placed, keeping the floor connected). */
  numWalls?: number;
  reverseSteps?: number;
  /** Only levels whose shortest solution has at most this many moves. */
  maxSolutionSteps?: number;
}

/** The cell one move away (no bounds check: rooms are walled in). */
const stepFrom = (level: Pick<SokobanLevel, 'width'>, cell: number, direction: Direction): number =>
  cell + DELTA[direction][0] * level.width + DELTA[direction][1];

/** A random solvable level; the same params always give the same level. */
export function generateSokoban(params: SokobanParams): SokobanLevel {
  const { seed, width = 6, height = 6, numBoxes = 1, numWalls = 2, reverseSteps = 30, maxSolutionSteps } = params;
  if (!(Number.isInteger(width) && Number.isInteger(height) && width >= 4 && height >= 4))
    throw new RangeError(`sokoban: width and height must be integers >= 4, got ${width}x${height}`);
  const inner = (width - 2) * (height - 2);
  if (!Number.isInteger(numBoxes) || numBoxes < 1 || numBoxes + 1 > inner)
    throw new RangeError(`sokoban: num_boxes must be in [1, ${inner - 1}] for a ${width}x${height} room, got ${numBoxes}`);
  const random = seededRandom(seed, width, height, numBoxes);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)] as T;
  for (let attempt = 0; attempt < 1000; attempt++) {
    const walls = Array.from({ length: width * height }, (_, i) => {
      const r = Math.floor(i / width);
      const c = i % width;
      return r === 0 || c === 0 || r === height - 1 || c === width - 1;
    });
    const innerWalls = Math.floor(random() * (numWalls + 1));
    for (let w = 0; w < innerWalls; w++) {
      const free = walls.flatMap((wall, i) => (wall ? [] : [i]));
      const cell = pick(free);
      walls[cell] = true;
      if (!floorConnected(walls, width) || free.length - 1 < numBoxes + 2) walls[cell] = false;
    }
    let free = walls.flatMap((wall, i) => (wall ? [] : [i]));
    const targets: number[] = [];
    while (targets.length < numBoxes) {
      const cell = pick(free);
      targets.push(cell);
      free = free.filter((f) => f !== cell);
    }
    // reverse play from the solved room
    const boxes = [...targets];
    let player = pick(free);
    let best: SokobanLevel | null = null;
    for (let step = 0; step < reverseSteps; step++) {
      const direction = pick(DIRECTIONS);
      const next = stepFrom({ width }, player, direction);
      if (walls[next] || boxes.includes(next)) continue;
      const behind = player - (next - player);
      const pulled = boxes.indexOf(behind);
      if (pulled >= 0 && random() < 0.7) boxes[pulled] = player;
      player = next;
      if (!boxes.every((b) => targets.includes(b)))
        best = { width, height, walls: [...walls], targets: [...targets], boxes: [...boxes], player };
    }
    if (best === null) continue;
    const solution = solveSokoban(best);
    if (solution === null || solution.length === 0) continue; // cannot happen (reverse play); kept as a check
    if (maxSolutionSteps !== undefined && solution.length > maxSolutionSteps) continue;
    return best;
  }
  throw new Error(`sokoban: no level found for seed ${seed} (${width}x${height}, ${numBoxes} boxes)`);
}

/** True when every floor cell is reachable from every other one. */
function floorConnected(walls: readonly boolean[], width: number): boolean {
  const floor = walls.flatMap((wall, i) => (wall ? [] : [i]));
  if (floor.length === 0) return false;
  const seen = new Set([floor[0] as number]);
  const queue = [floor[0] as number];
  for (let head = 0; head < queue.length; head++) {
    for (const direction of DIRECTIONS) {
      const next = stepFrom({ width }, queue[head] as number, direction);
      if (walls[next] || seen.has(next)) continue;
      seen.add(next);
      queue.push(next);
    }
  }
  return seen.size === floor.length;
}

export interface SokobanState {
  player: number;
  boxes: number[];
}

/** The state after one move (the same state when the move is blocked). */
export function sokobanMove(level: SokobanLevel, state: SokobanState, direction: Direction): SokobanState {
  const next = stepFrom(level, state.player, direction);
  if (level.walls[next]) return state;
  const pushed = state.boxes.indexOf(next);
  if (pushed < 0) return { player: next, boxes: state.boxes };
  const beyond = stepFrom(level, next, direction);
  if (level.walls[beyond] || state.boxes.includes(beyond)) return state;
  const boxes = [...state.boxes];
  boxes[pushed] = beyond;
  return { player: next, boxes };
}

export const isSolved = (level: SokobanLevel, boxes: readonly number[]): boolean =>
  boxes.every((box) => level.targets.includes(box));

/** A shortest list of moves that puts every box on a target, or null when there is none (BFS; `maxStates` cap). */
export function solveSokoban(level: SokobanLevel, state: SokobanState = level, maxStates = 1_000_000): Direction[] | null {
  const key = (s: SokobanState) => `${s.player}:${[...s.boxes].sort((a, b) => a - b).join(',')}`;
  const start: SokobanState = { player: state.player, boxes: [...state.boxes] };
  const previous = new Map<string, [string, Direction] | null>([[key(start), null]]);
  const queue: SokobanState[] = [start];
  for (let head = 0; head < queue.length; head++) {
    const current = queue[head] as SokobanState;
    if (isSolved(level, current.boxes)) {
      const path: Direction[] = [];
      for (let at = previous.get(key(current)); at; at = previous.get(at[0])) path.push(at[1]);
      return path.reverse();
    }
    for (const direction of DIRECTIONS) {
      const next = sokobanMove(level, current, direction);
      if (next === current) continue;
      const k = key(next);
      if (previous.has(k)) continue;
      previous.set(k, [key(current), direction]);
      if (previous.size > maxStates) throw new Error(`sokoban: the solver gave up after ${maxStates} states`);
      queue.push(next);
    }
  }
  return null;
}

/** The room as the model sees it: the inside of the outer wall ring (see the header). */
export function renderSokoban(level: SokobanLevel, state: SokobanState = level): string {
  const lines: string[] = [];
  for (let r = 1; r < level.height - 1; r++) {
    let line = '';
    for (let c = 1; c < level.width - 1; c++) {
      const cell = r * level.width + c;
      const target = level.targets.includes(cell);
      if (level.walls[cell]) line += '#';
      else if (state.player === cell) line += target ? '+' : '@';
      else if (state.boxes.includes(cell)) line += target ? '*' : '$';
      else line += target ? '.' : '_';
    }
    lines.push(line);
  }
  return lines.join('\n');
}

export class SokobanEnv implements Environment {
  readonly level: SokobanLevel;
  readonly endOnDeadlock: boolean;
  state: SokobanState;
  done = false;
  success = false;
  deadlock = false;

  constructor(level: SokobanLevel, options: { endOnDeadlock?: boolean } = {}) {
    this.level = level;
    this.endOnDeadlock = options.endOnDeadlock ?? true;
    this.state = { player: level.player, boxes: [...level.boxes] };
  }

  reset(): string {
    this.state = { player: this.level.player, boxes: [...this.level.boxes] };
    this.done = false;
    this.success = false;
    this.deadlock = false;
    return this.render();
  }

  render(): string {
    return renderSokoban(this.level, this.state);
  }

  step(reply: string): EnvironmentStep {
    if (this.done) throw new Error('sokoban: the episode is over (reset first)');
    const action = parseAction(reply);
    if (action === null) return { observation: this.render(), reward: 0, done: false, invalidAction: true };
    const before = this.state;
    this.state = sokobanMove(this.level, this.state, action);
    this.success = isSolved(this.level, this.state.boxes);
    // only a push can make the level unsolvable
    if (!this.success && this.endOnDeadlock && this.state.boxes !== before.boxes)
      this.deadlock = solveSokoban(this.level, this.state) === null;
    this.done = this.success || this.deadlock;
    return { observation: this.render(), reward: this.success ? 1 : 0, done: this.done };
  }

  metrics(): Record<string, number> {
    return {
      success: this.success ? 1 : 0,
      deadlock: this.deadlock ? 1 : 0,
      boxes_on_target: this.state.boxes.filter((box) => this.level.targets.includes(box)).length,
    };
  }
}

/** The level of a task from its arguments (see the header). */
export function sokobanFromArgs(
  args: Readonly<Record<string, unknown>>,
  defaults: { seed: number },
): { level: SokobanLevel; endOnDeadlock: boolean } {
  const who = 'sokoban_workflow';
  const maxSolutionSteps = args.max_solution_steps === undefined ? undefined : intArg(args, 'max_solution_steps', 0, who, 1);
  const level = generateSokoban({
    seed: intArg(args, 'seed', defaults.seed, who),
    width: intArg(args, 'width', 6, who, 4, 32),
    height: intArg(args, 'height', 6, who, 4, 32),
    numBoxes: intArg(args, 'num_boxes', 1, who, 1, 16),
    numWalls: intArg(args, 'num_walls', 2, who, 0, 256),
    reverseSteps: intArg(args, 'reverse_steps', 30, who, 1, 10_000),
    ...(maxSolutionSteps !== undefined ? { maxSolutionSteps } : {}),
  });
  return { level, endOnDeadlock: boolArg(args, 'end_on_deadlock', true, who) };
}

export const sokobanWorkflow = environmentWorkflow(
  'sokoban_workflow',
  ({ task, args }) => {
    const { level, endOnDeadlock } = sokobanFromArgs(args, { seed: task.index });
    return new SokobanEnv(level, { endOnDeadlock });
  },
  {
    systemPrompt: SOKOBAN_SYSTEM_PROMPT,
    environmentArgs: [
      'seed',
      'width',
      'height',
      'num_boxes',
      'num_walls',
      'reverse_steps',
      'max_solution_steps',
      'end_on_deadlock',
    ],
    layoutArgs: ['seed', 'width', 'height', 'num_boxes'],
    maxSteps: 10,
    invalidActionPenalty: 0.1,
    description: 'Sokoban: push every box onto a target, one move per turn (reward 1 on success)',
  },
);

WORKFLOWS.register('sokoban_workflow', sokobanWorkflow);
