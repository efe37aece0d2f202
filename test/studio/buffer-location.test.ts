// Where the Studio finds a stage's shared SQLite buffer: the file the stage's buffer.json records (wherever the run's
// config put it under the runs folder), else the run's default place, <stage>/buffer/<name>.db
// (src/rft/buffer/config.ts), never a guess beside the stage's files. Run folders laid out as a real run writes them.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { writeBufferRecord } from '../../src/rft/buffer/buffer-record.js';
import { SourceCache } from '../../src/studio/context.js';
import { RunIndex } from '../../src/studio/runs.js';
import { writeRun } from './fixtures.js';

let root: string;
let outside: string;

before(async () => {
  root = realpathSync(mkdtempSync(join(tmpdir(), 'studio-buffer-location-')));
  outside = realpathSync(mkdtempSync(join(tmpdir(), 'studio-buffer-outside-')));
  const run = { name: 'grpo', steps: 4, done: true, tasksPerStep: 2, repeats: 2, tokenizer: true } as const;
  // the default: storage_type sql without a path
  await writeRun(root, 'p', 'default', [{ ...run, bufferAt: 'buffer/experience_buffer.db', recordBuffer: true }]);
  // a path set in the config, outside the stage folder (here the job folder); a stale file in the default place
  const configured = await writeRun(root, 'p', 'configured', [{ ...run, bufferAt: '../shared.db', recordBuffer: true }]);
  mkdirSync(join(configured, 'grpo', 'buffer'));
  writeFileSync(join(configured, 'grpo', 'buffer', 'old.db'), '');
  // a stage that stopped before it wrote its buffer.json
  await writeRun(root, 'p', 'unrecorded', [{ ...run, bufferAt: 'buffer/experience_buffer.db' }]);
  // a path outside the runs folder: not the Studio's to open
  await writeRun(root, 'p', 'elsewhere', [{ ...run, tasksPerStep: 0 }]);
  await writeRun(outside, 'q', 'x', [{ ...run, bufferAt: 'far.db' }]);
  writeBufferRecord(join(root, 'p', 'elsewhere', 'grpo'), join(outside, 'q', 'x', 'grpo', 'far.db'), 'experiences');
});

after(() => {
  rmSync(root, { recursive: true, force: true });
  rmSync(outside, { recursive: true, force: true });
});

async function buffersOf(id: string): Promise<string[]> {
  const run = await new RunIndex(root).run(id);
  return run.stages.flatMap((s) => s.buffers);
}

describe('the shared SQLite buffer of a stage', () => {
  it('is the file buffer.json records, in the default place <stage>/buffer/', async () => {
    assert.deepEqual(await buffersOf('p/default'), ['p/default/grpo/buffer.json', 'p/default/grpo/buffer/experience_buffer.db']);
  });

  it('is the file buffer.json records wherever the config put it, not a file in the default place', async () => {
    assert.deepEqual(await buffersOf('p/configured'), ['p/configured/grpo/buffer.json', 'p/configured/shared.db']);
  });

  it('is found in the default place when the stage wrote no buffer.json', async () => {
    assert.deepEqual(await buffersOf('p/unrecorded'), ['p/unrecorded/grpo/buffer/experience_buffer.db']);
  });

  it('is not listed when buffer.json records a file outside the runs folder', async () => {
    assert.deepEqual(await buffersOf('p/elsewhere'), ['p/elsewhere/grpo/buffer.json']);
  });

  it('opens with its rows, decoded by the stage’s tokenizer', async () => {
    const sources = new SourceCache(root);
    const file = 'p/default/grpo/buffer/experience_buffer.db';
    assert.deepEqual(
      (await sources.describe(file)).map((s) => [s.table, s.kind]),
      [['experiences', 'buffer']],
    );
    const source = await sources.get(file, 'experiences');
    const page = source.page({}, 0, 1);
    assert.equal(page.total, 4 * 2 * 2);
    const first = page.rows[0];
    assert.ok(first);
    assert.equal(source.detail(first.id)?.tokenizer, join(root, 'p', 'default', 'grpo', 'final_model'));
  });
});
