// LoRA against PEFT: adapters written by scripts/fixtures/lora_reference.py give PEFT's logits (adapted, merged,
// disabled) within 1e-4; a new adapter is a no-op; merge/unmerge; save → load; PEFT loads what we save (the script's
// verify mode, with the reference Python environment); training moves only the adapters; bad adapters are errors.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import {
  CausalLM,
  forwardBackward,
  type LinearAdapter,
  LoraAdapterError,
  LoraModel,
  readAdapterConfig,
  targetedModules,
  type TokenLogProbs,
  tokenLogProbs,
} from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, type FixtureModel, get, maxAbsDiff, modelDir, repoRoot } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;
const loraFixtures = join(repoRoot, 'test/fixtures/lora');
const tmp = mkdtempSync(join(tmpdir(), 'lora-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** PEFT adapters of the fixtures and the base model each was made on. */
const PEFT_ADAPTERS: [string, FixtureModel][] = [
  ['qwen2-tied-r4', 'qwen2-tied'],
  ['llama-yarn-rslora', 'llama-yarn'],
];

function loadLoraReference(name: string): Map<string, torch.Tensor> {
  const ref = torch.loadSafetensors(join(loraFixtures, name, 'reference.safetensors'));
  for (const t of ref.values()) torch.keep(t);
  return ref;
}

/** Copies of the parameters (kept), to compare against later. */
function snapshot(model: CausalLM): Map<string, torch.Tensor> {
  return new Map([...model.parameters()].map(([n, t]) => [n, torch.keep(t.detach().clone())]));
}

function maxWeightDiff(model: CausalLM, before: Map<string, torch.Tensor>): number {
  let diff = 0;
  for (const [name, t] of model.parameters()) diff = Math.max(diff, maxAbsDiff(t, before.get(name) as torch.Tensor));
  return diff;
}

for (const [name, base] of PEFT_ADAPTERS) {
  test(`${name}: logits with the PEFT adapter equal PEFT's; disabled equals the base; merge/unmerge`, () => {
    const model = CausalLM.load(modelDir(base));
    const ref = loadLoraReference(name);
    const original = snapshot(model);
    try {
      const ids = get(ref, 'ids');
      const baseLogits = torch.keep(model.forward(ids));
      const lora = LoraModel.load(model, join(loraFixtures, name));
      torch.scope(() => {
        const adapted = model.forward(ids);
        assert.ok(
          maxAbsDiff(adapted, get(ref, 'logits')) < TOLERANCE,
          `max |ours - peft| = ${maxAbsDiff(adapted, get(ref, 'logits'))}`,
        );
        assert.ok(maxAbsDiff(adapted, baseLogits) > 0.1, 'the adapter changes the logits');

        const disabled = lora.withAdaptersDisabled(() => model.forward(ids));
        assert.equal(maxAbsDiff(disabled, baseLogits), 0, 'adapters disabled = the base model, exactly');
        assert.ok(maxAbsDiff(disabled, get(ref, 'base.logits')) < TOLERANCE);
        assert.ok(maxAbsDiff(model.forward(ids), adapted) === 0, 'adapters are back on afterwards');

        lora.merge();
        assert.ok(lora.merged);
        const merged = model.forward(ids);
        assert.ok(maxAbsDiff(merged, adapted) < 1e-5, `merged vs unmerged: ${maxAbsDiff(merged, adapted)}`);
        assert.ok(maxAbsDiff(merged, get(ref, 'merged.logits')) < TOLERANCE);
        assert.throws(() => lora.withAdaptersDisabled(() => 0), /unmerge\(\) first/);

        lora.unmerge();
        assert.ok(maxWeightDiff(model, original) < 1e-6, `unmerge restores the base weights: ${maxWeightDiff(model, original)}`);
        assert.ok(maxAbsDiff(model.forward(ids), adapted) < 1e-5);
      });
      lora.unload();
      torch.scope(() => assert.ok(maxAbsDiff(model.forward(ids), baseLogits) < 1e-5, 'unload() leaves the base model'));
      baseLogits.dispose();
    } finally {
      model.dispose();
      disposeAll(ref.values());
      disposeAll(original.values());
    }
  });
}

test('a new adapter (B = 0) leaves the model unchanged, is trainable, freezes the base and frees its tensors on unload', () => {
  const model = CausalLM.load(modelDir('qwen3-untied'), { requiresGrad: true });
  try {
    const ids = torch.keep(torch.randint(3, 120, [2, 6]));
    const before = torch.keep(model.forward(ids));
    const live = torch.liveTensorCount();
    const lora = LoraModel.attach(model, { r: 4, loraAlpha: 16, targetModules: 'all-linear', seed: 1 });
    assert.equal(lora.modules.length, 2 * 7);
    assert.equal(lora.scale, 4);
    const params = lora.loraParameters();
    assert.equal(params.size, 2 * 2 * 7);
    const a = params.get('base_model.model.model.layers.1.mlp.down_proj.lora_A.weight') as torch.Tensor;
    const b = params.get('base_model.model.model.layers.1.mlp.down_proj.lora_B.weight') as torch.Tensor;
    assert.deepEqual(
      [a.shape, b.shape],
      [
        [4, 128],
        [64, 4],
      ],
    );
    // kaiming-uniform(a = sqrt(5)): U(-1/sqrt(in), 1/sqrt(in))
    const bound = 1 / Math.sqrt(128);
    torch.scope(() => assert.ok(a.abs().max().item() <= bound && a.abs().max().item() > 0.8 * bound));
    assert.ok([...params.values()].every((t) => t.requiresGrad && t.dtype === 'float32'));
    assert.ok(
      [...model.parameters().values()].every((t) => !t.requiresGrad),
      'base weights are frozen',
    );
    torch.scope(() => assert.equal(maxAbsDiff(model.forward(ids), before), 0));
    assert.throws(() => LoraModel.attach(model), /already has adapters/);

    lora.unload();
    assert.ok(
      [...model.parameters().values()].every((t) => t.requiresGrad),
      'requiresGrad restored',
    );
    assert.equal(torch.liveTensorCount(), live, 'unload frees the adapter tensors');
    assert.throws(() => lora.loraParameters(), /unloaded/);
    disposeAll([ids, before]);
  } finally {
    model.dispose();
  }
});

test('save() then load() reproduces the outputs; the files are in PEFT format', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  const other = CausalLM.load(modelDir('qwen2-tied'));
  try {
    const lora = LoraModel.attach(model, {
      r: 2,
      loraAlpha: 6,
      loraDropout: 0.05,
      targetModules: ['k_proj', 'up_proj'],
      layersToTransform: [1],
      useRslora: true,
      initLoraWeights: false,
      seed: 3,
    });
    assert.deepEqual(lora.modules, ['model.layers.1.self_attn.k_proj', 'model.layers.1.mlp.up_proj']);
    const dir = join(tmp, 'saved');
    const written = lora.save(dir);
    assert.deepEqual(written, [join(dir, 'adapter_config.json'), join(dir, 'adapter_model.safetensors')]);
    const config = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(config.peft_type, 'LORA');
    assert.equal(config.task_type, 'CAUSAL_LM');
    assert.deepEqual(
      [config.r, config.lora_alpha, config.lora_dropout, config.use_rslora, config.layers_to_transform, config.bias],
      [2, 6, 0.05, true, [1], 'none'],
    );
    assert.deepEqual(config.target_modules, ['k_proj', 'up_proj']);
    assert.equal(config.base_model_name_or_path, modelDir('qwen2-tied'));
    const header = torch.readSafetensorsHeader(join(dir, 'adapter_model.safetensors'));
    assert.deepEqual([...header.entries.keys()].sort(), [...lora.loraParameters().keys()].sort());
    assert.deepEqual(header.metadata, { format: 'pt' });

    const reloaded = LoraModel.load(other, dir);
    assert.deepEqual(reloaded.config, lora.config);
    torch.scope(() => {
      const ids = torch.randint(3, 120, [2, 9]);
      assert.equal(maxAbsDiff(other.forward(ids), model.forward(ids)), 0);
    });
    lora.unload();
    reloaded.unload();
  } finally {
    model.dispose();
    other.dispose();
  }
});

test('PEFT loads the adapter we save and gives our logits (unmerged and merged)', () => {
  const python = join(repoRoot, '.cache/python-ref/bin/python');
  assert.ok(
    existsSync(python),
    `${python} not found: run \`bash scripts/python-env.sh\` to create the reference Python environment`,
  );
  const model = CausalLM.load(modelDir('qwen3-untied'));
  const dir = join(tmp, 'for-peft');
  try {
    const lora = LoraModel.attach(model, {
      r: 4,
      loraAlpha: 8,
      targetModules: ['q_proj', 'k_proj', 'o_proj', 'up_proj', 'down_proj'],
      initLoraWeights: false,
      seed: 5,
    });
    lora.save(dir);
    torch.scope(() => {
      const ids = torch.randint(3, 120, [2, 7]);
      torch.saveSafetensors(join(dir, 'expected.safetensors'), { ids, logits: model.forward(ids) });
    });
    lora.unload();
  } finally {
    model.dispose();
  }
  const script = join(repoRoot, 'scripts/fixtures/lora_reference.py');
  let output: string;
  try {
    output = execFileSync(
      python,
      [script, 'verify', dir, join(dir, 'expected.safetensors'), '--base', modelDir('qwen3-untied')],
      {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, OMP_NUM_THREADS: '1' },
      },
    );
  } catch (error) {
    const e = error as { stdout?: string; stderr?: string };
    assert.fail(`PEFT rejected the adapter we saved:\n${e.stdout ?? ''}\n${(e.stderr ?? '').slice(-2000)}`);
  }
  const line = output
    .trim()
    .split('\n')
    .find((l) => l.startsWith('{'));
  const result = JSON.parse(line ?? '{}') as { ok: boolean; max_abs_diff: number; merged_max_abs_diff: number };
  assert.ok(result.ok && result.max_abs_diff < TOLERANCE && result.merged_max_abs_diff < TOLERANCE, JSON.stringify(result));
});

