// Resuming from sharded checkpoints reads only what a rank needs (src/rft/trainer/fsdp-resume.ts). In one process: a
// checkpoint written by 2 ranks (two FullyShardedModels of the same weights and AdamW state, one per rank), and one
// process's optimizer file of the same state. Each rank that resumes gets the shards and AdamW state a rank of its
// world size holds when it loads the whole state (ShardedAdamW.loadStateDict, the reference), and reads exactly: the
// headers of the files its range touches, plus its range of the weights and both moments, plus one step count per
// class (2 → 2, 2 → 3, 2 → 1 with every class whole, 1 → 2 from the optimizer file: moments only). The ranks of a
// world read every byte of the state once between them (their ranges partition each class); the padding is never
// read; a file no rank needs may be absent (rank 0 of 2 resumes without rank 1's). The multi-rank runs that resume
// and equal an uninterrupted run are test/rft/trainer/fsdp.test.ts.
import assert from 'node:assert/strict';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { CausalLM, initModel } from '../../../src/model/index.js';
import { FullyShardedModel, ownRange } from '../../../src/rft/trainer/fsdp.js';
import { writeRankShards } from '../../../src/rft/trainer/fsdp-checkpoint.js';
import { ShardedAdamW } from '../../../src/rft/trainer/fsdp-optimizer.js';
import { CheckpointReads, readShardedCheckpoint, resumeShardedPolicy } from '../../../src/rft/trainer/fsdp-resume.js';
import { rankFile } from '../../../src/rft/trainer/fsdp-shard-files.js';
import * as torch from '../../../src/torch/index.js';

let dir: string;
let modelDir: string;
/** One process's AdamW state after two steps, and its weights. */
let saved: torch.OptimizerState;
let stepped: CausalLM;
const WEIGHT_DECAY = 0.1;

before(() => {
  dir = mkdtempSync(join(tmpdir(), 'trinity-fsdp-resume-'));
  modelDir = join(dir, 'model');
  initModel(modelDir, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, seed: 3 });
  stepped = CausalLM.load(modelDir, { requiresGrad: true });
  const named = stepped.parameters();
  const adamW = new torch.AdamW(torch.weightDecayGroups(named, WEIGHT_DECAY), { lr: 1e-2 });
  for (let step = 0; step < 2; step++) {
    torch.noGrad(() => {
      [...named.values()].forEach((p, i) => {
        p.grad = torch.randn(p.shape).mul_(0.01 * (i + 1));
      });
    });
    adamW.step();
    adamW.zeroGrad();
  }
  const state = adamW.stateDict(); // the optimizer's own tensors: copies outlive it
  saved = { ...state, tensors: Object.fromEntries(Object.entries(state.tensors).map(([k, t]) => [k, torch.keep(t.clone())])) };
  adamW.dispose();
  // the checkpoint of 2 ranks, and one process's optimizer file
  for (let rank = 0; rank < 2; rank++) {
    const { sharded, optimizer } = shardedRank(rank, 2, stepped.parameters());
    writeRankShards(sharded, optimizer, join(dir, 'sharded'));
    optimizer.dispose();
    sharded.dispose();
  }
  torch.saveSafetensors(join(dir, 'optimizer.safetensors'), saved.tensors);
});
after(() => {
  stepped.dispose();
  rmSync(dir, { recursive: true, force: true });
});

/** Rank `rank` of `worldSize` over `weights` (the model folder's when absent), with `saved` loaded whole when given. */
function shardedRank(rank: number, worldSize: number, weights?: Map<string, torch.Tensor>) {
  const model = CausalLM.load(modelDir, { requiresGrad: true });
  const sharded = new FullyShardedModel(model, weights ?? model.parameters(), { rank, worldSize, computeDtype: 'float32' });
  const optimizer = new ShardedAdamW(sharded, { lr: 1e-2, weightDecay: WEIGHT_DECAY });
  if (weights !== undefined) optimizer.loadStateDict(saved);
  return { model, sharded, optimizer };
}

const values = (t: torch.Tensor) => [...(t.toTypedArray() as Float32Array)];
const headerBytes = (file: string) => torch.readSafetensorsHeader(file).headerBytes;
const STEP_BYTES = 4; // AdamW's step count: a float32 scalar

/** Rank `rank` of `worldSize` resumed from the checkpoint (sharded or one process's); returns the bytes it read. */
function resumeRank(rank: number, worldSize: number, from: 'sharded' | 'one process'): number {
  const resumed = shardedRank(rank, worldSize);
  const expected = shardedRank(rank, worldSize, stepped.parameters());
  const reads = new CheckpointReads();
  try {
    const checkpoint = {
      dir,
      shardedDir: from === 'sharded' ? join(dir, 'sharded') : null,
      state: { optimizer: { kind: saved.kind, groups: saved.groups } },
    };
    resumeShardedPolicy(checkpoint, resumed, reads);
    const classes = resumed.sharded.units.flatMap((u) => u.classes);
    const reference = expected.sharded.units.flatMap((u) => u.classes);
    let payload = 0;
    for (const [i, c] of classes.entries()) {
      const e = reference[i] as (typeof classes)[number];
      const where = `${from} → rank ${rank} of ${worldSize}, class ${i}`;
      // one process's weights are its model folder, which the rank was built from (here the initial weights)
      if (from === 'sharded') assert.deepEqual(values(c.shard), values(e.shard), `${where}: shard`);
      const [got, want] = [resumed.optimizer.classState(c), expected.optimizer.classState(e)];
      for (const part of ['exp_avg', 'exp_avg_sq', 'step'] as const)
        assert.deepEqual(values(got?.[part] as torch.Tensor), values(want?.[part] as torch.Tensor), `${where}: ${part}`);
      const { count } = ownRange(c, rank);
      payload += count * 4 * (from === 'sharded' ? 3 : 2) + STEP_BYTES; // weights (sharded) and moments, float32
    }
    // the headers of the files the rank's ranges fall in
    const files =
      from === 'one process'
        ? [join(dir, 'optimizer.safetensors')]
        : [0, 1].filter((r) => overlaps(classes, rank, r)).map((r) => join(dir, 'sharded', rankFile(r, 2)));
    assert.equal(reads.bytes, files.reduce((n, f) => n + headerBytes(f), 0) + payload, `${from} → rank ${rank} of ${worldSize}`);
    return reads.bytes;
  } finally {
    for (const r of [resumed, expected]) {
      r.optimizer.dispose();
      r.sharded.dispose();
      r.model.dispose();
    }
  }
}

