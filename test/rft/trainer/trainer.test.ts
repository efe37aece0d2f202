// The trainer worker (TrainerClient) on a tiny random model:
//   - a resumed trainer is the trainer that was interrupted: PPO with a critic, an adaptive KL penalty and a cosine LR
//     schedule trains k steps and saves; a fresh trainer resumes from that checkpoint; both then take step k + 1 on
//     the same experiences and must report the same metrics and hold the same weights (1e-6, float32);
//   - model.lora.path: an adapter saved by one trainer, loaded by another, gives the same (merged) weights;
//   - LoRA dropout: its mask stream (seeded with the run's seed) is saved in trainer.json, so a resumed LoRA run with
//     dropout takes the same step k + 1 as the uninterrupted one;
//   - LoRA settings beside an adapter folder (model.lora.path, or a resumed checkpoint's) that differ from its
//     adapter_config.json (rank, alpha, target modules) are errors naming both values; the run's dropout applies;
//   - model.critic_model_path: the critic starts from that folder's weights, not the policy's.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { TrainerClient, type TrainerInit } from '../../../src/rft/trainer/trainer.js';
import * as torch from '../../../src/torch/index.js';
import { toyTrainerInit, toyTrainerJob } from './toy.js';

const job = toyTrainerJob('trinity-trainer-');

const ppoWithAdaptiveKl = {
  algorithm_type: 'ppo',
  kl_penalty_fn: 'k1',
  kl_penalty_fn_args: { adaptive: true, kl_coef: 0.05, target_kl: 1e-4, horizon: 20 },
  optimizer: { lr: 1e-2, lr_scheduler_type: 'cosine', lr_warmup_steps: 1 },
};

function init(jobDir: string, overrides: Partial<TrainerInit> = {}): TrainerInit {
  return toyTrainerInit(job.dir, jobDir, { algorithm: ppoWithAdaptiveKl, ...overrides });
}

