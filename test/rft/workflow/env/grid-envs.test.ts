// The grid environments without a model: the action parser, FrozenLake and Sokoban rules, generators (deterministic,
// always solvable), BFS solvers (optimal on hand-made levels, null when unsolvable) and expert play.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  FROZEN_LAKE_SYSTEM_PROMPT,
  FrozenLakeEnv,
  type FrozenLakeMap,
  frozenLakeFromArgs,
  generateFrozenLake,
  generateSokoban,
  parseAction,
  playEpisode,
  renderFrozenLake,
  renderSokoban,
  SokobanEnv,
  type SokobanLevel,
  seededEpisodeData,
  sokobanMove,
  solveFrozenLake,
  solveSokoban,
} from '../../../../src/rft/workflow/env/index.js';

describe('parseAction', () => {
  test('one move word in any case, with any text or punctuation around it', () => {
    assert.equal(parseAction('Up'), 'Up');
    assert.equal(parseAction('  right\n'), 'Right');
    assert.equal(parseAction('```DOWN```'), 'Down');
    assert.equal(parseAction('I go left.'), 'Left');
    assert.equal(parseAction('left left'), 'Left');
  });
  test('no move word, a misspelling or two different moves are invalid', () => {
    for (const reply of ['', 'jump', 'Rigth', 'upward', 'Up or Down', 'U']) assert.equal(parseAction(reply), null, reply);
  });
  test("a fenced block is read as Trinity reads it: the last one's content, a move word or 1-4", () => {
    // reasoning that names other moves before the answer (Trinity's prompt: think, then the action in ``` ```)
    assert.equal(parseAction('Up leads to a hole and Left off the grid, so I go down. ```Down```'), 'Down');
    assert.equal(parseAction('```Up``` no wait ``` right ```'), 'Right');
    assert.equal(parseAction('Action: ```3```'), 'Right'); // 1 Left, 2 Down, 3 Right, 4 Up
    assert.equal(parseAction('```04```'), 'Up');
    for (const reply of ['```go up```', '```5```', '``````', 'Down ```jump```', '```Up or Down```'])
      assert.equal(parseAction(reply), null, reply);
  });
});

// S at (0,0), G at (2,2); holes block the direct column.
const lake: FrozenLakeMap = { size: 3, rows: ['SFF', 'HHF', 'FFG'], start: 0, goal: 8 };