test('AdamW on the adapters lowers a toy loss and leaves the base weights bit-identical', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  const original = snapshot(model);
  try {
    const lora = LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: 'all-linear', seed: 2 });
    const params = lora.loraParameters();
    const initial = new Map([...params].map(([n, t]) => [n, torch.keep(t.detach().clone())]));
    const optimizer = new torch.AdamW([...params.values()], { lr: 1e-2, weightDecay: 0 });
    torch.manualSeed(11);
    const ids = torch.keep(torch.randint(3, 120, [2, 8]));
    const targets = torch.keep(torch.randint(3, 120, [16]));
    const losses: number[] = [];
    for (let step = 0; step < 6; step++) {
      losses.push(
        torch.scope(() => {
          const loss = torch.crossEntropy(model.forward(ids).reshape([16, -1]), targets);
          loss.backward();
          return loss.item();
        }),
      );
      optimizer.step();
      optimizer.zeroGrad();
    }
    assert.ok((losses.at(-1) as number) < (losses[0] as number) - 0.05, `loss ${losses.map((l) => l.toFixed(3)).join(' → ')}`);
    assert.equal(maxWeightDiff(model, original), 0, 'base weights are bit-identical');
    assert.ok(
      [...model.parameters().values()].every((t) => t.grad === null),
      'no gradient reaches the base weights',
    );
    for (const [n, t] of params) assert.ok(maxAbsDiff(t, initial.get(n) as torch.Tensor) > 0, `${n} was trained`);
    optimizer.dispose();
    lora.unload();
    disposeAll([ids, targets, ...initial.values()]);
  } finally {
    model.dispose();
    disposeAll(original.values());
  }
});

