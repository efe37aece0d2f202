// The Gomoku board of Trinity-RFT's agentscope_gomoku example (src/rft/workflow/env/gomoku.ts): the rendering, invalid
// moves (off the board, taken cells) that change nothing and cost -1, the first-empty-cell opponent, lines in all four
// directions, and whole games won, lost and drawn, each move's reward and reason worked out by hand below.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { type GomokuCell, GomokuGame, hasLine, renderGomokuBoard } from '../../../../src/rft/workflow/env/index.js';

/** A board from rows of text ("X.O" …). */
const board = (...rows: string[]): GomokuCell[][] => rows.map((row) => [...row] as GomokuCell[]);

/** Plays the agent's moves; each step's [reward, done, reason]. */
function play(game: GomokuGame, moves: [number, number][]) {
  return moves.map(([row, col]) => {
    const { reward, done, reason } = game.step(row, col);
    return [reward, done, reason];
  });
}

describe('gomoku board', () => {
  test('renders column numbers, then each row after its number', () => {
    const game = new GomokuGame(3, 3);
    assert.equal(game.reset(), '  0 1 2\n0 . . .\n1 . . .\n2 . . .');
    game.step(1, 2);
    assert.equal(game.render(), '  0 1 2\n0 O . .\n1 . . X\n2 . . .');
    assert.equal(renderGomokuBoard(board('XO', '.X')), '  0 1\n0 X O\n1 . X');
  });

  test('invalid moves (off the board, a taken cell) cost -1 and change nothing; the opponent does not move', () => {
    const game = new GomokuGame(5, 4);
    const start = game.render();
    for (const [row, col] of [
      [-1, -1],
      [5, 0],
      [0, 5],
      [1.5, 0],
    ] as [number, number][]) {
      assert.deepEqual(game.step(row, col), { observation: start, reward: -1, done: false, reason: 'invalid_move' });
    }
    game.step(2, 2); // X at (2,2), O answers at (0,0)
    const after = game.render();
    assert.deepEqual(
      play(game, [
        [2, 2],
        [0, 0],
      ]),
      [
        [-1, false, 'invalid_move'],
        [-1, false, 'invalid_move'],
      ],
    );
    assert.equal(game.render(), after);
  });

  test('the opponent plays the first empty cell in row-major order', () => {
    const game = new GomokuGame(3, 3);
    assert.deepEqual(game.step(0, 0).opponentMove, [0, 1]);
    assert.deepEqual(game.step(1, 1).opponentMove, [0, 2]);
    assert.deepEqual(game.step(1, 0).opponentMove, [1, 2]);
    assert.deepEqual(game.board, board('XOO', 'XXO', '...'));
  });

  test('a line counts in all four directions, and only at the win length', () => {
    assert.ok(hasLine(board('.....', '.XXXX', '.....', '.....', '.....'), 'X', 4), 'across');
    assert.ok(hasLine(board('.....', '...O.', '...O.', '...O.', '...O.'), 'O', 4), 'down');
    assert.ok(hasLine(board('X....', '.X...', '..X..', '...X.', '.....'), 'X', 4), 'diagonal');
    assert.ok(hasLine(board('.....', '...X.', '..X..', '.X...', 'X....'), 'X', 4), 'anti-diagonal');
    assert.ok(!hasLine(board('.....', '.XXX.', '.....', '.....', '.....'), 'X', 4), 'three of four');
    assert.ok(!hasLine(board('XXX.X', '.....', '.....', '.....', '.....'), 'X', 4), 'a gap breaks the line');
    assert.ok(!hasLine(board('...XX', 'XX...', '.....', '.....', '.....'), 'X', 4), 'no wrap-around at the edge');
    assert.ok(!hasLine(board('.....', '.XXXX', '.....', '.....', '.....'), 'O', 4), "the other player's line");
    assert.ok(hasLine(board('.....', '.XXXX', '.....', '.....', '.....'), 'X', 3), 'longer than the win length');
  });

  test('the agent wins with four across before the opponent fills row 0', () => {
    const game = new GomokuGame(5, 4);
    // X row 1 left to right; O answers (0,0), (0,1), (0,2): three, one short
    assert.deepEqual(
      play(game, [
        [1, 0],
        [1, 1],
        [1, 2],
        [1, 3],
      ]),
      [
        [0, false, 'continue'],
        [0, false, 'continue'],
        [0, false, 'continue'],
        [1, true, 'agent_won'],
      ],
    );
    assert.equal(game.winner, 'X');
    assert.deepEqual(game.step(4, 4), { observation: game.render(), reward: 0, done: true, reason: 'game_already_finished' });
  });

  test('the opponent wins with four across row 0', () => {
    const game = new GomokuGame(5, 4);
    assert.deepEqual(
      play(game, [
        [4, 4],
        [4, 2],
        [4, 0],
        [3, 3],
      ]),
      [
        [0, false, 'continue'],
        [0, false, 'continue'],
        [0, false, 'continue'],
        [-1, true, 'opponent_won'],
      ],
    );
    assert.equal(game.winner, 'O');
    assert.deepEqual(game.board[0], ['O', 'O', 'O', 'O', '.']);
  });

  test("a full board without a line is a draw, on the agent's move or the opponent's", () => {
    // 3 x 3, three in a row: this order leaves no line of either stone
    const byAgent = new GomokuGame(3, 3);
    assert.deepEqual(
      play(byAgent, [
        [0, 2],
        [1, 0],
        [1, 1],
        [2, 1],
        [2, 2],
      ]),
      [
        [0, false, 'continue'], // O (0,0)
        [0, false, 'continue'], // O (0,1)
        [0, false, 'continue'], // O (1,2)
        [0, false, 'continue'], // O (2,0)
        [0, true, 'draw'], // the ninth stone is X's
      ],
    );
    assert.deepEqual(byAgent.board, board('OOX', 'XXO', 'OXX'));
    assert.equal(byAgent.winner, null);
    // 4 x 4, four in a row: X takes columns 0 and 2 of rows 0-2, O (first empty) columns 1 and 3; X ends in row 3
    const byOpponent = new GomokuGame(4, 4);
    const moves: [number, number][] = [
      [0, 0],
      [0, 2],
      [1, 0],
      [1, 2],
      [2, 0],
      [2, 2],
      [3, 1],
      [3, 3],
    ];
    const results = play(byOpponent, moves);
    assert.deepEqual(results.at(-1), [0, true, 'draw']);
    assert.ok(results.slice(0, -1).every(([, done]) => done === false));
    assert.deepEqual(byOpponent.board, board('XOXO', 'XOXO', 'XOXO', 'OXOX'), "the sixteenth stone is O's (3,2)");
  });

  test('refuses a board smaller than the win length', () => {
    assert.throws(() => new GomokuGame(3, 4), /board size \(3\) must be at least the win length \(4\)/);
    assert.throws(() => new GomokuGame(0, 1), /board size must be a positive integer, got 0/);
  });
});
