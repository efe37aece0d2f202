// A vision-language policy in the train step (src/rft/trainer/vision-rows.ts): rows whose experiences carry images
// (data URLs) train through the Qwen2.5-VL model's vision tower and M-RoPE. An SFT step's loss and every gradient
// (vision tower included) equal plain autograd through Qwen2_5VLModel.forward row by row (1e-5, float32), with an
// image micro-batch and a text micro-batch; a GRPO step's current-policy and reference forwards see the images (the
// KL to the unchanged reference is 0); both hold for a Qwen3-VL policy too (DeepStack mergers get gradients); bf16
// compute trains float32 master weights of the whole model; an image token sampled in a response is text (the
// prompt's alone are the image's); image rows on a text model and settings not covered are named errors.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import {
  CausalLM,
  encodePng,
  imageDataUrl,
  initModel,
  initVisionLanguageModel,
  LoraModel,
  preprocessImages,
  Qwen2_5VLModel,
  loadVisionImageProcessor,
  loadVisionLanguageModel,
  decodeImage,
  imageTokenCount,
  type VisionLanguageModel,
} from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { frozenModelReference } from '../../../src/rft/trainer/reference-policy.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import { toyTrainerInit } from './toy.js';
import { loadPolicy, TrainerVision, visionOptions, withRowImages } from '../../../src/rft/trainer/vision-rows.js';
import { tokenLogProbs } from '../../../src/model/training.js';
import * as torch from '../../../src/torch/index.js';
import { assertSameGradient, GradientRecorder } from './gradients.js';

let dir = '';
/** The same rows' model as a Qwen3-VL (pixel bounds that give the same image token counts with 32-pixel factors). */
let qwen3Dir = '';
let rows: Experience[] = [];