/** The trainer's current (merged) weights, copied out as float arrays. */
async function weightsOf(trainer: TrainerClient): Promise<Map<string, Float32Array>> {
  const weights = await trainer.beginSync();
  const out = new Map([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
  await trainer.endSync();
  return out;
}

function maxDifference(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  assert.deepEqual([...a.keys()].sort(), [...b.keys()].sort());
  let largest = 0;
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    for (let i = 0; i < x.length; i++) largest = Math.max(largest, Math.abs((x[i] as number) - (y[i] as number)));
  }
  return largest;
}

describe('trainer worker', () => {
  test('a resumed PPO trainer (critic, adaptive KL, LR schedule) takes the same step k + 1 as the uninterrupted one', async () => {
    const jobDir = join(job.work, 'resume');
    const k = 3;
    const { trainer: original, start } = await TrainerClient.start(init(jobDir));
    assert.equal(start.step, 0);
    const coefs: number[] = [];
    try {
      for (let i = 0; i < k; i++) coefs.push((await original.step(job.batch))['kl_penalty/kl_coef'] as number);
      await original.save(k, { note: 'component state' }, 0);
      const { trainer: resumed, start: resumedStart } = await TrainerClient.start(init(jobDir, { resume: true }));
      try {
        assert.equal(resumedStart.step, k);
        assert.deepEqual(resumedStart.state?.note, 'component state');
        const expected = await original.step(job.batch);
        const got = await resumed.step(job.batch);
        // the state the test is about really moves: the KL coefficient adapts, the critic trains, the LR follows
        // its schedule
        coefs.push(expected['kl_penalty/kl_coef'] as number);
        assert.ok(new Set(coefs).size === coefs.length, `the adaptive KL coefficient did not move: ${coefs.join(', ')}`);
        assert.ok(Number.isFinite(expected['critic/vf_loss']) && Number.isFinite(expected['critic/grad_norm']));
        assert.notEqual(expected.lr, expected.lr_next, 'the LR schedule is constant');
        assert.deepEqual(Object.keys(got).sort(), Object.keys(expected).sort());
        for (const [key, value] of Object.entries(expected)) {
          const diff = Math.abs(value - (got[key] as number));
          assert.ok(diff <= 1e-6, `metric ${key}: resumed ${got[key]}, uninterrupted ${value}`);
        }
        const diff = maxDifference(await weightsOf(original), await weightsOf(resumed));
        assert.ok(diff <= 1e-6, `weights after step ${k + 1} differ by ${diff}`);
      } finally {
        await resumed.close();
      }
    } finally {
      await original.close();
    }
  });

  test('model.lora.path: an adapter saved by one trainer starts another with the same weights', async () => {
    const lora = { rank: 4, alpha: 8, dropout: 0, targetModules: 'all-linear' as const };
    const grpo = { algorithm_type: 'grpo', optimizer: { lr: 5e-2 } };
    const first = await TrainerClient.start(init(join(job.work, 'lora-a'), { algorithm: grpo, lora }));
    let adapterDir: string;
    let trained: Map<string, Float32Array>;
    try {
      await first.trainer.step(job.batch);
      adapterDir = join(await first.trainer.save(1, {}, 0), 'adapter');
      trained = await weightsOf(first.trainer);
    } finally {
      await first.trainer.close();
    }
    const fresh = await TrainerClient.start(init(join(job.work, 'lora-fresh'), { algorithm: grpo, lora }));
    const second = await TrainerClient.start(init(join(job.work, 'lora-b'), { algorithm: grpo, lora, loraPath: adapterDir }));
    try {
      assert.ok(maxDifference(trained, await weightsOf(second.trainer)) <= 1e-6, 'the loaded adapter differs');
      // a fresh adapter (B = 0) is the base model: the trained adapter is not
      assert.ok(maxDifference(trained, await weightsOf(fresh.trainer)) > 1e-4, 'the trained adapter changed nothing');
    } finally {
      await second.trainer.close();
      await fresh.trainer.close();
    }
    await assert.rejects(
      TrainerClient.start(init(join(job.work, 'lora-c'), { algorithm: grpo, loraPath: adapterDir })),
      /an adapter to start from needs LoRA training/,
    );
  });

  test('LoRA dropout: a resumed trainer draws the masks the uninterrupted one draws (same step k + 1)', async () => {
    const jobDir = join(job.work, 'lora-dropout');
    const lora = { rank: 4, alpha: 8, dropout: 0.3, targetModules: 'all-linear' as const };
    const grpo = { algorithm_type: 'grpo', optimizer: { lr: 5e-2 } };
    const k = 2;
    const { trainer: original } = await TrainerClient.start(init(jobDir, { algorithm: grpo, lora, seed: 5 }));
    try {
      for (let i = 0; i < k; i++) await original.step(job.batch);
      const checkpoint = await original.save(k, {}, 0);
      // one mask per adapted projection (7 in the toy's one layer) per step (one micro-batch)
      const saved = JSON.parse(readFileSync(join(checkpoint, 'trainer.json'), 'utf8')) as { loraDropout: unknown };
      assert.deepEqual(saved.loraDropout, { seed: 5, draws: k * 7 });
      const { trainer: resumed } = await TrainerClient.start(init(jobDir, { algorithm: grpo, lora, seed: 5, resume: true }));
      try {
        const expected = await original.step(job.batch);
        const got = await resumed.step(job.batch);
        for (const [key, value] of Object.entries(expected)) {
          const diff = Math.abs(value - (got[key] as number));
          assert.ok(diff <= 1e-6, `metric ${key}: resumed ${got[key]}, uninterrupted ${value}`);
        }
        const diff = maxDifference(await weightsOf(original), await weightsOf(resumed));
        assert.ok(diff <= 1e-6, `weights after step ${k + 1} differ by ${diff}`);
      } finally {
        await resumed.close();
      }
    } finally {
      await original.close();
    }
  });

  test("LoRA settings that differ from the adapter's adapter_config.json are errors naming both; dropout is the run's", async () => {
    const lora = { rank: 4, alpha: 8, dropout: 0, targetModules: 'all-linear' as const };
    const grpo = { algorithm_type: 'grpo' };
    const jobDir = join(job.work, 'lora-settings');
    const first = await TrainerClient.start(init(jobDir, { algorithm: grpo, lora }));
    let adapterDir: string;
    try {
      adapterDir = join(await first.trainer.save(1, {}, 0), 'adapter');
    } finally {
      await first.trainer.close();
    }
    const start = (dir: string, settings: Partial<NonNullable<TrainerInit['lora']>>, overrides: Partial<TrainerInit> = {}) =>
      TrainerClient.start(
        init(join(job.work, dir), { algorithm: grpo, lora: { ...lora, ...settings }, loraPath: adapterDir, ...overrides }),
      );
    const file = join(adapterDir, 'adapter_config.json').replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    await assert.rejects(
      start('rank', { rank: 8 }),
      new RegExp(`failed: ${file} does not match the LoRA settings: model\\.lora\\.rank is 8, the adapter's r is 4; set them`),
    );
    await assert.rejects(start('alpha', { alpha: 16 }), /model\.lora\.alpha is 16, the adapter's lora_alpha is 8/);
    await assert.rejects(
      start('targets', { targetModules: ['q_proj', 'v_proj'] }),
      /model\.lora\.target_modules is \["q_proj","v_proj"\], the adapter's target_modules is \[.*\] \(only the setting selects none; only the adapter selects model\.layers\.0\.self_attn\.k_proj, model\.layers\.0\.self_attn\.o_proj, model\.layers\.0\.mlp\.gate_proj and 2 more\)/,
    );
    // a resumed run is checked against its checkpoint's adapter
    await assert.rejects(
      TrainerClient.start(init(jobDir, { algorithm: grpo, lora: { ...lora, rank: 2 }, resume: true })),
      /\(the checkpoint's adapter\) does not match the LoRA settings: model\.lora\.rank is 2, the adapter's r is 4; a resumed run keeps/,
    );
    // settings left unset (null) take the adapter's; a new adapter needs them
    await assert.rejects(
      TrainerClient.start(init(join(job.work, 'unset'), { algorithm: grpo, lora: { ...lora, rank: null, targetModules: null } })),
      /model\.lora: rank, target_modules not set, and there is no adapter folder \(model\.lora\.path\) to take them from/,
    );
    // the run's dropout replaces the adapter's and is what its checkpoints record
    const { trainer } = await start('dropout', { rank: null, alpha: null, targetModules: null, dropout: 0.2 });
    try {
      const saved = await trainer.save(0, {}, 0);
      const config = JSON.parse(readFileSync(join(saved, 'adapter', 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
      assert.deepEqual([config.r, config.lora_alpha, config.lora_dropout], [4, 8, 0.2]);
    } finally {
      await trainer.close();
    }
  });

  test("model.critic_model_path: the critic starts from that folder's weights", async () => {
    const criticDir = mkdtempSync(join(tmpdir(), 'trinity-critic-'));
    try {
      initModel(criticDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, numKeyValueHeads: 1, seed: 11 });
      const read = (dir: string) => {
        const tensors = torch.loadSafetensors(join(dir, 'model.safetensors'));
        const out = new Map([...tensors].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
        for (const t of tensors.values()) t.dispose();
        return out;
      };
      const { trainer } = await TrainerClient.start(init(join(job.work, 'critic'), { criticModelPath: criticDir }));
      let checkpoint: string;
      try {
        checkpoint = await trainer.save(0, {}, 0); // before any step: the critic as initialised
      } finally {
        await trainer.close();
      }
      const saved = torch.loadSafetensors(join(checkpoint, 'critic.safetensors'));
      const trunk = new Map(
        [...saved]
          .filter(([name]) => name.startsWith('trunk.'))
          .map(([name, t]) => [name.slice('trunk.'.length), t.float().toTypedArray() as Float32Array]),
      );
      for (const t of saved.values()) t.dispose();
      const critic = read(criticDir);
      const policy = read(job.dir);
      // tied embeddings: the folder has no lm_head.weight, the critic's trunk does not need one either
      const shared = [...trunk.keys()].filter((name) => critic.has(name));
      assert.ok(shared.length > 5, `critic trunk tensors: ${[...trunk.keys()].join(', ')}`);
      const pick = (m: Map<string, Float32Array>) => new Map(shared.map((n) => [n, m.get(n) as Float32Array]));
      assert.ok(maxDifference(pick(trunk), pick(critic)) === 0, "the critic's trunk is not the critic folder's model");
      assert.ok(maxDifference(pick(trunk), pick(policy)) > 1e-3, 'the two folders hold the same weights');
    } finally {
      rmSync(criticDir, { recursive: true, force: true });
    }
  });
});
