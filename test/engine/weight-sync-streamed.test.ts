// Streamed folder syncs (explorer.rollout_model.weight_sync_buffer_size): the weights a folder holds reach the model
// a bucket at a time, with the same result as a whole load, and a folder the headers already show to be wrong is
// refused before any tensor is written. Models are small random ones (initModel), untied and sharded so that buckets
// cross files.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { RolloutEngine, WorkerRolloutEngine } from '../../src/engine/index.js';
import { planWeightBuckets, syncModelWeightsFromDir, syncModelWeightsFromDirStreamed } from '../../src/engine/weight-sync.js';
import { CausalLM } from '../../src/model/index.js';
import { initModel } from '../../src/model/init.js';
import * as torch from '../../src/torch/index.js';

const root = mkdtempSync(join(tmpdir(), 'weight-sync-streamed-'));
const shape = { architecture: 'qwen2' as const, hiddenSize: 32, numLayers: 2, numHeads: 2, tieWordEmbeddings: false };
const baseDir = join(root, 'base');
initModel(baseDir, { ...shape, seed: 1 });
// the "trained" weights, saved in 3 KB shards so that the tensors span several files
const trainedDir = join(root, 'trained');
initModel(join(root, 'trained-src'), { ...shape, seed: 2 });
const trainedSource = CausalLM.load(join(root, 'trained-src'));
trainedSource.save(trainedDir, { maxShardBytes: 3 * 1024 });
const models: CausalLM[] = [trainedSource];
after(() => {
  for (const m of models) m.dispose();
});

const load = (dir: string) => {
  const model = CausalLM.load(dir);
  models.push(model);
  return model;
};

function assertSameParameters(a: CausalLM, b: CausalLM): void {
  const bs = b.parameters();
  for (const [name, t] of a.parameters()) {
    const other = bs.get(name) as torch.Tensor;
    assert.ok(
      torch.scope(() => t.eq(other).all().item() === 1),
      `${name} differs`,
    );
  }
}

test('planWeightBuckets: consecutive tensors up to the buffer; a larger tensor alone', () => {
  const bytes: Record<string, number> = { a: 4, b: 4, c: 10, d: 1, e: 2, f: 3 };
  assert.deepEqual(
    planWeightBuckets(Object.keys(bytes), (n) => bytes[n] as number, 8),
    [['a', 'b'], ['c'], ['d', 'e', 'f']],
  );
  assert.deepEqual(
    planWeightBuckets(['a', 'b'], (n) => bytes[n] as number, 100),
    [['a', 'b']],
  );
  assert.deepEqual(
    planWeightBuckets([], () => 1, 8),
    [],
  );
});

test('a streamed sync equals a whole one, bit for bit, holding at most one bucket (or one tensor) at a time', () => {
  const whole = load(baseDir);
  syncModelWeightsFromDir(whole, trainedDir);
  assertSameParameters(whole, trainedSource);
  let largestTensor = 0;
  let total = 0;
  for (const t of trainedSource.parameters().values()) {
    largestTensor = Math.max(largestTensor, t.numel * 4);
    total += t.numel * 4;
  }
  for (const bufferBytes of [1, 2048, 16 * 1024 * 1024]) {
    const streamed = load(baseDir);
    const { copied, largestBucketBytes } = syncModelWeightsFromDirStreamed(streamed, trainedDir, bufferBytes);
    assert.equal(copied, trainedSource.parameters().size);
    assertSameParameters(streamed, trainedSource);
    assert.ok(largestBucketBytes <= Math.max(bufferBytes, largestTensor), `${bufferBytes}: bucket ${largestBucketBytes}`);
    if (bufferBytes >= total) assert.equal(largestBucketBytes, total); // everything in one bucket
  }
});

test('a streamed sync refuses what the headers show before writing any tensor', () => {
  // a model of another shape: every tensor is there, but the shapes differ
  const otherDir = join(root, 'other');
  initModel(otherDir, { ...shape, hiddenSize: 48, seed: 3 });
  const model = load(baseDir);
  const before = load(baseDir);
  assert.throws(() => syncModelWeightsFromDirStreamed(model, otherDir, 1), /shape/);
  assertSameParameters(model, before);
});

test('RolloutEngine.syncWeightsFromDir streams with a bucket size; a worker engine takes it as weightSyncBufferBytes', async () => {
  const engine = RolloutEngine.load(baseDir, { slots: 1 });
  try {
    assert.equal(engine.syncWeightsFromDir(trainedDir, 1024), trainedSource.parameters().size);
    assertSameParameters(engine.model, trainedSource);
    assert.throws(() => engine.syncWeightsFromDir(trainedDir, 0), /bucket size must be a positive integer/);
  } finally {
    await engine.close();
  }
  const worker = await WorkerRolloutEngine.start(baseDir, { slots: 1, weightSyncBufferBytes: 1024 });
  try {
    assert.equal(await worker.syncWeightsFromDir(trainedDir), trainedSource.parameters().size);
  } finally {
    await worker.close();
  }
  await assert.rejects(
    WorkerRolloutEngine.start(baseDir, { slots: 1, weightSyncBufferBytes: 0 }),
    /weightSyncBufferBytes must be a positive integer, got 0/,
  );
});
