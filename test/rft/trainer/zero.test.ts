// ZeRO-1 (trainer.zero_stage 1, src/rft/trainer/zero.ts): 2 Gloo ranks, each a forked process running
// ./helpers/strategy-rank.ts (forked by ./helpers/rank-harness.ts), take 3 steps on the same global batches as one process without it (TrainerClient in this
// process), and must end with the same parameters (float32, within 1e-5):
//   - SFT with micro_batch_size 1 (gradient accumulation over 2 micro-batches per rank);
//   - GRPO with micro_batch_size 3 (micro-batches of 3, 3, 2 rows over the 2 ranks).
// Each rank holds AdamW moments for its half of the flattened parameters only: 2·N/2 moment elements plus a step
// count per parameter piece (N: the parameters' elements), against 2·N plus one per parameter in one process.
// The checkpoint rank 0 writes after step 3 holds the same optimizer file as one process writes (the gathered state
// equals one process's within 1e-5), and one process resuming from it takes step 4 to the parameters of an
// uninterrupted single-process run (resume with a different number of ranks).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { freePort } from '../../../src/cli/launch.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import { shardBounds } from '../../../src/rft/trainer/zero.js';
import { killForkedChildren } from '../../helpers/forked-child.js';
import { type Scenario, scenarioInit } from './helpers/distributed-scenarios.js';
import { forkRanks, groupRollouts, largestDifference, rotatedSteps, safetensorsFile, weightsOf } from './helpers/rank-harness.js';
import type { StrategyPlan } from './helpers/strategy-rank.js';
import { expertData, loadPolicy, tinyModelDir } from './toy.js';

const STRATEGY_RANK = fileURLToPath(new URL('./helpers/strategy-rank.ts', import.meta.url));

interface Elements {
  local: number;
  parameters: number;
}

let toy: { dir: string; remove: () => void };
let work: string;
before(() => {
  toy = tinyModelDir();
  work = mkdtempSync(join(tmpdir(), 'trinity-zero-'));
});
after(() => {
  killForkedChildren();
  toy.remove();
  rmSync(work, { recursive: true, force: true });
});

/** optimizer.safetensors of a checkpoint folder, as float arrays (AdamW's moments and step counts). */
const optimizerFile = (dir: string) => safetensorsFile(join(dir, 'optimizer.safetensors'));

