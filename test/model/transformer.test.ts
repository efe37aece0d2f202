// The transformer against transformers: logits of small random Llama / Qwen2 / Qwen3 models (written with their
// reference logits by scripts/fixtures/hf_models.py) in float32 within 1e-4, padded batches, hidden-state output,
// bfloat16, autograd, memory, a forward on a worker thread, and the inference layout (fused column-major weights).
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CausalLM, initModel, LoraModel, parseModelConfig } from '../../src/model/index.js';
import { type PackedRowsCpu, packedRowLimit, packedRowsCpu } from '../../src/model/inference-layout.js';
import * as torch from '../../src/torch/index.js';
import { recordNativeCalls } from '../helpers/native-calls.js';
import { disposeAll, FIXTURE_MODELS, get, loadReference, maxAbsDiff, modelDir } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;

for (const [name, layout] of FIXTURE_MODELS.flatMap((n) => [[n, 'training'] as const, [n, 'inference'] as const])) {
  describe(`${name} (${layout} layout)`, () => {
    let model: CausalLM;
    let ref: Map<string, torch.Tensor>;
    before(() => {
      model = CausalLM.load(modelDir(name), { layout });
      ref = loadReference(name);
    });
    after(() => {
      model.dispose();
      disposeAll(ref.values());
    });

    test('logits equal transformers (float32, no padding)', () => {
      torch.scope(() => {
        const logits = model.forward(get(ref, 'plain.ids'));
        assert.deepEqual(logits.shape, get(ref, 'plain.logits').shape);
        assert.equal(logits.dtype, 'float32');
        const diff = maxAbsDiff(logits, get(ref, 'plain.logits'));
        assert.ok(diff < TOLERANCE, `max |ours - transformers| = ${diff}`);
      });
    });

    test('logits equal transformers on a left- and right-padded batch with an attention mask', () => {
      torch.scope(() => {
        const mask = get(ref, 'padded.mask');
        // default positions are cumsum(mask) - 1, the positions the reference passed to transformers explicitly
        const logits = model.forward(get(ref, 'padded.ids'), { attentionMask: mask });
        const diff = maxAbsDiff(logits, get(ref, 'padded.logits'), mask.unsqueeze(-1));
        assert.ok(diff < TOLERANCE, `max |ours - transformers| over real tokens = ${diff}`);
        assert.equal(logits.isfinite().all().item(), 1, 'pad positions must not produce NaN/inf either');
        const explicit = model.forward(get(ref, 'padded.ids'), {
          attentionMask: mask,
          positionIds: get(ref, 'padded.positions'),
        });
        assert.ok(maxAbsDiff(explicit, get(ref, 'padded.logits'), mask.unsqueeze(-1)) < TOLERANCE);
      });
    });

    test('each padded row equals the same row run alone without padding', () => {
      torch.scope(() => {
        const ids = get(ref, 'padded.ids');
        const mask = get(ref, 'padded.mask');
        const batched = model.forward(ids, { attentionMask: mask });
        const rows = mask.toArray() as number[][];
        rows.forEach((row, b) => {
          const realIndex = row.flatMap((m, t) => (m === 1 ? [t] : []));
          const index = torch.tensor(BigInt64Array.from(realIndex, BigInt));
          const alone = model.forward(ids.select(0, b).indexSelect(0, index).unsqueeze(0));
          const diff = maxAbsDiff(batched.select(0, b).indexSelect(0, index), alone.squeeze(0));
          assert.ok(diff < TOLERANCE, `row ${b}: batched vs alone differ by ${diff}`);
        });
      });
    });

    test("output 'hidden' + logits() chunk by chunk equals the logits", () => {
      torch.scope(() => {
        const ids = get(ref, 'plain.ids');
        const hidden = model.forward(ids, { output: 'hidden' });
        assert.deepEqual(hidden.shape, [2, 7, model.config.hiddenSize]);
        const chunks = hidden.split(3, 1).map((h) => model.logits(h));
        assert.ok(maxAbsDiff(torch.cat(chunks, 1), get(ref, 'plain.logits')) < TOLERANCE);
      });
    });
  });
}

