// examples/sokoban's committed data (data/*.jsonl) is what its make-data.ts writes with its defaults: the README's
// figures are measured on it, and a change to the generator or the solver that moves a level shows here.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { it } from 'node:test';
import { makeSokobanData } from '../../examples/sokoban/make-data.js';
import { examplesDir } from './grid-learns.js';

it('the committed data of examples/sokoban is what make-data.ts writes with its defaults', async () => {
  const data = await makeSokobanData({
    size: 6,
    maxSolutionSteps: 6,
    epsilon: 0.25,
    maxSteps: 10,
    train: 2000,
    eval: 100,
    sft: 2000,
  });
  for (const [set, rows] of Object.entries(data)) {
    const file = readFileSync(join(examplesDir, 'sokoban', 'data', `${set}.jsonl`), 'utf8');
    assert.equal(file, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`, `${set}.jsonl is stale: rerun make-data.ts`);
  }
});