test('ZeRO-1 on 2 ranks: SFT and GRPO end 3 steps as one process does, each rank holding half the AdamW state; the checkpoint resumes on one process', async () => {
  const rows = { sft: expertData(), grpo: groupRollouts(toy.dir) };
  const all: (Scenario & { resumeBatch: Experience[] })[] = (['sft', 'grpo'] as const).map((name) => {
    const batches = rotatedSteps(rows[name], 4);
    return {
      name,
      algorithm: { algorithm_type: name, optimizer: { lr: 1e-2 } },
      lora: null,
      microBatchSize: name === 'sft' ? 1 : 3,
      batches: batches.slice(0, 3),
      resumeBatch: batches[3] as Experience[],
    };
  });
  const plan: StrategyPlan = {
    strategy: 'zero1',
    jobDir: work,
    scenarios: await Promise.all(
      all.map(async ({ resumeBatch: _, ...s }) => ({ ...s, port: await freePort(), modelDir: toy.dir })),
    ),
  };
  const ranks = forkRanks(STRATEGY_RANK, plan, 2, work);
  for (const scenario of all) {
    const [result, followed] = await Promise.all([ranks[0]?.next('result', 'error'), ranks[1]?.next('followed', 'error')]);
    assert.equal(result?.type, 'result', `${scenario.name}, rank 0: ${result?.message}`);
    assert.equal(followed?.type, 'followed', `${scenario.name}, rank 1: ${followed?.message}`);
    assert.equal(followed?.steps, 3);

    // one process, no ZeRO: 3 steps, a checkpoint, then the 4th step
    const singleDir = join(work, `${scenario.name}-single`);
    const { trainer: single } = await TrainerClient.start(scenarioInit(scenario, toy.dir, singleDir));
    let singleCheckpoint: string;
    let singleElements: Elements;
    let afterThree: Map<string, Float32Array>;
    let afterFour: Map<string, Float32Array>;
    try {
      for (const batch of scenario.batches) await single.step(batch);
      singleCheckpoint = await single.save(3, {}, 0);
      singleElements = await single.optimizerStateElements();
      afterThree = await weightsOf(single);
      await single.step(scenario.resumeBatch);
      afterFour = await weightsOf(single);
    } finally {
      await single.close();
    }

    const zeroWeights = new Map(Object.entries(result?.weights ?? {}));
    const moved = largestDifference(afterThree, await initialWeights(), `${scenario.name}: moved`);
    assert.ok(moved > 1e-3, `${scenario.name}: training barely moved the weights (${moved}); the comparison would prove nothing`);
    const diff = largestDifference(zeroWeights, afterThree, scenario.name);
    assert.ok(diff <= 1e-5, `${scenario.name}: ZeRO-1 on 2 ranks and 1 process differ by ${diff} after 3 steps`);

    // state sizes: one process holds 2N moments + a step count per parameter; rank r 2·|shard r| + one per piece
    const n = singleElements.parameters;
    const params = afterThree.size;
    assert.equal(singleElements.local, 2 * n + params, `${scenario.name}: one process's AdamW state`);
    const zero = [result?.elements as Elements, followed?.elements as Elements];
    zero.forEach((e, r) => {
      assert.equal(e.parameters, n);
      const { start, end } = shardBounds(n, r, 2);
      const moments = 2 * (end - start);
      // the step counts: one per parameter that reaches into the shard (at most all of them, at least one)
      assert.ok(
        e.local > moments && e.local <= moments + params,
        `${scenario.name}: rank ${r} holds ${e.local} state elements; its shard's moments are ${moments}`,
      );
      assert.ok(
        Math.abs(e.local / singleElements.local - 0.5) < 0.02,
        `${scenario.name}: rank ${r} holds ${e.local} of ${singleElements.local}`,
      );
    });
    // the two ranks' step counts: every parameter once, and the one that straddles the boundary (if any) twice
    const steps = zero.reduce((s, e) => s + e.local, 0) - 2 * n;
    assert.ok(
      steps === params || steps === params + 1,
      `${scenario.name}: ${steps} step counts over the ranks for ${params} parameters`,
    );

    // the checkpoint: the same optimizer file as one process writes
    const gathered = optimizerFile(result?.checkpoint as string);
    const reference = optimizerFile(singleCheckpoint);
    const stateDiff = largestDifference(gathered, reference, `${scenario.name}: optimizer.safetensors`);
    assert.ok(stateDiff <= 1e-5, `${scenario.name}: the gathered optimizer state differs from one process's by ${stateDiff}`);

    // resume the 2-rank ZeRO checkpoint on one process: step 4 as the uninterrupted run
    const resumed = await TrainerClient.start({
      ...scenarioInit(scenario, toy.dir, join(work, `${scenario.name}-zero1-rank0`)),
      resume: true,
    });
    try {
      assert.equal(resumed.start.step, 3);
      await resumed.trainer.step(scenario.resumeBatch);
      const resumedDiff = largestDifference(await weightsOf(resumed.trainer), afterFour, `${scenario.name}: step 4`);
      assert.ok(resumedDiff <= 1e-5, `${scenario.name}: resumed on 1 process, step 4 differs by ${resumedDiff}`);
    } finally {
      await resumed.trainer.close();
    }
  }
  const exits = await Promise.all(ranks.map((r) => r.exited));
  assert.deepEqual(
    exits.map((e) => e.code),
    [0, 0],
  );
});

async function initialWeights(): Promise<Map<string, Float32Array>> {
  const model = loadPolicy(toy.dir);
  try {
    return new Map([...model.parameters()].map(([n, t]) => [n, t.toTypedArray() as Float32Array]));
  } finally {
    model.dispose();
  }
}
