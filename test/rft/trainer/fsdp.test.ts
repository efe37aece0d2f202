// Fully sharded data parallelism (trainer.trainer_strategy fsdp, src/rft/trainer/fsdp.ts), on Gloo ranks that are
// forked processes running ./helpers/fsdp-rank.ts, on a tiny qwen2 of 3 decoder layers (float32):
//   - 2 ranks take 3 steps on the same global batches as one process without sharding and end with the same
//     parameters (within 1e-5): SFT with micro_batch_size 1 (2 micro-batches per rank; its rows have no rollout
//     log-probs, so the step runs the current policy over the batch first, without gradient), GRPO with
//     micro_batch_size 2 (3 micro-batches: rank 1 runs an idle pass beside rank 0's second);
//   - each rank holds half the parameters, gradients and AdamW state (up to the padding of each flat class), and
//     gathered at most the root and two layers at once (prefetch), in the whole-batch forwards without gradient
//     too (one layer gathered, run for the rank's rows, freed: the model has 3);
//   - GRPO with LoRA (dropout 0.1, micro_batch_size 2): the frozen base sharded (no gradient shards), the adapters
//     replicated; its reference is the base (adapters off), run over the batch for the reference log-probs;
//   - saveWeights writes the whole model (one process's model.safetensors, within 1e-5: the export stays whole);
//   - the checkpoint is sharded: sharded/ holds each rank's file and the index, no model/ or optimizer.safetensors;
//     read back whole it is one process's weights and optimizer file (within 1e-5); resumed on one process (2 → 1),
//     on 2 ranks again (2 → 2), and a one-process checkpoint resumed on 2 ranks (1 → 2), step 4 takes the
//     parameters of an uninterrupted one-process run (within 1e-5). (LoRA: rank 0 writes the adapter, 2 → 1.) Each
//     rank reads only its part (TrainerStart.checkpointBytesRead): 2 → 2 at most its own file, 1 → 2 at most 60% of
//     the optimizer file (half its moments and the header); the exact bytes are fsdp-resume.test.ts's. Every start
//     reads at most the header and half the weights (one padding element a class) of its model folder
//     (TrainerStart.modelBytesRead: the base, or 1 → 2 the checkpoint's model/; 2 → 2 its header only); the exact
//     bytes are fsdp-load.test.ts's.
// And a model whose whole training state (parameters, gradients, AdamW moments) is more than twice a per-rank bound
// trains on 4 ranks (GRPO, 6 rows in micro-batches of 1: ranks 2 and 3 run an idle pass each), each within the bound:
// 1/4 of the state plus its padding plus the gather buffers it measured. Then SFT on 3 rows: rank 3 has no row of the
// current policy's forward and joins its layer gathers without computing; the 4 ranks end as one process does.
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { freePort } from '../../../src/cli/launch.js';
import { initModel } from '../../../src/model/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { readShardedCheckpoint } from '../../../src/rft/trainer/fsdp-resume.js';
import { type ShardedStateBytes, TrainerClient } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';
import { killForkedChildren } from '../../helpers/forked-child.js';
import { type Scenario, scenarioInit } from './helpers/distributed-scenarios.js';
import { forkRanks, groupRollouts, largestDifference, rotatedSteps, safetensorsFile, weightsOf } from './helpers/rank-harness.js';
import type { StrategyPlan } from './helpers/strategy-rank.js';
import { expertData } from './toy.js';

const STRATEGY_RANK = fileURLToPath(new URL('./helpers/strategy-rank.ts', import.meta.url));

let work: string;
let threeLayers: string;
before(() => {
  work = mkdtempSync(join(tmpdir(), 'trinity-fsdp-'));
  threeLayers = join(work, 'model-3-layers');
  initModel(threeLayers, { hiddenSize: 32, numLayers: 3, numHeads: 2, numKeyValueHeads: 1, seed: 3 });
});
after(() => {
  killForkedChildren();
  rmSync(work, { recursive: true, force: true });
});