test('parameters() lists Hugging Face names; a tied lm_head is not a separate parameter', () => {
  const tied = CausalLM.load(modelDir('qwen2-tied'));
  const untied = CausalLM.load(modelDir('qwen3-untied'));
  try {
    const tiedNames = [...tied.parameters().keys()];
    assert.ok(tiedNames.includes('model.embed_tokens.weight'));
    assert.ok(tiedNames.includes('model.layers.1.self_attn.q_proj.bias'));
    assert.ok(!tiedNames.includes('lm_head.weight'));
    assert.equal(tiedNames.length, 1 + 2 * 12 + 1);
    const untiedParams = untied.parameters();
    assert.deepEqual(untiedParams.get('lm_head.weight')?.shape, [128, 64]);
    assert.deepEqual(untiedParams.get('model.layers.0.self_attn.q_norm.weight')?.shape, [32]);
    assert.deepEqual(untiedParams.get('model.layers.0.self_attn.q_proj.weight')?.shape, [4 * 32, 64]);
    assert.ok(!untiedParams.has('model.layers.0.self_attn.q_proj.bias'));
  } finally {
    tied.dispose();
    untied.dispose();
  }
});

test('bfloat16: parameters and logits in bf16, close to the float32 reference', () => {
  for (const name of ['qwen3-untied', 'llama-yarn'] as const) {
    const model = CausalLM.load(modelDir(name), { dtype: 'bfloat16' });
    const ref = loadReference(name);
    try {
      assert.ok([...model.parameters().values()].every((p) => p.dtype === 'bfloat16'));
      torch.scope(() => {
        const logits = model.forward(get(ref, 'padded.ids'), { attentionMask: get(ref, 'padded.mask') });
        assert.equal(logits.dtype, 'bfloat16');
        const expected = get(ref, 'padded.logits');
        const scale = expected.abs().max().item();
        const diff = maxAbsDiff(logits, expected, get(ref, 'padded.mask').unsqueeze(-1));
        assert.ok(diff < 0.05 * scale, `${name}: bf16 differs by ${diff} (logit scale ${scale})`);
        const mask = get(ref, 'padded.mask').bool();
        const top = logits.float().argmax(-1).eq(expected.argmax(-1)).maskedSelect(mask).float().mean().item();
        assert.ok(top > 0.8, `${name}: bf16 argmax agrees on only ${top} of the real positions`);
      });
    } finally {
      model.dispose();
      disposeAll(ref.values());
    }
  }
});

test('forward records autograd for training; every parameter gets a gradient', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'), { requiresGrad: true });
  const ref = loadReference('qwen2-tied');
  try {
    torch.scope(() => {
      const ids = get(ref, 'plain.ids');
      const logits = model.forward(ids);
      const loss = torch.crossEntropy(logits.narrow(1, 0, 6).reshape([-1, 128]), ids.narrow(1, 1, 6).reshape([-1]));
      loss.backward();
      for (const [name, p] of model.parameters()) {
        const g = p.grad;
        assert.ok(g !== null && g.abs().sum().item() > 0, `no gradient for ${name}`);
      }
    });
  } finally {
    model.dispose();
    disposeAll(ref.values());
  }
});

test('forward frees its temporaries; dispose() frees the parameters', () => {
  const before = torch.liveTensorCount();
  const model = CausalLM.load(modelDir('llama3-rope'));
  const ids = torch.randint(0, 128, [2, 9]);
  const mask = torch.ones([2, 9], { dtype: 'int64' });
  const afterLoad = torch.liveTensorCount();
  for (let i = 0; i < 3; i++) model.forward(ids, { attentionMask: mask }).dispose();
  assert.ok(torch.liveTensorCount() <= afterLoad + 1, 'forward leaked tensors'); // + the cached inv_freq
  model.dispose();
  ids.dispose();
  mask.dispose();
  assert.equal(torch.liveTensorCount(), before);
  assert.throws(() => model.forward(ids), /disposed/);
});

test('forward rejects inputs of the wrong shape or dtype with a clear error', () => {
  const model = CausalLM.load(modelDir('qwen2-tied'));
  try {
    torch.scope(() => {
      assert.throws(
        () => model.forward(torch.tensor([1, 2, 3], { dtype: 'int64' })),
        /inputIds must be a \[batch, seq\] int64 tensor/,
      );
      assert.throws(() => model.forward(torch.tensor([[1, 2]])), /int64/);
      const ids = torch.tensor([[1n, 2n, 3n]]);
      assert.throws(() => model.forward(ids, { attentionMask: torch.ones([1, 2]) }), /attentionMask must have shape \[1, 3\]/);
      assert.throws(() => model.forward(ids, { slots: [0] }), /slots given without a cache/);
    });
  } finally {
    model.dispose();
  }
});