test('dropout applies in training mode only; a bfloat16 model runs float32 adapters', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'), { dtype: 'bfloat16' });
  try {
    const lora = LoraModel.load(model, join(loraFixtures, 'qwen2-tied-r4'));
    assert.equal(lora.config.loraDropout, 0.1);
    const ref = loadLoraReference('qwen2-tied-r4');
    torch.scope(() => {
      const ids = get(ref, 'ids');
      const evalLogits = model.forward(ids);
      assert.equal(evalLogits.dtype, 'bfloat16');
      assert.equal(maxAbsDiff(model.forward(ids), evalLogits), 0, 'eval mode is deterministic');
      const diff = maxAbsDiff(evalLogits, get(ref, 'logits'));
      assert.ok(diff < 0.25, `bf16 model with fp32 adapters vs PEFT fp32: ${diff}`);
      lora.train();
      assert.ok(maxAbsDiff(model.forward(ids), evalLogits) > 0, 'dropout changes the training-mode outputs');
      lora.eval();
    });
    disposeAll(ref.values());
    lora.unload();
  } finally {
    model.dispose();
  }
});

test('bad adapters and configs are precise errors', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  try {
    assert.throws(() => LoraModel.attach(model, { targetModules: ['c_attn'] }), /match no projection/);
    assert.throws(() => LoraModel.attach(model, { r: 0 }), /r must be a positive integer/);

    const broken = (name: string, edit: (config: Record<string, unknown>) => void, dropTensor?: string): string => {
      const dir = join(tmp, name);
      cpSync(join(loraFixtures, 'qwen2-tied-r4'), dir, { recursive: true });
      const file = join(dir, 'adapter_config.json');
      const config = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      edit(config);
      writeFileSync(file, JSON.stringify(config));
      if (dropTensor !== undefined) {
        const tensors = torch.loadSafetensors(join(dir, 'adapter_model.safetensors'));
        tensors.delete(dropTensor);
        torch.saveSafetensors(join(dir, 'adapter_model.safetensors'), tensors);
      }
      return dir;
    };
    const expectError = (dir: string, pattern: RegExp) =>
      assert.throws(
        () => LoraModel.load(model, dir),
        (e: Error) => e instanceof LoraAdapterError && pattern.test(e.message),
      );
    expectError(
      broken('dora', (c) => {
        c.use_dora = true;
      }),
      /use_dora = true is not supported/,
    );
    expectError(
      broken('fewer-targets', (c) => {
        c.target_modules = ['q_proj'];
      }),
      /unexpected tensors 'base_model\.model\.model\.layers\.0\.mlp\.down_proj\.lora_A\.weight', .* and 12 more/,
    );
    expectError(
      broken('rank', (c) => {
        c.r = 8;
      }),
      /has shape \[4, 64\], expected \[8, 64\]/,
    );
    expectError(
      broken('missing', () => {}, 'base_model.model.model.layers.1.mlp.down_proj.lora_B.weight'),
      /missing tensor 'base_model\.model\.model\.layers\.1\.mlp\.down_proj\.lora_B\.weight'/,
    );
    assert.throws(() => LoraModel.load(model, tmp), /adapter_config\.json: not found/);
    // a failed load leaves the model as it was, free to take adapters
    LoraModel.attach(model).unload();
  } finally {
    model.dispose();
  }
});

