// A vision-language policy (a tiny random Qwen2.5-VL, src/rft/trainer/vision-rows.ts) under data parallelism: 2 Gloo
// ranks, each a forked process running ./helpers/strategy-rank.ts (./helpers/rank-harness.ts forkRanks), take 3 GRPO
// steps (k3 KL loss to the frozen reference, which sees the images too) on the same global batches as one process,
// and must end with the same parameters, vision tower included (float32, within 1e-5):
//   - ddp: every rank holds the whole policy and its AdamW state;
//   - ZeRO-1 (trainer.zero_stage 1): the AdamW state of the whole model, vision tower included, sharded; rank 0's
//     weights folder is a Qwen2.5-VL folder holding the trained vision tower.
// The batch mixes rows with one and two images of different sizes with text rows; micro-batches of 2 rows over the
// ranks, rotated each step, so a rank's micro-batches hold different images (or none) than the other's and the vision
// tower's gradient is the sum over the ranks. Fully sharded training stays refused, naming why.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { freePort } from '../../../src/cli/launch.js';
import { encodePng, imageDataUrl, initVisionLanguageModel } from '../../../src/model/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';
import { killForkedChildren } from '../../helpers/forked-child.js';
import { RANK_TIMEOUT_MS, type Scenario, scenarioInit } from './helpers/distributed-scenarios.js';
import { forkRanks, largestDifference, rotatedSteps, safetensorsFile, weightsOf } from './helpers/rank-harness.js';
import type { StrategyPlan } from './helpers/strategy-rank.js';

const STRATEGY_RANK = fileURLToPath(new URL('./helpers/strategy-rank.ts', import.meta.url));

let work = '';
let modelDir = '';
let rows: Experience[] = [];

/** A random RGB image of `height` x `width` as a PNG data URL. */
async function randomImage(height: number, width: number, seed: number): Promise<string> {
  const data = new Uint8Array(height * width * 3).map((_, i) => (i * 7919 + seed * 104729) % 251);
  return imageDataUrl(await encodePng({ data, height, width, channels: 3 }), 'test image');
}

before(async () => {
  work = mkdtempSync(join(tmpdir(), 'trinity-vl-dp-'));
  modelDir = join(work, 'model');
  const raw = initVisionLanguageModel(modelDir, { seed: 3, minPixels: 56 * 56, maxPixels: 56 * 84 });
  const token = (key: string) => raw[key] as number;
  const [start, end, pad] = [token('vision_start_token_id'), token('vision_end_token_id'), token('image_token_id')];
  // 56 x 56 → a 4 x 4 patch grid → 4 image tokens; 56 x 84 → 4 x 6 → 6
  const image = (tokens: number) => [start, ...Array.from({ length: tokens }, () => pad), end];
  const [small, wide, other] = [await randomImage(56, 56, 1), await randomImage(56, 84, 2), await randomImage(56, 56, 3)];
  // four tasks of two rollouts (GRPO groups): one image, two images, text only, the other image
  const tasks: { prompt: number[]; images: string[] }[] = [
    { prompt: [5, ...image(4), 9, 10], images: [small] },
    { prompt: [5, ...image(6), 9, ...image(4)], images: [wide, other] },
    { prompt: [5, 8, 9, 10], images: [] },
    { prompt: [6, ...image(4), 7], images: [other] },
  ];
  rows = tasks.flatMap(({ prompt, images }, task) =>
    [
      [11 + task, 12, 2],
      [13, 14 + task],
    ].map((response, run) => ({
      eid: `t${task}-r${run}`,
      tokens: [...prompt, ...response],
      promptLength: prompt.length,
      actionMask: response.map(() => 1),
      reward: run === 0 ? 1 : task / 8,
      info: { taskId: `t${task}`, runId: run },
      ...(images.length > 0 ? { images } : {}),
    })),
  );
});
after(() => {
  killForkedChildren();
  rmSync(work, { recursive: true, force: true });
});

// lr 1e-3: at 1e-2 one process alone ends 6e-5 apart from itself when only its micro-batching changes (2 rows vs 8,
// the same sums in another order; Adam amplifies the rounding), so 1e-5 would measure that, not the ranks; at 1e-3
// that is 6e-6 and the vision tower still moves by about 3e-3.
const GRPO = { algorithm_type: 'grpo', kl_loss_fn: 'k3', kl_loss_fn_args: { kl_coef: 0.1 }, optimizer: { lr: 1e-3 } };