test('the forward runs on a worker thread and gives the same logits', async () => {
  const worker = await torch.TensorWorker.start(new URL('./helpers/model-worker.ts', import.meta.url), { numThreads: 1 });
  const ref = loadReference('qwen3-untied');
  try {
    const logits = await worker.call<torch.Tensor>('forward', [
      modelDir('qwen3-untied'),
      get(ref, 'padded.ids'),
      get(ref, 'padded.mask'),
    ]);
    const diff = maxAbsDiff(logits, get(ref, 'padded.logits'), get(ref, 'padded.mask').unsqueeze(-1));
    logits.dispose();
    assert.ok(diff < TOLERANCE, `worker logits differ by ${diff}`);
  } finally {
    await worker.terminate();
    disposeAll(ref.values());
  }
});

test('dynamic NTK RoPE: inv_freq grows with the sequence as transformers (full forward and cached decoding)', () => {
  const dir = modelDir('llama3-rope');
  const raw = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;
  // the reference's variant: same weights, rope {dynamic, factor 2}, max_position_embeddings 4
  const config = parseModelConfig({
    ...raw,
    rope_parameters: { rope_type: 'dynamic', rope_theta: 10000, factor: 2 },
    max_position_embeddings: 4,
  });
  const weights = torch.loadModelWeights(dir, { dtype: 'float32' });
  const model = new CausalLM(config, weights);
  const ref = loadReference('llama3-rope');
  const cache = model.createKVCache({ slots: 2, maxLength: 10 });
  try {
    torch.scope(() => {
      const plain = model.forward(get(ref, 'plain.ids'));
      assert.ok(
        maxAbsDiff(plain, get(ref, 'dynamic.plain.logits')) < TOLERANCE,
        `plain: ${maxAbsDiff(plain, get(ref, 'dynamic.plain.logits'))}`,
      );
      assert.ok(maxAbsDiff(plain, get(ref, 'plain.logits')) > 1e-2, 'the dynamic variant must differ from llama3 rope');
      const ids = get(ref, 'decode.ids');
      const steps = [model.forward(ids.narrow(1, 0, 4), { cache })];
      for (let t = 4; t < 10; t++) steps.push(model.forward(ids.narrow(1, t, 1), { cache }));
      const diff = maxAbsDiff(torch.cat(steps, 1), get(ref, 'dynamic.decode.logits'));
      assert.ok(diff < TOLERANCE, `decode: ${diff}`);
    });
  } finally {
    cache.dispose();
    model.dispose();
    disposeAll(ref.values());
  }
});