test('activation checkpointing refuses active LoRA dropout unless given its random state to replay', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  const lora = LoraModel.attach(model, { r: 2, loraDropout: 0.1 });
  const ids = torch.keep(torch.randint(0, 100, [1, 6]));
  const loss = ({ logProbs }: TokenLogProbs) => logProbs.mean().neg();
  lora.train();
  assert.equal(model.isStochastic, true);
  assert.throws(() => forwardBackward(model, ids, loss, { checkpoint: true }), /activation checkpointing recomputes each layer/);
  forwardBackward(model, ids, loss, { checkpoint: true, random: lora });
  lora.eval();
  assert.equal(model.isStochastic, false);
  forwardBackward(model, ids, loss, { checkpoint: true });
  ids.dispose();
  lora.dispose();
  model.dispose();
});

test('with a frozen base, forwardBackward (checkpointed or not) gives the adapters the same gradients as plain autograd', () => {
  const model = CausalLM.load(modelDir('qwen3-untied'));
  const lora = LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: 'all-linear', seed: 1 });
  torch.scope(() => {
    // non-zero B so that A gets gradients too
    for (const [name, p] of lora.loraParameters()) if (name.includes('lora_B')) torch.noGrad(() => p.normal_(0, 0.05));
    const ids = torch.randint(0, 100, [2, 9]);
    const loss = ({ logProbs }: TokenLogProbs) => logProbs.mean().neg();
    const params = [...lora.loraParameters().values()];
    torch.scope(() => loss(tokenLogProbs(model, ids)).backward());
    const reference = params.map((p) => (p.grad as torch.Tensor).clone());
    for (const checkpoint of [false, true]) {
      for (const p of params) p.grad = null;
      forwardBackward(model, ids, loss, { checkpoint, chunkSize: 3 });
      params.forEach((p, i) => {
        assert.ok(maxAbsDiff(p.grad as torch.Tensor, reference[i] as torch.Tensor) < 1e-6, `checkpoint=${checkpoint}`);
      });
    }
    for (const p of params) p.grad = null;
    for (const p of model.parameters().values()) assert.equal(p.grad, null, 'the frozen base gets no gradient');
  });
  lora.dispose();
  model.dispose();
});

