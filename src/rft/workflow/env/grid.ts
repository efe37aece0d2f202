// Shared pieces of the grid environments (FrozenLake, Sokoban): the four moves, the action parser, argument readers.
//
// The action parser takes the model's whole reply. A reply with a fenced block (```…```, as Trinity-RFT's FrozenLake
// prompt asks for after the model's reasoning) is read as Trinity reads it: the last block's content, trimmed, must be
// a move word in any case or Trinity's action number (1 Left, 2 Down, 3 Right, 4 Up), else the reply is invalid.
// Any other reply's action is the one move word it contains (Up, Down, Left, Right; any case, any surrounding text or
// punctuation such as "right."); a reply with no move word, or with two different ones, is invalid.

export type Direction = 'Up' | 'Down' | 'Left' | 'Right';

export const DIRECTIONS: readonly Direction[] = ['Up', 'Down', 'Left', 'Right'];

/** Row and column change of each move. */
export const DELTA: Readonly<Record<Direction, readonly [number, number]>> = {
  Up: [-1, 0],
  Down: [1, 0],
  Left: [0, -1],
  Right: [0, 1],
};

/**
 * An ε-greedy demonstrator's move (the grid examples' imperfect demonstrations): with probability `epsilon` a move
 * drawn uniformly from the four, else `expertMove()` (called only then, so an expert that draws from the same stream
 * draws after this). `random` draws in [0, 1).
 */
export function epsilonGreedyMove(expertMove: () => Direction, epsilon: number, random: () => number): Direction {
  if (random() < epsilon) return DIRECTIONS[Math.floor(random() * DIRECTIONS.length)] as Direction;
  return expertMove();
}

const BY_WORD = new Map(DIRECTIONS.map((d) => [d.toLowerCase(), d]));

/** Trinity's action numbers (its FrozenLake action space starts at 1). */
const BY_NUMBER: Readonly<Record<string, Direction>> = { '1': 'Left', '2': 'Down', '3': 'Right', '4': 'Up' };

/** The move a reply names, or null when it names none or several; see the header. */
export function parseAction(reply: string): Direction | null {
  const fenced = [...reply.matchAll(/```([\s\S]*?)```/g)].at(-1);
  if (fenced !== undefined) {
    const content = (fenced[1] ?? '').trim();
    return BY_WORD.get(content.toLowerCase()) ?? (/^\d+$/.test(content) ? (BY_NUMBER[String(Number(content))] ?? null) : null);
  }
  const found = new Set<Direction>();
  for (const word of reply.toLowerCase().match(/[a-z]+/g) ?? []) {
    const direction = BY_WORD.get(word);
    if (direction !== undefined) found.add(direction);
  }
  return found.size === 1 ? ([...found][0] as Direction) : null;
}

/** An integer argument in [min, max] (default when absent). */
export function intArg(
  args: Readonly<Record<string, unknown>>,
  key: string,
  fallback: number,
  who: string,
  min = 0,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max)
    throw new Error(`${who}: ${key} must be an integer in [${min}, ${max}], got ${JSON.stringify(value)}`);
  return value;
}

/** A number argument in [min, max]. */
export function numberArg(
  args: Readonly<Record<string, unknown>>,
  key: string,
  fallback: number,
  who: string,
  min: number,
  max: number,
): number {
  const value = args[key] ?? fallback;
  if (typeof value !== 'number' || !(value >= min && value <= max))
    throw new Error(`${who}: ${key} must be a number in [${min}, ${max}], got ${JSON.stringify(value)}`);
  return value;
}

export function boolArg(args: Readonly<Record<string, unknown>>, key: string, fallback: boolean, who: string): boolean {
  const value = args[key] ?? fallback;
  if (typeof value !== 'boolean') throw new Error(`${who}: ${key} must be true or false, got ${JSON.stringify(value)}`);
  return value;
}