describe('inference layout', () => {
  let training: CausalLM;
  let inference: CausalLM;
  before(() => {
    training = CausalLM.load(modelDir('qwen2-tied'));
    inference = CausalLM.load(modelDir('qwen2-tied'), { layout: 'inference' });
  });
  after(() => {
    training.dispose();
    inference.dispose();
  });

  test('parameters keep their Hugging Face names, shapes and values; projections are column-major views', () => {
    const a = training.parameters();
    const b = inference.parameters();
    assert.deepEqual([...b.keys()], [...a.keys()]);
    torch.scope(() => {
      for (const [name, t] of a) {
        const other = b.get(name) as torch.Tensor;
        assert.deepEqual(other.shape, t.shape, name);
        assert.equal(other.eq(t).all().item(), 1, name);
      }
    });
    const q = b.get('model.layers.0.self_attn.q_proj.weight') as torch.Tensor;
    const { numAttentionHeads: heads, numKeyValueHeads: kv, headDim } = inference.config;
    assert.deepEqual(q.strides, [1, (heads + 2 * kv) * headDim]); // a column block of the fused q|k|v matrix
    assert.equal(inference.layout, 'inference');
  });

  test('a weight copied into a parameter (weight sync) changes the forward as in the training layout', () => {
    torch.noGrad(() =>
      torch.scope(() => {
        const ids = torch.tensor(BigInt64Array.from([1n, 5n, 9n, 2n]), { shape: [1, 4] });
        for (const name of ['model.layers.0.self_attn.k_proj.weight', 'model.layers.1.mlp.up_proj.weight']) {
          for (const m of [training, inference]) {
            const p = m.parameters().get(name) as torch.Tensor;
            p.copy_(p.mul(1.5));
          }
        }
        assert.ok(maxAbsDiff(inference.forward(ids), training.forward(ids)) < TOLERANCE);
      }),
    );
  });

  test('save() writes what the training layout loads; LoRA adapters apply; requiresGrad is refused', () => {
    const dir = join(tmpdir(), `trinity-inference-layout-${process.pid}`);
    try {
      inference.save(dir);
      const reloaded = CausalLM.load(dir);
      torch.scope(() => {
        const ids = torch.tensor(BigInt64Array.from([3n, 1n, 4n, 1n, 5n]), { shape: [1, 5] });
        assert.ok(maxAbsDiff(reloaded.forward(ids), inference.forward(ids)) < TOLERANCE);
        reloaded.dispose();
        const loras = [training, inference].map((m) => LoraModel.attach(m, { r: 2, loraAlpha: 4, targetModules: 'all-linear' }));
        try {
          for (const lora of loras)
            torch.noGrad(() =>
              torch.scope(() => {
                for (const t of lora.loraParameters().values()) t.fill_(0.02);
              }),
            );
          const logits = [training, inference].map((m) => torch.noGrad(() => m.forward(ids)));
          assert.ok(maxAbsDiff(logits[0] as torch.Tensor, logits[1] as torch.Tensor) < TOLERANCE);
        } finally {
          for (const lora of loras) lora.unload();
        }
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    assert.throws(() => CausalLM.load(modelDir('qwen2-tied'), { layout: 'inference', requiresGrad: true }), /training layout/);
  });
});

test('inference layout, 1 to 64 rows (packed float32 projections): the training logits, also after a weight sync', () => {
  // every projection and the LM head then run torch.packedLinear on packed copies (CPUs with AVX2); they must
  // follow writes to the parameters. A vocabulary of 2,500 and widths that are not multiples of 16 (the panels)
  const alphabet = String.fromCharCode(...Array.from({ length: 2500 }, (_, i) => 0x4e00 + i));
  for (const tieWordEmbeddings of [true, false]) {
    const dir = mkdtempSync(join(tmpdir(), 'trinity-packed-'));
    try {
      initModel(dir, {
        hiddenSize: 40,
        numLayers: 2,
        numHeads: 4,
        numKeyValueHeads: 2,
        intermediateSize: 72,
        alphabet,
        tieWordEmbeddings,
        seed: 5,
      });
      const training = CausalLM.load(dir);
      const inference = CausalLM.load(dir, { layout: 'inference' });
      try {
        assert.ok(inference.config.vocabSize > 2048, `vocabulary ${inference.config.vocabSize}`);
        torch.noGrad(() =>
          torch.scope(() => {
            const ids = torch.randint(0, inference.config.vocabSize, [4, 3], { generator: new torch.Generator(7) });
            const one = ids.narrow(0, 0, 1).narrow(1, 0, 1);
            const many = torch.randint(0, inference.config.vocabSize, [2, 40], { generator: new torch.Generator(8) });
            const expected = training.forward(ids);
            const kernelCalls = (f: () => torch.Tensor): [torch.Tensor, number] => {
              const recording = recordNativeCalls(['packedLinear']);
              try {
                return [f(), recording.calls.length];
              } finally {
                recording.stop();
              }
            };
            const [logits, calls] = kernelCalls(() => inference.forward(ids));
            assert.ok(maxAbsDiff(logits, expected) < 1e-5, `tied ${tieWordEmbeddings}`);
            // 4 projections per layer and the head, on CPUs that run the kernel
            assert.equal(calls, torch.packedLinearSupported() ? 2 * 4 + 1 : 0);
            assert.ok(maxAbsDiff(inference.forward(one), training.forward(one)) < 1e-5);
            // 80 rows: BLAS, or the kernel where BLAS is the slower one at any row count (packedRowLimit)
            const [manyLogits, manyCalls] = kernelCalls(() => inference.forward(many));
            assert.ok(maxAbsDiff(manyLogits, training.forward(many)) < 1e-5, '80 rows');
            const packedPrefill = torch.packedLinearSupported() && packedRowLimit('float32', packedRowsCpu()) >= 80;
            assert.equal(manyCalls, packedPrefill ? 2 * 4 + 1 : 0);
            // again: now from the copies kept since the first call
            assert.ok(maxAbsDiff(inference.forward(ids), expected) < 1e-5, `the kept copies (tied ${tieWordEmbeddings})`);
            // a weight sync writes parameters in place (views into the fused matrices): the packed copies must follow
            const head = tieWordEmbeddings ? 'model.embed_tokens.weight' : 'lm_head.weight';
            const names = [
              head,
              'model.layers.0.self_attn.k_proj.weight',
              'model.layers.0.self_attn.v_proj.bias',
              'model.layers.1.self_attn.o_proj.weight',
              'model.layers.1.mlp.up_proj.weight',
              'model.layers.0.mlp.down_proj.weight',
            ];
            for (const name of names) {
              for (const m of [training, inference]) {
                const p = m.parameters().get(name) as torch.Tensor;
                p.copy_(p.mul(-2));
              }
              assert.ok(
                maxAbsDiff(inference.forward(ids), training.forward(ids)) < 1e-5,
                `after ${name} changed (tied ${tieWordEmbeddings})`,
              );
            }
          }),
        );
      } finally {
        training.dispose();
        inference.dispose();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
});

test('packedRowLimit: the kernel for prefill too only where libtorch multiplies slower at any row count', () => {
  const cpu = (c: Partial<PackedRowsCpu>): PackedRowsCpu => ({
    bf16Matmul: true,
    float32Isa: 'avx512',
    blasHoldsToAvx2: false,
    ...c,
  });
  // float32: up to 64 rows, unless the kernel runs AVX-512 and BLAS holds to AVX2 (MKL on AMD CPUs)
  assert.equal(packedRowLimit('float32', cpu({})), 64); // Intel with AVX-512: MKL at full width
  assert.equal(packedRowLimit('float32', cpu({ blasHoldsToAvx2: true })), Number.POSITIVE_INFINITY);
  assert.equal(packedRowLimit('float32', cpu({ float32Isa: 'avx2', blasHoldsToAvx2: true })), 64);
  assert.equal(packedRowLimit('float32', cpu({ float32Isa: 'avx2' })), 64); // an AVX2-only CPU
  // bfloat16: at any row count where libtorch has no fast bf16 product, whatever BLAS does for float32
  assert.equal(packedRowLimit('bfloat16', cpu({ bf16Matmul: false, float32Isa: 'avx2' })), Number.POSITIVE_INFINITY);
  assert.equal(packedRowLimit('bfloat16', cpu({ bf16Matmul: true, blasHoldsToAvx2: true })), 64);
  assert.equal(packedRowLimit('bfloat16', cpu({ bf16Matmul: false, blasHoldsToAvx2: true })), Number.POSITIVE_INFINITY);
  // this CPU's answers are consistent: BLAS "holds to AVX2" only where the kernel runs AVX-512
  const here = packedRowsCpu();
  if (here.blasHoldsToAvx2) assert.equal(here.float32Isa, 'avx512');
});

test('inference layout in bfloat16 (packed bf16 products on AVX2 CPUs) gives the bf16 training logits up to bf16 rounding', () => {
  // measured: identical for 12 rows, at most 0.03 apart for 80 (fp32 vs bf16 itself: 0.04-0.14 on these fixtures)
  for (const name of ['qwen2-tied', 'qwen3-untied'] as const) {
    const training = CausalLM.load(modelDir(name), { dtype: 'bfloat16' });
    const inference = CausalLM.load(modelDir(name), { dtype: 'bfloat16', layout: 'inference' });
    try {
      torch.noGrad(() =>
        torch.scope(() => {
          for (const shape of [
            [4, 3],
            [2, 40],
          ]) {
            const ids = torch.randint(0, training.config.vocabSize, shape, { generator: new torch.Generator(7) });
            const diff = maxAbsDiff(inference.forward(ids).float(), training.forward(ids).float());
            assert.ok(diff < 0.06, `${name} [${shape.join(', ')}]: ${diff}`);
          }
        }),
      );
    } finally {
      training.dispose();
      inference.dispose();
    }
  }
});