/** Whether rank `rank`'s range of any class overlaps what saved rank `saved` of 2 wrote. */
function overlaps(classes: { total: number; shardLength: number }[], rank: number, saved: number): boolean {
  return classes.some((c) => {
    const { from, count } = ownRange(c, rank);
    const savedLength = Math.ceil(c.total / 2);
    return count > 0 && from < (saved + 1) * savedLength && from + count > saved * savedLength;
  });
}

const fileBytes = (r: number) => statSync(join(dir, 'sharded', rankFile(r, 2))).size;

test('2 → 2: each rank reads its own file, its part only', () => {
  for (const rank of [0, 1]) assert.ok(resumeRank(rank, 2, 'sharded') <= fileBytes(rank), `rank ${rank}`);
});

test('2 → 3: each rank reads the ranges of the files its part falls in; together every byte of the state once', () => {
  const bytes = [0, 1, 2].map((rank) => resumeRank(rank, 3, 'sharded'));
  assert.ok(Math.max(...bytes) < fileBytes(0), `each of 3 ranks reads less than one of the 2 files: ${bytes.join(', ')}`);
});

test('1 → 2: each rank reads its part of the moments of one process optimizer file', () => {
  const whole = statSync(join(dir, 'optimizer.safetensors')).size;
  for (const rank of [0, 1]) assert.ok(resumeRank(rank, 2, 'one process') < whole * 0.6, `rank ${rank}`);
});

test('2 → 1: the whole state, read without the padding; equal to one process state', () => {
  const reads = new CheckpointReads();
  const { weights, optimizer } = readShardedCheckpoint(join(dir, 'sharded'), reads);
  try {
    const params = stepped.parameters();
    let payload = 0;
    for (const [name, t] of weights) {
      assert.deepEqual(values(t), values(params.get(name) as torch.Tensor), name);
      payload += t.numel * 4 * 3; // the weights and two moments
    }
    for (const [key, t] of Object.entries(saved.tensors))
      assert.deepEqual(values(optimizer.tensors[key] as torch.Tensor), values(t), key);
    const { sharded } = shardedRank(0, 2);
    const classes = sharded.units.reduce((n, u) => n + u.classes.length, 0);
    sharded.dispose();
    const headers = headerBytes(join(dir, 'sharded', rankFile(0, 2))) + headerBytes(join(dir, 'sharded', rankFile(1, 2)));
    assert.equal(reads.bytes, headers + payload + classes * STEP_BYTES);
  } finally {
    for (const t of [...weights.values(), ...Object.values(optimizer.tensors)]) t.dispose();
  }
});

test('a rank needs only the files its part is in: without rank 1 file, rank 0 of 2 resumes and rank 1 names the file', () => {
  const partial = join(dir, 'partial');
  mkdirSync(join(partial, 'sharded'), { recursive: true });
  for (const file of ['index.json', rankFile(0, 2)]) copyFileSync(join(dir, 'sharded', file), join(partial, 'sharded', file));
  const resume = (rank: number) => {
    const { model, sharded, optimizer } = shardedRank(rank, 2);
    try {
      const checkpoint = { dir: partial, shardedDir: join(partial, 'sharded'), state: {} };
      resumeShardedPolicy(checkpoint, { sharded, optimizer }, new CheckpointReads());
    } finally {
      optimizer.dispose();
      sharded.dispose();
      model.dispose();
    }
  };
  resume(0);
  assert.throws(
    () => resume(1),
    /partial\/sharded\/rank-1-of-2\.safetensors: missing \(the index says 2 ranks wrote this checkpoint\)/,
  );
});

test("a checkpoint of another model's layout is refused, naming the class", () => {
  const other = join(dir, 'other');
  initModel(other, { hiddenSize: 32, numLayers: 2, numHeads: 2, numKeyValueHeads: 1, intermediateSize: 48, seed: 3 });
  const model = CausalLM.load(other, { requiresGrad: true });
  const sharded = new FullyShardedModel(model, model.parameters(), { rank: 0, worldSize: 2, computeDtype: 'float32' });
  const optimizer = new ShardedAdamW(sharded, { lr: 1e-2, weightDecay: WEIGHT_DECAY });
  try {
    assert.throws(
      () =>
        resumeShardedPolicy({ dir, shardedDir: join(dir, 'sharded'), state: {} }, { sharded, optimizer }, new CheckpointReads()),
      /sharded: the checkpoint's unit\.\w+\.decay does not hold this model's parameters .*another model's checkpoint\?/,
    );
  } finally {
    optimizer.dispose();
    sharded.dispose();
    model.dispose();
  }
});