describe('FrozenLake', () => {
  test('BFS finds a shortest path around the holes, or null when the goal is cut off', () => {
    assert.deepEqual(solveFrozenLake(lake), ['Right', 'Right', 'Down', 'Down']);
    assert.deepEqual(solveFrozenLake(lake, 5), ['Down']);
    assert.equal(solveFrozenLake({ size: 3, rows: ['SFF', 'HHH', 'FFG'], start: 0, goal: 8 }), null);
  });

  test('moves: off the grid stays, a hole ends with 0, the goal ends with 1, an invalid reply is a no-op', () => {
    const env = new FrozenLakeEnv(lake);
    assert.equal(env.reset(), 'P__\nOO_\n__G');
    assert.deepEqual(env.step('Up'), { observation: 'P__\nOO_\n__G', reward: 0, done: false });
    assert.deepEqual(env.step('dance'), { observation: 'P__\nOO_\n__G', reward: 0, done: false, invalidAction: true });
    assert.deepEqual(env.step('Down'), { observation: '___\nPO_\n__G', reward: 0, done: true });
    assert.deepEqual(env.metrics(), { success: 0, fell: 1 });
    assert.throws(() => env.step('Up'), /episode is over/);
    env.reset();
    const path = solveFrozenLake(lake) ?? [];
    const last = path.map((move) => env.step(move)).at(-1);
    assert.deepEqual(last, { observation: '___\nOO_\n__P', reward: 1, done: true });
    assert.deepEqual(env.metrics(), { success: 1, fell: 0 });
  });

  test('generated maps are reproducible, varied and always solvable', () => {
    const a = generateFrozenLake({ seed: 7, size: 4, p: 0.8 });
    assert.deepEqual(generateFrozenLake({ seed: 7, size: 4, p: 0.8 }), a);
    const layouts = new Set<string>();
    for (let seed = 0; seed < 300; seed++) {
      const map = generateFrozenLake({ seed, size: 5, p: 0.7 });
      assert.equal(map.rows.join('').replace(/[^S]/g, ''), 'S');
      assert.equal(map.rows.join('').replace(/[^G]/g, ''), 'G');
      const path = solveFrozenLake(map);
      assert.ok(path !== null && path.length >= 1, `seed ${seed} unsolvable`);
      layouts.add(renderFrozenLake(map, map.start));
    }
    assert.ok(layouts.size > 280, `only ${layouts.size} distinct maps of 300`);
  });

  test("corners: start top-left and goal bottom-right (gymnasium's layout), holes still random, always solvable", () => {
    const layouts = new Set<string>();
    for (let seed = 0; seed < 100; seed++) {
      const map = generateFrozenLake({ seed, size: 4, p: 0.8, corners: true });
      assert.equal(map.start, 0);
      assert.equal(map.goal, 15);
      assert.equal(map.rows[0]?.[0], 'S');
      assert.equal(map.rows[3]?.[3], 'G');
      assert.ok(solveFrozenLake(map) !== null, `seed ${seed} unsolvable`);
      layouts.add(map.rows.join('/'));
    }
    assert.ok(layouts.size > 80, `only ${layouts.size} distinct maps of 100`);
    assert.deepEqual(
      frozenLakeFromArgs({ corners: true }, { seed: 9 }).map,
      generateFrozenLake({ seed: 9, size: 4, p: 0.8, corners: true }),
    );
    assert.throws(() => frozenLakeFromArgs({ corners: 1 }, { seed: 0 }), /corners must be true or false/);
  });

  test('task arguments: defaults, row overrides, precise errors', () => {
    const { map, isSlippery } = frozenLakeFromArgs({ size: 5 }, { seed: 3 });
    assert.equal(map.size, 5);
    assert.equal(isSlippery, false);
    assert.deepEqual(map, generateFrozenLake({ seed: 3, size: 5, p: 0.8 }));
    assert.throws(() => frozenLakeFromArgs({ size: 1 }, { seed: 0 }), /size must be an integer in \[2, 32\]/);
    assert.throws(() => frozenLakeFromArgs({ p: 0 }, { seed: 0 }), /p must be a number/);
    assert.throws(() => frozenLakeFromArgs({ is_slippery: 'yes' }, { seed: 0 }), /is_slippery must be true or false/);
  });

  test('slippery: the intended move or either side, about 1/3 each', () => {
    const open: FrozenLakeMap = { size: 3, rows: ['FFF', 'FSF', 'FFG'], start: 4, goal: 8 };
    const counts: Record<number, number> = {};
    const env = new FrozenLakeEnv(open, { isSlippery: true, seed: 5 });
    for (let i = 0; i < 600; i++) {
      env.reset();
      env.step('Up');
      counts[env.position] = (counts[env.position] ?? 0) + 1;
    }
    // from the centre (4): Up → 1, side slips → 3 (Left) and 5 (Right); never Down (7)
    assert.deepEqual(Object.keys(counts).sort(), ['1', '3', '5']);
    for (const n of Object.values(counts)) assert.ok(n > 150 && n < 250, JSON.stringify(counts));
  });
});

/** A level from a picture (walls included): # wall, _ floor, . target, $ box, * box on target, @ player. */
function level(picture: string): SokobanLevel {
  const rows = picture.trim().split('\n');
  const width = (rows[0] as string).length;
  const out: SokobanLevel = { width, height: rows.length, walls: [], targets: [], boxes: [], player: -1 };
  rows
    .join('')
    .split('')
    .forEach((ch, i) => {
      out.walls.push(ch === '#');
      if (ch === '.' || ch === '*' || ch === '+') out.targets.push(i);
      if (ch === '$' || ch === '*') out.boxes.push(i);
      if (ch === '@' || ch === '+') out.player = i;
    });
  return out;
}