/** A random RGB image of `height` x `width` as a PNG data URL. */
async function randomImage(height: number, width: number, seed: number): Promise<string> {
  const data = new Uint8Array(height * width * 3).map((_, i) => (i * 7919 + seed * 104729) % 251);
  return imageDataUrl(await encodePng({ data, height, width, channels: 3 }), 'test image');
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'trinity-vl-train-'));
  const raw = initVisionLanguageModel(dir, { seed: 2, minPixels: 56 * 56, maxPixels: 56 * 84 });
  qwen3Dir = join(dir, 'qwen3-vl');
  initVisionLanguageModel(qwen3Dir, { modelType: 'qwen3_vl', seed: 2, minPixels: 64 * 64, maxPixels: 64 * 96 });
  const token = (key: string) => raw[key] as number;
  const [start, end, pad] = [token('vision_start_token_id'), token('vision_end_token_id'), token('image_token_id')];
  // 56 x 56 → a 4 x 4 patch grid → 4 image tokens; 56 x 84 → 4 x 6 → 6
  const image = (tokens: number) => [start, ...Array.from({ length: tokens }, () => pad), end];
  const row = (eid: string, prompt: number[], response: number[], images: string[]): Experience => ({
    eid,
    tokens: [...prompt, ...response],
    promptLength: prompt.length,
    actionMask: response.map(() => 1),
    reward: eid.length % 2,
    info: { taskId: `t${eid.length % 2}` },
    ...(images.length > 0 ? { images } : {}),
  });
  rows = [
    row('a', [5, ...image(4), 9, 10], [11, 12, 2], [await randomImage(56, 56, 1)]),
    row('bb', [5, ...image(6), 9, ...image(4)], [13, 2], [await randomImage(56, 84, 2), await randomImage(50, 60, 3)]),
    row('ccc', [5, 8, 9, 10], [14, 15, 16, 2], []),
  ];
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** The SFT loss by Qwen2_5VLModel.forward without gradients (directSftGradient's loss). */
async function directSftLoss(model: Qwen2_5VLModel): Promise<number> {
  const processor = loadVisionImageProcessor(dir);
  const tokens = rows.reduce((n, e) => n + e.tokens.length - e.promptLength, 0);
  let loss = 0;
  for (const e of rows) {
    const decoded = await Promise.all((e.images ?? []).map((url) => decodeImage(url, e.eid)));
    loss += torch.scope(() =>
      torch.noGrad(() => {
        const images = decoded.length > 0 ? preprocessImages(decoded, processor) : undefined;
        const ids = torch.tensor([e.tokens.map(BigInt)]);
        const T = e.tokens.length;
        const logits = model.forward(ids, images ? { images } : {}).float();
        const logProbs = logits
          .narrow(1, 0, T - 1)
          .logSoftmax(-1)
          .gather(-1, ids.narrow(1, 1, T - 1).unsqueeze(-1))
          .squeeze(-1);
        return logProbs
          .narrow(1, e.promptLength - 1, T - e.promptLength)
          .sum()
          .neg()
          .div(tokens)
          .item();
      }),
    );
  }
  return loss;
}

/** The SFT loss (token-mean NLL of the response tokens) by the model's forward, row by row, and its gradients. */
async function directSftGradient(model: VisionLanguageModel, folder: string): Promise<{ loss: number; grads: Float32Array[] }> {
  const processor = loadVisionImageProcessor(folder);
  const params = [...model.parameters().values()];
  const tokens = rows.reduce((n, e) => n + e.tokens.length - e.promptLength, 0);
  let loss = 0;
  for (const e of rows) {
    const decoded = await Promise.all((e.images ?? []).map((url) => decodeImage(url, e.eid)));
    torch.scope(() => {
      const images = decoded.length > 0 ? preprocessImages(decoded, processor) : undefined;
      const ids = torch.tensor([e.tokens.map(BigInt)]);
      const logits = model.forward(ids, images ? { images } : {}).float();
      const T = e.tokens.length;
      const logProbs = logits
        .narrow(1, 0, T - 1)
        .logSoftmax(-1)
        .gather(-1, ids.narrow(1, 1, T - 1).unsqueeze(-1))
        .squeeze(-1);
      const nll = logProbs
        .narrow(1, e.promptLength - 1, T - e.promptLength)
        .sum()
        .neg()
        .div(tokens);
      nll.backward();
      loss += nll.item();
    });
  }
  const grads = params.map((p) => p.grad?.float().toTypedArray() as Float32Array);
  for (const p of params) p.grad = null;
  return { loss, grads };
}

for (const family of ['Qwen2.5-VL', 'Qwen3-VL'])
  test(`${family}: an SFT step over image and text rows: the loss and every gradient equal the model's forward (1e-5)`, async () => {
    assert.equal(imageTokenCount([1, 4, 6], 2), 6);
    const folder = family === 'Qwen3-VL' ? qwen3Dir : dir;
    const model = loadVisionLanguageModel(folder, { requiresGrad: true });
    const vision = new TrainerVision(model, folder, 'cpu');
    try {
      const direct = await directSftGradient(model, folder);
      const optimizer = new GradientRecorder([...model.parameters().values()], { lr: 1 });
      const algorithm = resolveAlgorithm({ algorithm_type: 'sft' });
      // two micro-batches: the image rows (padded layout through the vision tower), then the text row
      const step = new TrainStep({ model: model.language, optimizer, algorithm, maxGradNorm: 1e9, microBatchSize: 2, vision });
      const metrics = await withRowImages(vision, rows, () => step.run(rows));
      assert.ok(Math.abs((metrics.loss as number) - direct.loss) < 1e-5, `loss ${metrics.loss} vs ${direct.loss}`);
      assertSameGradient(optimizer.grads, direct.grads, 'sft step', 1e-5);
      const patchEmbed = [...model.parameters().keys()].indexOf('visual.patch_embed.proj.weight');
      assert.ok(
        (optimizer.grads[patchEmbed] as Float32Array).some((g) => g !== 0),
        'the vision tower gets gradients',
      );
      // DeepStack feature 0 is added after language layer 0; feature 1 after the last layer, at prompt positions whose
      // logits no loss term reads, so its merger's gradient is 0 (in transformers too)
      const deepstack = [...model.parameters().keys()].indexOf('visual.deepstack_merger_list.0.linear_fc1.weight');
      if (family === 'Qwen3-VL')
        assert.ok(
          (optimizer.grads[deepstack] as Float32Array).some((g) => g !== 0),
          'DeepStack merger 0 gets gradients',
        );
    } finally {
      vision.forget();
      model.dispose();
    }
  });

test('LoRA on the language model: the loss of image rows equals the direct forward, and only the adapters train', async () => {
  const model = Qwen2_5VLModel.load(dir);
  const lora = LoraModel.attach(model.language, { r: 4, loraAlpha: 8, targetModules: 'all-linear', seed: 1 });
  const vision = new TrainerVision(model, dir, 'cpu');
  try {
    const direct = await directSftLoss(model);
    const optimizer = new GradientRecorder([...lora.loraParameters().values()], { lr: 1 });
    const algorithm = resolveAlgorithm({ algorithm_type: 'sft' });
    const step = new TrainStep({ model: model.language, lora, optimizer, algorithm, maxGradNorm: 1e9, vision });
    const metrics = await withRowImages(vision, rows, () => step.run(rows));
    assert.ok(Math.abs((metrics.loss as number) - direct) < 1e-5, `loss ${metrics.loss} vs ${direct}`);
    assert.ok(
      optimizer.grads.some((g) => g.some((v) => v !== 0)),
      'the adapters get gradients',
    );
    assert.ok(
      [...model.parameters().values()].every((p) => p.grad === null),
      'the model itself (vision tower too) is frozen',
    );
  } finally {
    vision.forget();
    lora.dispose();
    model.dispose();
  }
});

for (const family of ['Qwen2.5-VL', 'Qwen3-VL'])
  test(`${family}: a GRPO step: the current policy and the reference see the images (KL to the unchanged reference is 0)`, async () => {
    const folder = family === 'Qwen3-VL' ? qwen3Dir : dir;
    const model = loadVisionLanguageModel(folder, { requiresGrad: true });
    const vision = new TrainerVision(model, folder, 'cpu');
    const reference = frozenModelReference(folder, { dtype: 'float32' });
    try {
      const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', kl_loss_fn: 'k3', kl_loss_fn_args: { kl_coef: 0.1 } });
      const optimizer = new torch.SGD([...model.parameters().values()], { lr: 0 });
      const step = new TrainStep({ model: model.language, optimizer, algorithm, reference, microBatchSize: 1, vision });
      const metrics = await withRowImages(vision, rows, () => step.run(rows));
      assert.ok(Math.abs(metrics.kl as number) < 1e-6, `kl ${metrics.kl}`);
      assert.ok(Math.abs((metrics.pg_clipfrac as number) ?? 0) < 1e-9);
    } finally {
      reference.dispose();
      vision.forget();
      model.dispose();
    }
  });

test('a row whose image tokens do not match its images is a named error', async () => {
  const model = Qwen2_5VLModel.load(dir, { requiresGrad: true });
  const vision = new TrainerVision(model, dir, 'cpu');
  try {
    const step = new TrainStep({
      model: model.language,
      optimizer: new torch.SGD([...model.parameters().values()], { lr: 0 }),
      algorithm: resolveAlgorithm({ algorithm_type: 'sft' }),
      vision,
    });
    const { images: _, ...lost } = rows[0] as Experience;
    await assert.rejects(
      withRowImages(vision, [lost], () => step.run([lost])),
      /experience a: its tokens hold 4 image tokens \(id \d+\), its 0 image\(s\) make 0/,
    );
  } finally {
    vision.forget();
    model.dispose();
  }
});

test('image rows on a text model, and vision-language settings not covered yet, are named errors', () => {
  const textDir = mkdtempSync(join(tmpdir(), 'trinity-text-'));
  try {
    initModel(textDir, { hiddenSize: 32, numLayers: 1, numHeads: 2 });
    const model = CausalLM.load(textDir, { requiresGrad: true });
    try {
      const step = new TrainStep({
        model,
        optimizer: new torch.SGD([...model.parameters().values()], { lr: 0 }),
        algorithm: resolveAlgorithm({ algorithm_type: 'sft' }),
      });
      assert.throws(() => step.run(rows), /experience a carries 1 image\(s\), but the policy is not a vision-language model/);
    } finally {
      model.dispose();
    }
  } finally {
    rmSync(textDir, { recursive: true, force: true });
  }
  const options = { dtype: 'float32' as const, device: 'cpu', requiresGrad: true };
  assert.throws(
    () => loadPolicy(dir, options, { shardedRanks: 2, useCritic: true, bitwiseOnPolicy: true }),
    /trainer \(.*\): a vision-language policy \(qwen2_5_vl, qwen3_vl\) does not support trainer\.bitwise_on_policy \(the multimodal forward is not batch-invariant\); fully sharded training \(trainer\.trainer_strategy fsdp over 2 ranks: .*\); a critic \(advantage_fn ppo \/ GAE\) yet/,
  );
  const policy = loadPolicy(dir, options, { shardedRanks: 0, useCritic: false });
  assert.ok(policy.vision !== null && policy.model === policy.vision.model.language);
  policy.vision.model.dispose();
});

test('mixed precision: bf16 compute over float32 master weights of the whole model, vision tower included', async () => {
  const jobDir = mkdtempSync(join(tmpdir(), 'trinity-vl-mixed-'));
  const start = torch.loadModelWeights(dir);
  const { trainer } = await TrainerClient.start(
    toyTrainerInit(dir, jobDir, {
      dtype: 'bfloat16',
      masterDtype: 'float32',
      algorithm: { algorithm_type: 'sft', optimizer: { lr: 1e-3 } },
      totalSteps: 2,
      microBatchSize: 4,
    }),
  );
  try {
    await trainer.step(rows);
    const synced = await trainer.beginSync();
    const dtypes = new Set([...synced.values()].map((t) => t.dtype));
    await trainer.endSync();
    assert.deepEqual([...dtypes], ['bfloat16'], 'the explorer is handed the bf16 compute copy');
    const saved = torch.loadModelWeights(join(await trainer.save(1, {}, 0), 'model'));
    try {
      assert.deepEqual(new Set([...saved.values()].map((t) => t.dtype)), new Set(['float32']), 'master weights saved');
      const name = 'visual.patch_embed.proj.weight';
      const before = start.get(name)?.toTypedArray() as Float32Array;
      const after = saved.get(name)?.toTypedArray() as Float32Array;
      assert.ok(
        after.some((v, i) => v !== before[i]),
        "the master copy's vision tower was updated",
      );
    } finally {
      for (const t of saved.values()) t.dispose();
    }
  } finally {
    await trainer.close();
    for (const t of start.values()) t.dispose();
    rmSync(jobDir, { recursive: true, force: true });
  }
});

test('an image token sampled in a response trains as text: the row runs, and the log-probs before it equal the direct forward', async () => {
  const model = Qwen2_5VLModel.load(dir);
  const vision = new TrainerVision(model, dir, 'cpu');
  try {
    const base = rows[0] as Experience;
    const pad = model.config.imageTokenId;
    const prompt = base.tokens.slice(0, base.promptLength);
    // the rollout engine decodes a sampled placeholder as text; only the prompt's image tokens are the image's
    const sampled: Experience = { ...base, eid: 'sampled', tokens: [...prompt, 11, pad, 2], actionMask: [1, 1, 1] };
    await withRowImages(vision, [sampled], () =>
      torch.scope(() =>
        torch.noGrad(() => {
          vision.checkRows([sampled]); // the prompt's 4 image tokens are its image's 4
          const images = vision.rowImages([sampled]) ?? null;
          const ids = torch.tensor([sampled.tokens.map(BigInt)]);
          const mask = torch.onesLike(ids);
          const P = sampled.promptLength;
          const ours = tokenLogProbs(model.language, ids, {
            attentionMask: mask,
            ...visionOptions(model, ids, mask, images, P),
          }).logProbs;
          assert.ok(Number.isFinite(ours.sum().item()), 'every log-prob is finite');
          // the direct forward of [prompt, 11] predicts 11 and then the placeholder: positions P − 1 and P
          const head = torch.tensor([[...prompt, 11].map(BigInt)]);
          const logits = model.forward(head, images ? { images } : {}).logSoftmax(-1);
          const direct = [
            logits
              .select(1, P - 1)
              .select(1, 11)
              .item(),
            logits.select(1, P).select(1, pad).item(),
          ];
          const trained = [ours.select(1, P - 1).item(), ours.select(1, P).item()];
          for (const [i, value] of trained.entries())
            assert.ok(Math.abs(value - (direct[i] as number)) < 1e-5, `response token ${i}: ${value} vs ${direct[i]}`);
        }),
      ),
    );
  } finally {
    vision.forget();
    model.dispose();
  }
});
