// Gomoku (five in a row, here `winLength` in a row) on a size × size board, as Trinity-RFT's agentscope_gomoku
// example plays it (its env.py and utils.py): the agent is X, a scripted opponent is O, the agent moves first.
//
//   step((row, col)):
//     game over                     → reward  0, done,     reason game_already_finished
//     off the board or not empty    → reward -1, not done, reason invalid_move   (the board is unchanged, no reply)
//     X placed; X has winLength     → reward +1, done,     reason agent_won
//     board full                    → reward  0, done,     reason draw
//     O on the first empty cell in row-major order (row 0 col 0, row 0 col 1, ...)
//     O has winLength               → reward -1, done,     reason opponent_won
//     board full                    → reward  0, done,     reason draw
//     otherwise                     → reward  0, not done, reason continue
//
// A line is winLength equal stones along a row, a column, a diagonal (↘) or an anti-diagonal (↙). The observation is
// the board as text, a header of column numbers and each row prefixed by its number ("." empty):
//
//     0 1 2
//   0 X . .
//   1 O . .
//   2 . . .
export const GOMOKU_EMPTY = '.';
export const GOMOKU_AGENT = 'X';
export const GOMOKU_OPPONENT = 'O';

export type GomokuStone = typeof GOMOKU_AGENT | typeof GOMOKU_OPPONENT;
export type GomokuCell = GomokuStone | typeof GOMOKU_EMPTY;

export type GomokuReason = 'game_already_finished' | 'invalid_move' | 'agent_won' | 'opponent_won' | 'draw' | 'continue';

export interface GomokuStepResult {
  observation: string;
  reward: number;
  done: boolean;
  reason: GomokuReason;
  /** Where the opponent played this step (reasons opponent_won and continue). */
  opponentMove?: readonly [number, number];
}

/** (row, col) steps of the four line directions: →, ↓, ↘, ↙. */
const DIRECTIONS: readonly (readonly [number, number])[] = [
  [0, 1],
  [1, 0],
  [1, 1],
  [1, -1],
];

/** True when `stone` has `winLength` in a line on the square board. */
export function hasLine(board: readonly (readonly GomokuCell[])[], stone: GomokuStone, winLength: number): boolean {
  const size = board.length;
  const at = (row: number, col: number) => (row >= 0 && row < size && col >= 0 && col < size ? board[row]?.[col] : undefined);
  for (let row = 0; row < size; row++) {
    for (let col = 0; col < size; col++) {
      if (at(row, col) !== stone) continue;
      for (const [rowStep, colStep] of DIRECTIONS) {
        let count = 1;
        while (count < winLength && at(row + count * rowStep, col + count * colStep) === stone) count++;
        if (count >= winLength) return true;
      }
    }
  }
  return false;
}

/** The board as the agent reads it (see the header). */
export function renderGomokuBoard(board: readonly (readonly GomokuCell[])[]): string {
  const header = `  ${board.map((_, index) => String(index)).join(' ')}`;
  return [header, ...board.map((row, index) => `${index} ${row.join(' ')}`)].join('\n');
}

export class GomokuGame {
  readonly size: number;
  readonly winLength: number;
  #board: GomokuCell[][] = [];
  #done = false;
  #winner: GomokuStone | null = null;

  constructor(size: number, winLength: number) {
    if (!Number.isInteger(size) || size < 1) throw new Error(`gomoku: the board size must be a positive integer, got ${size}`);
    if (!Number.isInteger(winLength) || winLength < 1)
      throw new Error(`gomoku: the win length must be a positive integer, got ${winLength}`);
    if (size < winLength) throw new Error(`gomoku: the board size (${size}) must be at least the win length (${winLength})`);
    this.size = size;
    this.winLength = winLength;
    this.reset();
  }

  /** An empty board; returns its observation. */
  reset(): string {
    this.#board = Array.from({ length: this.size }, () => Array<GomokuCell>(this.size).fill(GOMOKU_EMPTY));
    this.#done = false;
    this.#winner = null;
    return this.render();
  }

  render(): string {
    return renderGomokuBoard(this.#board);
  }

  get board(): readonly (readonly GomokuCell[])[] {
    return this.#board;
  }

  get done(): boolean {
    return this.#done;
  }

  get winner(): GomokuStone | null {
    return this.#winner;
  }

  /** Places X at (row, col) and lets O answer (see the header). */
  step(row: number, col: number): GomokuStepResult {
    if (this.#done) return this.#result(0, 'game_already_finished');
    if (!this.#isEmptyCell(row, col)) return this.#result(-1, 'invalid_move');
    this.#place(row, col, GOMOKU_AGENT);
    if (hasLine(this.#board, GOMOKU_AGENT, this.winLength)) return this.#finish(1, 'agent_won', GOMOKU_AGENT);
    if (this.#isFull()) return this.#finish(0, 'draw', null);
    const opponentMove = this.#opponentMove();
    if (hasLine(this.#board, GOMOKU_OPPONENT, this.winLength))
      return { ...this.#finish(-1, 'opponent_won', GOMOKU_OPPONENT), opponentMove };
    if (this.#isFull()) return this.#finish(0, 'draw', null);
    return { ...this.#result(0, 'continue'), opponentMove };
  }

  #isEmptyCell(row: number, col: number): boolean {
    return (
      Number.isInteger(row) &&
      Number.isInteger(col) &&
      row >= 0 &&
      row < this.size &&
      col >= 0 &&
      col < this.size &&
      this.#board[row]?.[col] === GOMOKU_EMPTY
    );
  }

  #place(row: number, col: number, stone: GomokuStone): void {
    (this.#board[row] as GomokuCell[])[col] = stone;
  }

  #isFull(): boolean {
    return this.#board.every((row) => row.every((cell) => cell !== GOMOKU_EMPTY));
  }

  /** The scripted opponent: O on the first empty cell in row-major order (called only when one is empty). */
  #opponentMove(): readonly [number, number] {
    for (let row = 0; row < this.size; row++) {
      for (let col = 0; col < this.size; col++) {
        if (this.#board[row]?.[col] !== GOMOKU_EMPTY) continue;
        this.#place(row, col, GOMOKU_OPPONENT);
        return [row, col];
      }
    }
    throw new Error('gomoku: the opponent has no empty cell (the board is full)');
  }

  #finish(reward: number, reason: GomokuReason, winner: GomokuStone | null): GomokuStepResult {
    this.#done = true;
    this.#winner = winner;
    return this.#result(reward, reason);
  }

  #result(reward: number, reason: GomokuReason): GomokuStepResult {
    return { observation: this.render(), reward, done: this.#done, reason };
  }
}