// --- LoRA dropout ---------------------------------------------------------------------------------------------------

/**
 * The dropout stream as lora.ts documents it, written out independently: draw n takes U[0, 1) from a generator seeded
 * with splitmix64(seed, n) (Steele et al.'s constants; kept below 2^63), keep = U < 1 - p.
 */
function documentedKeepMask(seed: number, n: number, shape: readonly number[], p: number): torch.Tensor {
  const mask64 = (1n << 64n) - 1n;
  let z = (BigInt(seed) + BigInt(n + 1) * 0x9e3779b97f4a7c15n) & mask64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & mask64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & mask64;
  z = (z ^ (z >> 31n)) & ((1n << 63n) - 1n);
  return torch.rand(shape, { generator: new torch.Generator(z) }).lt(1 - p);
}

/**
 * PEFT's LoRA forward by hand on a second copy of the model: y = base + scale * (x * keep / (1 - p)) A^T B^T with the
 * documented masks, drawn in call order; A and B are leaves of their own (copies of the adapter's).
 */
function handLoraModel(lora: LoraModel, seed: number, p: number) {
  const model = CausalLM.load(modelDir('qwen3-untied'));
  const params = lora.loraParameters();
  const leaves = new Map<string, torch.Tensor>();
  let draws = 0;
  for (const module of lora.modules) {
    const copy = (name: string) => torch.keep((params.get(name) as torch.Tensor).detach().clone().requiresGrad_());
    const a = copy(`base_model.model.${module}.lora_A.weight`);
    const b = copy(`base_model.model.${module}.lora_B.weight`);
    leaves.set(`base_model.model.${module}.lora_A.weight`, a).set(`base_model.model.${module}.lora_B.weight`, b);
    const adapter: LinearAdapter = {
      stochastic: true,
      foldedWeight: () => null,
      parameters: [a, b],
      forward: (x, base) => {
        const keep = documentedKeepMask(seed, draws++, x.shape, p);
        const dropped = x.mul(keep.float()).div(1 - p);
        return base.add(dropped.matmul(a.t()).matmul(b.t()).mul(lora.scale));
      },
    };
    model.setAdapter(module, adapter);
  }
  return {
    model,
    leaves,
    restart: () => {
      draws = 0;
    },
    get draws() {
      return draws;
    },
    dispose: () => {
      for (const module of lora.modules) model.setAdapter(module, null);
      disposeAll(leaves.values());
      model.dispose();
    },
  };
}

test("dropout: training forward differs from eval, equals PEFT's formula with the stream's masks, and so do its gradients (checkpointed or not)", () => {
  const p = 0.3;
  const seed = 123;
  const model = CausalLM.load(modelDir('qwen3-untied'));
  const lora = LoraModel.attach(model, {
    r: 4,
    loraAlpha: 8,
    loraDropout: p,
    targetModules: 'all-linear',
    seed: 1,
    dropoutSeed: seed,
  });
  const hand = handLoraModel(lora, seed, p);
  try {
    torch.scope(() => {
      // non-zero B: dropout then reaches the outputs and A's gradients
      torch.noGrad(() => {
        const generator = new torch.Generator(5);
        for (const [name, t] of lora.loraParameters()) if (name.includes('lora_B')) t.normal_(0, 0.05, generator);
        for (const [name, t] of hand.leaves) t.copy_(lora.loraParameters().get(name) as torch.Tensor);
      });
      const ids = torch.randint(0, 100, [2, 9], { generator: new torch.Generator(2) });
      const evalLogits = torch.noGrad(() => model.forward(ids));
      assert.deepEqual(lora.randomState(), { seed, draws: 0 });
      lora.train();
      const trainLogits = torch.noGrad(() => model.forward(ids));
      // one mask per adapted projection per forward
      assert.equal(lora.randomState().draws, lora.modules.length);
      assert.ok(maxAbsDiff(trainLogits, evalLogits) > 1e-3, 'dropout changes nothing in training mode');
      hand.restart();
      const handLogits = torch.noGrad(() => hand.model.forward(ids));
      assert.ok(
        maxAbsDiff(trainLogits, handLogits) < 1e-5,
        `training logits vs the hand formula: ${maxAbsDiff(trainLogits, handLogits)}`,
      );
      lora.eval();
      assert.equal(
        maxAbsDiff(
          torch.noGrad(() => model.forward(ids)),
          evalLogits,
        ),
        0,
        'eval mode after training mode',
      );
      assert.equal(lora.randomState().draws, lora.modules.length, 'eval mode draws no masks');

      // gradients: the hand model under plain autograd, the adapters under forwardBackward, both from draw 0
      const loss = ({ logProbs }: TokenLogProbs) => logProbs.mean().neg();
      hand.restart();
      torch.scope(() => loss(tokenLogProbs(hand.model, ids)).backward());
      assert.equal(hand.draws, lora.modules.length);
      const params = lora.loraParameters();
      lora.train();
      for (const checkpoint of [false, true]) {
        for (const t of params.values()) t.grad = null;
        lora.setRandomState({ seed, draws: 0 });
        forwardBackward(model, ids, loss, { checkpoint, chunkSize: 4, random: lora });
        // the recomputed layers redraw the forward's masks, and the stream ends where the forward left it
        assert.equal(lora.randomState().draws, lora.modules.length, `checkpoint=${checkpoint}: draws`);
        for (const [name, t] of params) {
          const expected = (hand.leaves.get(name) as torch.Tensor).grad as torch.Tensor;
          const diff = maxAbsDiff(t.grad as torch.Tensor, expected);
          assert.ok(diff < 1e-6, `checkpoint=${checkpoint}: ${name} gradient differs by ${diff}`);
        }
      }
      lora.eval();
      for (const t of params.values()) t.grad = null;
    });
  } finally {
    hand.dispose();
    lora.dispose();
    model.dispose();
  }
});

