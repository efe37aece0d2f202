// save_input with several explorer processes (mode explore): each explorer writes a file of its own name, and a
// restarted explorer keeps the raw input of the steps it finished (its claims), not of steps <= some start step (its
// steps are not consecutive: the others explored the ones in between).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import Database from 'better-sqlite3';
import { ExperiencePipeline, explorerSavePath } from '../../../src/rft/data/experience-pipeline/index.js';
import type { Experience } from '../../../src/rft/experience.js';

const exp = (eid: string, step: number): Experience =>
  ({ eid, tokens: [1, 2], promptLength: 1, reward: 1, info: { taskId: 't', step } }) as unknown as Experience;

describe('save_input per explorer', () => {
  test('the explorer name goes before the extension, for JSONL, SQLite files and sqlite:/// URLs', () => {
    assert.equal(explorerSavePath('/runs/raw.jsonl', 'a'), '/runs/raw.a.jsonl');
    assert.equal(explorerSavePath('/runs/buffer/explorer_output.db', 'gpu-2'), '/runs/buffer/explorer_output.gpu-2.db');
    assert.equal(explorerSavePath('sqlite:///runs/raw.sqlite', 'b'), 'sqlite:///runs/raw.b.sqlite');
    assert.throws(() => explorerSavePath('/runs/raw.csv', 'a'), /input_save_path '\/runs\/raw\.csv': expected/);
  });

  test('JSONL: a restarted explorer keeps the steps it finished and forgets the one it was cut off in', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'save-input-'));
    const path = explorerSavePath(join(dir, 'raw.jsonl'), 'a');
    let pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: path }, { keepSteps: new Set() });
    // explorer a explored steps 1 and 3 (b had 2), then was killed during step 5
    for (const step of [1, 3, 5]) await pipeline.process([exp(`a${step}`, step)], { step, repeatTimes: 1 });
    await pipeline.close();
    pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: path }, { keepSteps: new Set([1, 3]) });
    await pipeline.process([exp('a5-again', 5)], { step: 5, repeatTimes: 1 });
    await pipeline.close();
    const eids = readFileSync(join(dir, 'raw.a.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => (JSON.parse(l) as Experience).eid);
    assert.deepEqual(eids, ['a1', 'a3', 'a5-again']);
  });

  test('SQLite: the same, in the experience_pipeline_input table', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'save-input-'));
    const spec = explorerSavePath(`sqlite:///${join(dir, 'raw.db')}`, 'b');
    let pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: spec }, { keepSteps: new Set() });
    for (const step of [2, 4, 6]) await pipeline.process([exp(`b${step}`, step)], { step, repeatTimes: 1 });
    await pipeline.close();
    pipeline = await ExperiencePipeline.create({ operators: [], inputSavePath: spec }, { keepSteps: new Set([2, 6]) });
    await pipeline.close();
    const db = new Database(join(dir, 'raw.b.db'), { readonly: true });
    const rows = db.prepare('SELECT step, eid FROM experience_pipeline_input ORDER BY id').all();
    db.close();
    assert.deepEqual(rows, [
      { step: 2, eid: 'b2' },
      { step: 6, eid: 'b6' },
    ]);
  });
});
