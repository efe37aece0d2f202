// numpy's generator and Trinity-RFT's FrozenLake maps, bit for bit. The reference values were computed with numpy
// 2.4.6 (the generator gymnasium's seeding.np_random(seed) makes):
//   rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed)))
//   [rng.random(), rng.integers(0, 5), rng.integers(0, 9), rng.integers(0, 3), rng.random(), rng.integers(0, 2),
//    rng.integers(3, 1000), rng.random()]
// and the maps with that generator by upstream's generate_random_map(size, p, seed, max_steps)
// (trinity/common/workflows/envs/frozen_lake/utils.py: choice(['F', 'H'], (size, size), p=[p, 1 - p]); start and
// goal by four integers(0, size), redrawn while equal; kept when its depth-first is_valid reaches G within max_steps).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { frozenLakeFromArgs, generateFrozenLake, solveFrozenLake } from '../../../../src/rft/workflow/env/frozen-lake.js';
import { NumpyGenerator } from '../../../../src/rft/workflow/env/numpy-random.js';

const DRAWS: Record<number, number[]> = {
  0: [0.6369616873214543, 2, 2, 0, 0.016527635528529094, 0, 177, 0.9127555772777217],
  1: [0.5118216247002567, 3, 8, 0, 0.9486494471372439, 0, 251, 0.42332644897257565],
  42: [0.7739560485559633, 3, 3, 1, 0.6973680290593639, 1, 203, 0.9756223516367559],
  27589: [0.23724660648874185, 3, 4, 2, 0.9729491002100055, 1, 544, 0.9844293867169438],
  99999: [0.6933083269848923, 1, 3, 0, 0.775972557818252, 0, 211, 0.5511360429157832],
  4294967301: [0.7742041803738812, 3, 4, 2, 0.8165376458429717, 1, 815, 0.5172962228698259], // two entropy words
};

const TRINITY_MAPS: { seed: number; size: number; p: number; envMaxSteps: number; rows: string[] }[] = [
  { seed: 27589, size: 3, p: 0.71, envMaxSteps: 8, rows: ['FFF', 'GFF', 'FSF'] },
  { seed: 412, size: 5, p: 0.62, envMaxSteps: 8, rows: ['FFGFH', 'FFHFF', 'FFFFS', 'FFFFF', 'HHFFF'] },
  { seed: 9031, size: 4, p: 0.83, envMaxSteps: 8, rows: ['FFFH', 'HFFH', 'SFFF', 'GHFF'] },
  { seed: 0, size: 2, p: 0.6, envMaxSteps: 8, rows: ['HS', 'FG'] },
  {
    seed: 42,
    size: 9,
    p: 0.6,
    envMaxSteps: 8,
    rows: ['HHFHFFFHF', 'FFHGHHHFF', 'HHFSHFHFF', 'HFFFHFFHH', 'FFFFFHFFH', 'FFHHHFFHF', 'FFHHFHFFH', 'FFFHFHHFH', 'FFHHFFHHH'],
  },
  { seed: 93850, size: 5, p: 0.6551, envMaxSteps: 8, rows: ['FFHHH', 'FHFHH', 'FGHHH', 'FFFFF', 'FFHSF'] },
  {
    seed: 77236,
    size: 7,
    p: 0.8024,
    envMaxSteps: 3,
    rows: ['HFFHFHF', 'SFFFFFF', 'FGFHHFF', 'FHFHHFF', 'HFFHHHF', 'FFFFFFF', 'FFHFFFF'],
  },
  { seed: 851, size: 6, p: 0.7745, envMaxSteps: 10, rows: ['HFGHFF', 'FFFFFH', 'FFFFFF', 'FFFFFF', 'FHSHFF', 'FFFHFF'] },
  {
    seed: 123,
    size: 8,
    p: 0.65,
    envMaxSteps: 8,
    rows: ['HFFFFHHF', 'HHFFHFHF', 'HFHFFFFF', 'GFFHHFHH', 'FHHFHHFF', 'FFFHFFFF', 'FFFFFFFF', 'HFFSFHFF'],
  },
  { seed: 7, size: 4, p: 1.0, envMaxSteps: 8, rows: ['FFFF', 'FFFF', 'FFFS', 'FFFG'] },
];

describe("numpy's Generator(PCG64(SeedSequence(seed)))", () => {
  test('random() and integers() give numpy 2.4.6 values exactly', () => {
    const bounds: ([number, number] | null)[] = [null, [0, 5], [0, 9], [0, 3], null, [0, 2], [3, 1000], null];
    for (const [seed, expected] of Object.entries(DRAWS)) {
      const numpy = new NumpyGenerator(Number(seed));
      const got = bounds.map((range) => (range === null ? numpy.random() : numpy.integers(...range)));
      assert.deepEqual(got, expected, `seed ${seed}`);
    }
  });

  test('seeds and ranges it cannot take are errors', () => {
    assert.throws(() => new NumpyGenerator(-1), /non-negative integer/);
    assert.throws(() => new NumpyGenerator(1.5), /non-negative integer/);
    assert.throws(() => new NumpyGenerator(1).integers(3, 3), /the range must hold/);
  });
});

describe("Trinity-RFT's FrozenLake maps", () => {
  test('(seed, size, p, env_max_steps) give the map upstream generates, bit for bit', () => {
    for (const { seed, size, p, envMaxSteps, rows } of TRINITY_MAPS) {
      const map = generateFrozenLake({ seed, size, p, maxPathSteps: envMaxSteps });
      assert.deepEqual(map.rows, rows, `seed ${seed}`);
      assert.equal(map.rows.join('').indexOf('S'), map.start);
      assert.equal(map.rows.join('').indexOf('G'), map.goal);
      assert.notEqual(solveFrozenLake(map), null, `seed ${seed}: a path`);
    }
    // as task arguments (a row's seed, size, p; workflow_args env_max_steps); 8 is the default
    const first = TRINITY_MAPS[0] as (typeof TRINITY_MAPS)[number];
    const bounded = TRINITY_MAPS[6] as (typeof TRINITY_MAPS)[number];
    assert.deepEqual(frozenLakeFromArgs({ seed: first.seed, size: first.size, p: first.p }, { seed: 0 }).map.rows, first.rows);
    const args = { seed: bounded.seed, size: bounded.size, p: bounded.p };
    assert.deepEqual(frozenLakeFromArgs({ ...args, env_max_steps: 3 }, { seed: 0 }).map.rows, bounded.rows);
    assert.notDeepEqual(frozenLakeFromArgs(args, { seed: 0 }).map.rows, bounded.rows, 'env_max_steps 8 keeps an earlier map');
  });
});