test('dropout: a restored stream state redraws the same masks; dropout 0 draws none and changes nothing', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  try {
    torch.scope(() => {
      const ids = torch.randint(0, 100, [1, 7], { generator: new torch.Generator(3) });
      const lora = LoraModel.attach(model, { r: 2, loraDropout: 0.5, initLoraWeights: false, seed: 4, dropoutSeed: 9 });
      lora.train();
      const first = model.forward(ids);
      const state = lora.randomState();
      const second = model.forward(ids);
      assert.ok(maxAbsDiff(first, second) > 1e-4, 'two training forwards drew the same masks');
      lora.setRandomState(state);
      assert.equal(maxAbsDiff(model.forward(ids), second), 0, 'the restored state did not redraw the masks');
      assert.throws(
        () => lora.setRandomState({ seed: 9, draws: -1 }, 'trainer.json loraDropout'),
        /trainer\.json loraDropout: draws must be a non-negative integer, got -1/,
      );
      lora.unload();

      const still = LoraModel.attach(model, { r: 2, loraDropout: 0, initLoraWeights: false, seed: 4, dropoutSeed: 9 });
      const evalLogits = model.forward(ids);
      still.train();
      assert.equal(model.isStochastic, false);
      assert.equal(maxAbsDiff(model.forward(ids), evalLogits), 0, 'dropout 0 changed the training forward');
      assert.deepEqual(still.randomState(), { seed: 9, draws: 0 });
      still.unload();
    });
  } finally {
    model.dispose();
  }
});

test("load(): loraDropout replaces the adapter's lora_dropout (and is saved); readAdapterConfig and targetedModules", () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  try {
    const dir = join(loraFixtures, 'qwen2-tied-r4');
    const config = readAdapterConfig(dir, model);
    assert.equal(config.loraDropout, 0.1);
    const lora = LoraModel.load(model, dir, { loraDropout: 0.25, dropoutSeed: 1 });
    assert.equal(lora.config.loraDropout, 0.25);
    const adapted = lora.modules;
    const saved = join(tmp, 'dropout-override');
    lora.save(saved);
    assert.equal(readAdapterConfig(saved, model).loraDropout, 0.25);
    lora.unload();
    assert.throws(() => LoraModel.load(model, dir, { loraDropout: 1 }), /lora_dropout must be in \[0, 1\), got 1/);
    const all = targetedModules(model, 'all-linear');
    assert.equal(all.length, 7 * model.config.numHiddenLayers);
    assert.deepEqual(
      targetedModules(model, ['q_proj', 'v_proj']),
      all.filter((m) => /\.(q|v)_proj$/.test(m)),
    );
    assert.deepEqual(targetedModules(model, config.targetModules).sort(), adapted.sort());
  } finally {
    model.dispose();
  }
});