/** Forks `worldSize` ranks of ./helpers/strategy-rank.ts, fully sharded, over `scenarios`. */
const forkFsdpRanks = (scenarios: StrategyPlan['scenarios'], worldSize: number, label?: string) =>
  forkRanks(STRATEGY_RANK, { strategy: 'fsdp', jobDir: work, scenarios }, worldSize, work, label ? { label } : {});

/** The files' sizes added. */
const fileBytes = (files: string[]) => files.reduce((n, f) => n + statSync(f).size, 0);

/**
 * The most a rank of `worldSize` reads of model file `file` at start: its header, 1/W of its weight bytes and, in
 * each of `classes` flat classes, one element more (a range is ⌈n / W⌉ elements), float32.
 */
function startReadBound(file: string, worldSize: number, classes: number): number {
  const header = torch.readSafetensorsHeader(file).headerBytes;
  return header + (statSync(file).size - header) / worldSize + 4 * classes;
}

/** The float32 elements a rank's flat classes pad with, at most: W - 1 per class, in bytes. */
const paddingBytes = (bytes: ShardedStateBytes, worldSize: number) => bytes.classes * (worldSize - 1) * 4;

test('fsdp on 2 ranks: SFT, GRPO and GRPO with LoRA end 3 steps as one process does, each rank holding half the state; the sharded checkpoint resumes on 1 and 2 ranks, a one-process one on 2', async () => {
  const rows = { sft: expertData(), grpo: groupRollouts(threeLayers) };
  const lora = { rank: 4, alpha: 8, dropout: 0.1, targetModules: ['q_proj', 'v_proj', 'down_proj'] };
  const all: (Scenario & { resumeBatch: Experience[] })[] = (['sft', 'grpo', 'grpo-lora'] as const).map((name) => {
    const batches = rotatedSteps(rows[name === 'sft' ? 'sft' : 'grpo'], 4);
    return {
      name,
      algorithm: { algorithm_type: name === 'sft' ? 'sft' : 'grpo', optimizer: { lr: name === 'grpo-lora' ? 5e-2 : 1e-2 } },
      lora: name === 'grpo-lora' ? lora : null,
      microBatchSize: name === 'sft' ? 1 : 2,
      batches: batches.slice(0, 3),
      resumeBatch: batches[3] as Experience[],
    };
  });
  const ranks = forkFsdpRanks(
    await Promise.all(all.map(async ({ resumeBatch: _, ...s }) => ({ ...s, port: await freePort(), modelDir: threeLayers }))),
    2,
  );
  /** The one-process run's weights after step 4, by scenario (what every resume must reach). */
  const uninterrupted = new Map<string, Map<string, Float32Array>>();
  /** The checkpoints' files by scenario: the 2 ranks' shard files, one process's optimizer file (for the bytes read). */
  const checkpointFiles = new Map<string, { shards: string[]; optimizer: string }>();
  const single = (scenario: Scenario, jobDir: string, resume = false) =>
    TrainerClient.start({ ...scenarioInit(scenario, threeLayers, jobDir), gradientCheckpointing: true, resume });
  for (const scenario of all) {
    const [result, followed] = await Promise.all([ranks[0]?.next('result', 'error'), ranks[1]?.next('followed', 'error')]);
    assert.equal(result?.type, 'result', `${scenario.name}, rank 0: ${result?.message}`);
    assert.equal(followed?.type, 'followed', `${scenario.name}, rank 1: ${followed?.message}`);
    assert.equal(followed?.steps, 3);

    // one process, not sharded: 3 steps, a checkpoint, then the 4th step
    const { trainer: one } = await single(scenario, join(work, `${scenario.name}-single`));
    let singleCheckpoint: string;
    let afterThree: Map<string, Float32Array>;
    let afterFour: Map<string, Float32Array>;
    try {
      for (const batch of scenario.batches) await one.step(batch);
      singleCheckpoint = await one.save(3, {}, 0);
      afterThree = await weightsOf(one);
      await one.step(scenario.resumeBatch);
      afterFour = await weightsOf(one);
    } finally {
      await one.close();
    }
    const initial = safetensorsFile(join(threeLayers, 'model.safetensors'));
    const moved = largestDifference(afterThree, initial, `${scenario.name}: moved`);
    assert.ok(moved > 1e-3, `${scenario.name}: training barely moved the weights (${moved}); the comparison would prove nothing`);
    const diff = largestDifference(new Map(Object.entries(result?.weights ?? {})), afterThree, scenario.name);
    assert.ok(diff <= 1e-5, `${scenario.name}: fsdp on 2 ranks and 1 process differ by ${diff} after 3 steps`);
    // the weights folder (saveWeights: the export) is consolidated, one process's model.safetensors
    const exported = safetensorsFile(join(result?.exported as string, 'model.safetensors'));
    const exportDiff = largestDifference(exported, afterThree, `${scenario.name}: saveWeights`);
    assert.ok(exportDiff <= 1e-5, `${scenario.name}: the exported weights differ from one process's by ${exportDiff}`);

    // each rank: half of the parameters (float32), of their gradients and of the AdamW moments, up to padding (LoRA:
    // half of the frozen base, no gradients; the adapters' AdamW is replicated)
    for (const bytes of [result?.bytes, followed?.bytes] as ShardedStateBytes[]) {
      const half = bytes.wholeParameters / 2;
      const pad = paddingBytes(bytes, 2);
      assert.ok(bytes.parameters >= half && bytes.parameters <= half + pad, `${scenario.name}: ${bytes.parameters} of ${half}`);
      assert.ok(bytes.gradients <= bytes.parameters, `${scenario.name}: gradients ${bytes.gradients}`);
      const gradientShards = scenario.lora === null ? bytes.parameters : 0;
      assert.ok(bytes.peakGradients === gradientShards, `${scenario.name}: gradient shards ${bytes.peakGradients}`);
      // two moments per element and a float32 step count per shard
      if (scenario.lora === null) assert.equal(bytes.optimizer, 2 * bytes.parameters + 4 * bytes.classes);
      // the root and two layers (one computing, one prefetched) at most, in float32 with padding, also in the forwards
      // over the whole batch (SFT's current log-probs, LoRA's reference log-probs), which gather a layer at a time
      const limit = bytes.largestGather.root + 2 * bytes.largestGather.layer;
      // (rank 1 read its bytes after rank 0's weight sync and checkpoint, which it joined one unit at a time)
      assert.ok(bytes.peakGathered > 0 && bytes.peakGathered <= limit, `${scenario.name}: gathered ${bytes.peakGathered}`);
    }
    // each rank read its half of the model folder only (LoRA: of the frozen base)
    for (const [rank, message] of [result, followed].entries()) {
      const bound = startReadBound(join(threeLayers, 'model.safetensors'), 2, message?.bytes?.classes ?? 0);
      const read = message?.modelBytes ?? 0;
      assert.ok(read > 0 && read <= bound, `${scenario.name}, rank ${rank}: read ${read} bytes of the model, more than ${bound}`);
    }

    // the sharded checkpoint: each rank's file and the index; read back whole, one process's weights and optimizer file
    const checkpoint = result?.checkpoint as string;
    uninterrupted.set(scenario.name, afterFour);
    if (scenario.lora === null) {
      assert.deepEqual(
        readdirSync(checkpoint).filter((f) => ['model', 'optimizer.safetensors', 'sharded'].includes(f)),
        ['sharded'],
      );
      assert.deepEqual(readdirSync(join(checkpoint, 'sharded')).sort(), [
        'index.json',
        'rank-0-of-2.safetensors',
        'rank-1-of-2.safetensors',
      ]);
      const whole = readShardedCheckpoint(join(checkpoint, 'sharded'));
      const arrays = (tensors: Iterable<[string, torch.Tensor]>) =>
        new Map([...tensors].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
      try {
        const reference = safetensorsFile(join(singleCheckpoint, 'optimizer.safetensors'));
        const stateDiff = largestDifference(
          arrays(Object.entries(whole.optimizer.tensors)),
          reference,
          `${scenario.name}: optimizer`,
        );
        assert.ok(stateDiff <= 1e-5, `${scenario.name}: the sharded optimizer state differs from one process's by ${stateDiff}`);
        const weightDiff = largestDifference(arrays(whole.weights), afterThree, `${scenario.name}: sharded weights`);
        assert.ok(weightDiff <= 1e-5, `${scenario.name}: the sharded weights differ from one process's by ${weightDiff}`);
      } finally {
        for (const t of [...whole.weights.values(), ...Object.values(whole.optimizer.tensors)]) t.dispose();
      }
    }

    // resume the 2-rank checkpoint on one process: step 4 as the uninterrupted run
    const resumed = await single(scenario, join(work, `${scenario.name}-fsdp-rank0`), true);
    const shards = [0, 1].map((r) => join(checkpoint, 'sharded', `rank-${r}-of-2.safetensors`));
    checkpointFiles.set(scenario.name, { shards, optimizer: join(singleCheckpoint, 'optimizer.safetensors') });
    try {
      assert.equal(resumed.start.step, 3);
      // one process reads both files, each tensor's range once (the padding of odd classes not at all)
      const bytes = resumed.start.checkpointBytesRead;
      if (scenario.lora === null) assert.ok(bytes > 0 && bytes <= fileBytes(shards), `${scenario.name}: read ${bytes}`);
      await resumed.trainer.step(scenario.resumeBatch);
      const resumedDiff = largestDifference(await weightsOf(resumed.trainer), afterFour, `${scenario.name}: step 4`);
      assert.ok(resumedDiff <= 1e-5, `${scenario.name}: resumed on 1 process, step 4 differs by ${resumedDiff}`);
    } finally {
      await resumed.trainer.close();
    }
  }
  assert.deepEqual(
    (await Promise.all(ranks.map((r) => r.exited))).map((e) => e.code),
    [0, 0],
  );

  // 2 → 2 (the sharded checkpoint) and 1 → 2 (one process's): 2 ranks resume, step 4 as the uninterrupted run
  const resumes = all
    .filter((s) => s.lora === null)
    .flatMap((s) =>
      [`${s.name}-fsdp-rank0`, `${s.name}-single`].map((from) => ({
        ...s,
        name: `${s.name} from ${from}`,
        of: s.name,
        batches: [s.resumeBatch],
        sharedJobDir: join(work, from),
        resume: true,
        save: false,
      })),
    );
  const resumed = forkFsdpRanks(
    await Promise.all(
      resumes.map(async ({ resumeBatch: _, of: __, ...s }) => ({ ...s, port: await freePort(), modelDir: threeLayers })),
    ),
    2,
    'resume',
  );
  for (const scenario of resumes) {
    const [result, followed] = await Promise.all([resumed[0]?.next('result', 'error'), resumed[1]?.next('followed', 'error')]);
    assert.equal(result?.type, 'result', `${scenario.name}, rank 0: ${result?.message}`);
    assert.equal(followed?.type, 'followed', `${scenario.name}, rank 1: ${followed?.message}`);
    const expected = uninterrupted.get(scenario.of) as Map<string, Float32Array>;
    const diff = largestDifference(new Map(Object.entries(result?.weights ?? {})), expected, scenario.name);
    assert.ok(diff <= 1e-5, `${scenario.name}: resumed on 2 ranks, step 4 differs by ${diff}`);
    // each rank read its part only: 2 → 2 its own file's ranges; 1 → 2 half the moments of one process's optimizer file
    const files = checkpointFiles.get(scenario.of) as { shards: string[]; optimizer: string };
    for (const [rank, message] of [result, followed].entries()) {
      const bytes = message?.resumeBytes ?? 0;
      const bound = scenario.sharedJobDir.endsWith('-single')
        ? fileBytes([files.optimizer]) * 0.6
        : fileBytes([files.shards[rank] as string]);
      assert.ok(bytes > 0 && bytes <= bound, `${scenario.name}, rank ${rank}: read ${bytes} bytes, more than ${bound}`);
      // and of the model folder: 1 → 2 its half of the checkpoint's model/; 2 → 2 the base's header only (the
      // checkpoint's shards are the weights)
      const modelBound = scenario.sharedJobDir.endsWith('-single')
        ? startReadBound(join(dirname(files.optimizer), 'model', 'model.safetensors'), 2, message?.bytes?.classes ?? 0)
        : torch.readSafetensorsHeader(join(threeLayers, 'model.safetensors')).headerBytes;
      const modelRead = message?.modelBytes ?? 0;
      assert.ok(modelRead > 0 && modelRead <= modelBound, `${scenario.name}, rank ${rank}: model ${modelRead} > ${modelBound}`);
    }
  }
  assert.deepEqual(
    (await Promise.all(resumed.map((r) => r.exited))).map((e) => e.code),
    [0, 0],
  );
});

test('fsdp on 4 ranks trains a model whose whole training state is over twice the per-rank bound, each rank within it; a rank without rows joins the whole-batch forward', async () => {
  const dir = join(work, 'model-6-layers');
  initModel(dir, { hiddenSize: 64, numLayers: 6, numHeads: 4, numKeyValueHeads: 2, seed: 5 });
  const batches = rotatedSteps(groupRollouts(dir), 4).slice(0, 2);
  const scenario: Scenario = {
    name: 'grpo-4',
    algorithm: { algorithm_type: 'grpo', optimizer: { lr: 1e-2 } },
    lora: null,
    microBatchSize: 1,
    batches,
  };
  // SFT on 3 rows: rank 3 owns none of the batch's rows and joins the current policy's forward without computing
  const fewRows: Scenario = {
    name: 'sft-3-rows',
    algorithm: { algorithm_type: 'sft', optimizer: { lr: 1e-2 } },
    lora: null,
    microBatchSize: 1,
    batches: rotatedSteps(expertData().slice(0, 3), 2),
  };
  const ranks = forkFsdpRanks(
    await Promise.all([scenario, fewRows].map(async (s) => ({ ...s, port: await freePort(), modelDir: dir }))),
    4,
  );
  const messages = await Promise.all(ranks.map((r, rank) => r.next(rank === 0 ? 'result' : 'followed', 'error')));
  for (const [rank, m] of messages.entries()) assert.notEqual(m.type, 'error', `rank ${rank}: ${m.message}`);
  const whole = messages[0]?.bytes?.wholeParameters as number;
  // one process holds the parameters, their gradients and two AdamW moments: 4x the parameters' bytes
  const wholeState = 4 * whole;
  const bound = wholeState / 2;
  for (const [rank, m] of messages.entries()) {
    const b = m.bytes as ShardedStateBytes;
    const resident = b.parameters + b.peakGradients + b.optimizer + b.peakGathered;
    // 1/4 of each of the four, each padded; a step count per class; the root and two layers gathered
    const limit = wholeState / 4 + 4 * paddingBytes(b, 4) + 4 * b.classes + b.largestGather.root + 2 * b.largestGather.layer;
    assert.ok(
      resident <= limit,
      `rank ${rank}: ${resident} bytes resident, over 1/4 of ${wholeState} plus the gathers (${limit})`,
    );
    assert.ok(resident < bound, `rank ${rank}: ${resident} bytes resident; the bound is ${bound} (half of one process's)`);
  }
  const few = await Promise.all(ranks.map((r, rank) => r.next(rank === 0 ? 'result' : 'followed', 'error')));
  for (const [rank, m] of few.entries()) assert.notEqual(m.type, 'error', `${fewRows.name}, rank ${rank}: ${m.message}`);
  const { trainer: one } = await TrainerClient.start({
    ...scenarioInit(fewRows, dir, join(work, `${fewRows.name}-single`)),
    gradientCheckpointing: true,
  });
  try {
    for (const batch of fewRows.batches) await one.step(batch);
    const diff = largestDifference(new Map(Object.entries(few[0]?.weights ?? {})), await weightsOf(one), fewRows.name);
    assert.ok(diff <= 1e-5, `${fewRows.name}: 4 ranks and 1 process differ by ${diff} after 2 steps`);
  } finally {
    await one.close();
  }
  assert.deepEqual(
    (await Promise.all(ranks.map((r) => r.exited))).map((e) => e.code),
    [0, 0, 0, 0],
  );
});
