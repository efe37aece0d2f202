// Mode bench's targets (explorer.bench_on_latest_checkpoint): the base model and every checkpoint, or only the newest.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { benchTargets } from '../../../src/rft/explorer/bench.js';

/** A job folder with checkpoints (state.json + model/) at `steps`, and LoRA-only ones (adapter/) at `adapters`. */
function jobWith(steps: number[], adapters: number[] = []): string {
  const jobDir = mkdtempSync(join(tmpdir(), 'bench-targets-'));
  for (const step of [...steps, ...adapters]) {
    const dir = join(jobDir, 'checkpoints', `global_step_${step}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'state.json'), '{}');
    mkdirSync(join(dir, adapters.includes(step) ? 'adapter' : 'model'));
  }
  return jobDir;
}

test('bench: the base model and every checkpoint with a model, in step order', () => {
  const jobDir = jobWith([4, 2]);
  assert.deepEqual(
    benchTargets(jobDir, false).map((t) => [t.step, t.dir]),
    [
      [0, null],
      [2, join(jobDir, 'checkpoints', 'global_step_2', 'model')],
      [4, join(jobDir, 'checkpoints', 'global_step_4', 'model')],
    ],
  );
});

test('bench_on_latest_checkpoint: only the newest checkpoint; the base model when there is none', () => {
  const jobDir = jobWith([2, 4]);
  assert.deepEqual(
    benchTargets(jobDir, true).map((t) => t.step),
    [4],
  );
  assert.deepEqual(benchTargets(jobWith([]), true), [{ step: 0, dir: null }]);
});

test('a checkpoint holding only a LoRA adapter is an error naming it (the engine loads full models)', () => {
  const jobDir = jobWith([2], [4]);
  assert.throws(() => benchTargets(jobDir, false), /global_step_4 holds a LoRA adapter, not a full model/);
});