describe('Sokoban', () => {
  const room = level(`
######
#____#
#_$__#
#__@_#
#.___#
######`);

  test('pushes move the box; a push into a wall or another box is a no-op; walls block', () => {
    assert.equal(renderSokoban(room), '____\n_$__\n__@_\n.___');
    const left = sokobanMove(room, room, 'Left');
    assert.deepEqual(left, { player: 20, boxes: [14] });
    const pushed = sokobanMove(room, left, 'Up');
    assert.deepEqual(pushed, { player: 14, boxes: [8] });
    assert.equal(sokobanMove(room, pushed, 'Up'), pushed, 'box against the wall');
    const twoBoxes = level(`
#####
#@$$#
#..##
#####`);
    assert.equal(sokobanMove(twoBoxes, twoBoxes, 'Right'), twoBoxes);
    assert.equal(sokobanMove(twoBoxes, twoBoxes, 'Up'), twoBoxes);
  });

  test('BFS solves optimally and reports unsolvable levels', () => {
    // by hand: Up, push Left (box to column 1), Up, Left, push Down twice = 6 moves; pushing down first costs 8
    const solution = solveSokoban(room);
    assert.deepEqual(solution, ['Up', 'Left', 'Up', 'Left', 'Down', 'Down']);
    let state = { player: room.player, boxes: room.boxes };
    for (const move of solution ?? []) state = sokobanMove(room, state, move);
    assert.deepEqual(state.boxes, room.targets);
    const cornered = level(`
#####
#$__#
#_@.#
#####`);
    assert.equal(solveSokoban(cornered), null);
    assert.deepEqual(solveSokoban(level('#####\n#@$.#\n#####')), ['Right']);
  });

  test('generated levels are reproducible, unsolved at the start, solvable, within max_solution_steps', () => {
    assert.deepEqual(generateSokoban({ seed: 4 }), generateSokoban({ seed: 4 }));
    const lengths = new Set<number>();
    for (let seed = 0; seed < 200; seed++) {
      const generated = generateSokoban({ seed, maxSolutionSteps: 6 });
      const solution = solveSokoban(generated);
      assert.ok(solution !== null && solution.length >= 1 && solution.length <= 6, `seed ${seed}`);
      lengths.add(solution.length);
      assert.equal(generated.walls.filter((w) => !w).length >= 3, true);
    }
    assert.ok(lengths.size >= 4, `solution lengths ${[...lengths]}`);
    const two = generateSokoban({ seed: 1, width: 7, height: 7, numBoxes: 2 });
    assert.equal(two.boxes.length, 2);
    assert.ok(solveSokoban(two));
  });

  test('the episode: success gives 1, a dead end ends it early, invalid replies are no-ops', async () => {
    const env = new SokobanEnv(room);
    env.reset();
    assert.deepEqual(env.step('hello'), { observation: '____\n_$__\n__@_\n.___', reward: 0, done: false, invalidAction: true });
    env.step('Left');
    const stuck = env.step('Up'); // box pushed into the top wall, away from the target's column and row: dead
    assert.equal(stuck.done, true);
    assert.deepEqual(env.metrics(), { success: 0, deadlock: 1, boxes_on_target: 0 });
    const played = await playEpisode(env, () => solveSokoban(env.level, env.state)?.[0] ?? 'Up', { maxSteps: 10 });
    assert.deepEqual([played.reward, played.done, played.steps], [1, true, 6]);
    assert.equal(played.messages.length, 1 + 2 * 6 - 1); // first observation, then reply + observation, no last observation
    assert.deepEqual(played.messages.at(-1), { role: 'assistant', content: played.messages.at(-1)?.content });
  });

  test('the BFS expert solves every generated level within max_steps', async () => {
    for (let seed = 100; seed < 150; seed++) {
      const env = new SokobanEnv(generateSokoban({ seed, maxSolutionSteps: 8 }));
      const played = await playEpisode(env, () => solveSokoban(env.level, env.state)?.[0] ?? 'Up', { maxSteps: 10 });
      assert.equal(played.reward, 1, `seed ${seed}`);
    }
  });
});

test('seededEpisodeData: disjoint seed ranges, no eval layout trained on, only solved expert episodes', async () => {
  const map = (seed: number) => generateFrozenLake({ seed, size: 3, p: 0.8 });
  const layout = (seed: number) => renderFrozenLake(map(seed), map(seed).start);
  const data = await seededEpisodeData({
    counts: { train: 40, eval: 20, sft: 30 },
    layout,
    environment: (seed) => new FrozenLakeEnv(map(seed)),
    expert: (env) => solveFrozenLake(env.map, env.position)?.[0] ?? 'Up',
    systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
    maxSteps: 8,
  });
  assert.deepEqual(
    data.eval.map((r) => r.seed),
    Array.from({ length: 20 }, (_, i) => i),
  );
  assert.equal(data.train.length, 40);
  const held = new Set(data.eval.map((r) => layout(r.seed)));
  for (const { seed } of [...data.train, ...data.sft]) assert.ok(!held.has(layout(seed)), `seed ${seed} repeats an eval layout`);
  assert.ok(data.train.every((r) => r.seed >= 100_000 && r.seed < 200_000));
  assert.ok(data.sft.length > 0 && data.sft.length <= 30);
  for (const { seed, messages } of data.sft) {
    assert.ok(seed >= 200_000);
    assert.equal(messages[0]?.role, 'system');
    assert.equal(messages.at(-1)?.role, 'assistant', 'a solved episode ends on the winning move');
  }
});

test('seededEpisodeData keepFailed: unsolved demonstrations kept, each ending on the last move', async () => {
  const map = (seed: number) => generateFrozenLake({ seed, size: 3, p: 0.8 });
  const data = await seededEpisodeData({
    counts: { train: 0, eval: 0, sft: 30 },
    layout: (seed) => renderFrozenLake(map(seed), map(seed).start),
    environment: (seed) => new FrozenLakeEnv(map(seed)),
    expert: () => 'Up', // mostly fails: bumps into the top edge until maxSteps, or falls in
    systemPrompt: FROZEN_LAKE_SYSTEM_PROMPT,
    maxSteps: 2,
    keepFailed: true,
  });
  assert.equal(data.sft.length, 30);
  for (const { messages } of data.sft) assert.equal(messages.at(-1)?.role, 'assistant');
  assert.ok(
    data.sft.some(({ messages }) => messages.length === 5),
    'an episode cut after 2 moves: system, 2 x (user, move)',
  );
});