/** The initial weights of the model folder, as float arrays by name. */
function initialWeights(): Map<string, Float32Array> {
  const weights = torch.loadModelWeights(modelDir);
  try {
    return new Map([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
  } finally {
    for (const t of weights.values()) t.dispose();
  }
}

/** The largest change of the vision tower's weights (`visual.*`) from `before` to `after`. */
function visionTowerMoved(after: ReadonlyMap<string, Float32Array>, before: ReadonlyMap<string, Float32Array>): number {
  const tower = (m: ReadonlyMap<string, Float32Array>) => new Map([...m].filter(([name]) => name.startsWith('visual.')));
  return largestDifference(tower(after), tower(before), 'the vision tower');
}

for (const strategy of ['ddp', 'zero1'] as const) {
  test(`${strategy}: 2 ranks end 3 GRPO steps over image and text rows with the weights of one process, vision tower included`, async () => {
    const scenario: Scenario = {
      name: `vl-grpo-${strategy}`,
      algorithm: GRPO,
      lora: null,
      microBatchSize: 2,
      batches: rotatedSteps(rows, 3),
    };
    const plan: StrategyPlan = {
      strategy,
      jobDir: work,
      scenarios: [{ ...scenario, port: await freePort(), modelDir, save: strategy === 'zero1' }],
    };
    const ranks = forkRanks(STRATEGY_RANK, plan, 2, work, { label: strategy });
    const [result, followed] = await Promise.all([ranks[0]?.next('result', 'error'), ranks[1]?.next('followed', 'error')]);
    assert.equal(result?.type, 'result', `rank 0: ${result?.message}`);
    assert.equal(followed?.type, 'followed', `rank 1: ${followed?.message}`);
    assert.equal(followed?.steps, 3);

    const { trainer } = await TrainerClient.start(scenarioInit(scenario, modelDir, join(work, `${scenario.name}-single`)));
    let single: Map<string, Float32Array>;
    try {
      for (const batch of scenario.batches) await trainer.step(batch);
      single = await weightsOf(trainer);
    } finally {
      await trainer.close();
    }
    const ranked = new Map(Object.entries(result?.weights ?? {}));
    const moved = visionTowerMoved(single, initialWeights());
    assert.ok(moved > 1e-3, `the vision tower barely moved (${moved}); the comparison would prove nothing`);
    const diff = largestDifference(ranked, single, scenario.name);
    assert.ok(diff <= 1e-5, `${strategy}: 2 ranks and 1 process differ by ${diff} after 3 steps`);
    if (strategy === 'zero1') {
      const exported = safetensorsFile(join(result?.exported as string, 'model.safetensors'));
      const folderDiff = largestDifference(exported, ranked, 'the weights folder');
      assert.ok(folderDiff === 0, `rank 0's weights folder differs from its weights by ${folderDiff}`);
    }
    const exits = await Promise.all(ranks.map((r) => r.exited));
    assert.deepEqual(
      exits.map((e) => e.code),
      [0, 0],
    );
  });
}

test('fully sharded training of a vision-language policy is refused at init, naming the strategy and why', async () => {
  const scenario: Scenario = { name: 'vl-fsdp', algorithm: GRPO, lora: null, microBatchSize: 2, batches: [] };
  const distributed = {
    rank: 0,
    worldSize: 2,
    masterAddr: '127.0.0.1',
    masterPort: await freePort(),
    timeoutMs: RANK_TIMEOUT_MS,
    strategy: 'fsdp' as const,
  };
  await assert.rejects(
    TrainerClient.start({
      ...scenarioInit(scenario, modelDir, join(work, 'fsdp'), distributed),
      gradientCheckpointing: true,
    }),
    /a vision-language policy \(qwen2_5_vl, qwen3_vl\) does not support fully sharded training \(trainer\.trainer_strategy fsdp over 2 ranks: its units are the language model's layers, the vision tower is none; data parallelism, ZeRO-1 included, trains it\) yet/,
  );
});
