// Qwen3-MoE and Qwen2-MoE against transformers (fixtures and references written by scripts/fixtures/hf_moe.py): the
// config's expert keys, logits (float32, 1e-4; plain and padded; training and inference layouts), the routed experts and router
// logits of each sparse layer, greedy generation through the rollout engine, one training step's loss and gradients
// with the load-balancing aux loss, saving in the per-expert layout transformers loads, and `model init`.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { RolloutEngine } from '../../src/engine/index.js';
import { CausalLM, forwardBackward, initModel, loadModelConfig, parseModelConfig } from '../../src/model/index.js';
import { loadBalancingLoss } from '../../src/model/moe.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get, maxAbsDiff, repoRoot } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;
const qwen3Dir = `${fixturesDir}qwen3-moe`;

test('the config reads the expert keys (num_local_experts as transformers 5 writes it) and which layers are sparse', () => {
  const dir = qwen3Dir;
  const config = loadModelConfig(dir);
  assert.equal(config.architecture, 'Qwen3MoeForCausalLM');
  assert.equal(config.headDim, 16, 'head_dim derived from hidden_size / num_attention_heads');
  assert.equal(config.qkNorm, true);
  assert.deepEqual(config.moe, {
    numExperts: 8,
    numExpertsPerTok: 2,
    moeIntermediateSize: 32,
    normTopkProb: true,
    routerAuxLossCoef: 0.5,
    sparseLayers: [true, false, true],
    sharedExpertIntermediateSize: null,
  });
  const qwen2 = loadModelConfig(`${fixturesDir}qwen2-moe`);
  assert.deepEqual(
    [qwen2.architecture, qwen2.qkvBias, qwen2.outputBias, qwen2.qkNorm],
    ['Qwen2MoeForCausalLM', true, false, false],
  );
  assert.deepEqual([qwen2.moe?.sharedExpertIntermediateSize, qwen2.moe?.normTopkProb], [48, false]);
  const raw = JSON.parse(readFileSync(`${dir}/config.json`, 'utf8')) as Record<string, unknown>;
  const withKey = (patch: Record<string, unknown>) => () => parseModelConfig({ ...raw, ...patch }, 'c.json');
  assert.equal(withKey({ num_experts: 4, num_local_experts: undefined })().moe?.numExperts, 4);
  assert.deepEqual(withKey({ decoder_sparse_step: 3, mlp_only_layers: [] })().moe?.sparseLayers, [false, false, true]);
  assert.throws(withKey({ num_experts_per_tok: 9 }), /c\.json: key 'num_experts_per_tok': 9 exceeds num_local_experts 8/);
  assert.throws(withKey({ mlp_only_layers: [3] }), /key 'mlp_only_layers': expected a list of layer indices in 0\.\.2/);
  assert.throws(withKey({ router_aux_loss_coef: -1 }), /key 'router_aux_loss_coef': expected a number >= 0/);
  assert.throws(withKey({ moe_intermediate_size: 0 }), /key 'moe_intermediate_size': expected a positive integer/);
});

const tmp = mkdtempSync(join(tmpdir(), 'moe-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

for (const name of ['qwen3-moe', 'qwen2-moe'] as const) {
  describe(name, () => {
    const dir = `${fixturesDir}${name}`;
    let ref: Map<string, torch.Tensor>;
    before(() => {
      ref = torch.loadSafetensors(`${dir}/reference.safetensors`);
      for (const t of ref.values()) torch.keep(t);
    });
    after(() => disposeAll(ref.values()));

    for (const layout of ['training', 'inference'] as const) {
      describe(`${layout} layout`, () => {
        let model: CausalLM;
        before(() => {
          model = CausalLM.load(dir, { layout });
        });
        after(() => model.dispose());

        test('logits equal transformers, and each sparse layer routes every token to the same experts', () => {
          torch.scope(() => {
            const routed: { layer: number; logits: torch.Tensor; experts: torch.Tensor }[] = [];
            const logits = model.forward(get(ref, 'plain.ids'), {
              onRouting: (layer, routing) =>
                routed.push({ layer, logits: torch.keep(routing.logits), experts: torch.keep(routing.experts) }),
            });
            const diff = maxAbsDiff(logits, get(ref, 'plain.logits'));
            assert.ok(diff < TOLERANCE, `max |ours - transformers| = ${diff}`);
            const sparse = (model.config.moe?.sparseLayers ?? []).flatMap((isSparse, i) => (isSparse ? [i] : []));
            assert.deepEqual(
              routed.map((r) => r.layer),
              sparse,
            );
            routed.forEach((r, j) => {
              assert.ok(
                maxAbsDiff(r.logits, get(ref, `plain.router_logits.${j}`)) < TOLERANCE,
                `router logits of layer ${r.layer}`,
              );
              assert.deepEqual(r.experts.toArray(), get(ref, `plain.experts.${j}`).toArray(), `experts of layer ${r.layer}`);
            });
            disposeAll(routed.flatMap((r) => [r.logits, r.experts]));
          });
        });

        test('logits equal transformers on a left- and right-padded batch', () => {
          torch.scope(() => {
            const mask = get(ref, 'padded.mask');
            const logits = model.forward(get(ref, 'padded.ids'), { attentionMask: mask });
            const diff = maxAbsDiff(logits, get(ref, 'padded.logits'), mask.unsqueeze(-1));
            assert.ok(diff < TOLERANCE, `max |ours - transformers| over real tokens = ${diff}`);
          });
        });
      });
    }

    test('bfloat16 (both layouts): logits close to the float32 reference wherever the routing is the same', () => {
      // bf16 rounding can flip a near-tie of the router: that token then takes another expert (transformers' bf16
      // flips its own ties), so the closeness is checked on the tokens every layer routes as transformers' fp32 did
      const ids = get(ref, 'plain.ids');
      const [batch, seq] = ids.shape as [number, number];
      for (const layout of ['training', 'inference'] as const) {
        const model = CausalLM.load(dir, { dtype: 'bfloat16', layout });
        try {
          torch.scope(() => {
            const same = torch.ones([batch * seq], { dtype: 'bool' });
            let j = 0;
            const logits = model.forward(ids, {
              onRouting: (_, r) => {
                const expected = get(ref, `plain.experts.${j++}`).sort({ dim: -1 }).values;
                same.copy_(same.logicalAnd(r.experts.sort({ dim: -1 }).values.eq(expected).all(-1)));
              },
            });
            assert.equal(logits.dtype, 'bfloat16');
            const share = same.float().mean().item();
            assert.ok(share >= 0.75, `${layout}: bf16 routes only ${share} of the tokens as fp32`);
            const expected = get(ref, 'plain.logits');
            const scale = expected.abs().max().item();
            const diff = maxAbsDiff(logits, expected, same.reshape([batch, seq, 1]));
            assert.ok(diff < 0.05 * scale, `${layout}: bf16 differs by ${diff} (logit scale ${scale})`);
          });
        } finally {
          model.dispose();
        }
      }
    });

    test('the engine decodes a batch of prompts (each routed on its own) as it decodes each alone', async () => {
      const engine = new RolloutEngine(CausalLM.load(dir, { layout: 'inference' }), { maxLength: 32, slots: 3, ownsModel: true });
      try {
        const prompts = (get(ref, 'padded.ids').toArray() as number[][]).map((row) => row.slice(0, 5).filter((t) => t > 2));
        const request = (promptIds: number[]) => ({ promptIds, temperature: 0, maxTokens: 6, ignoreEos: true });
        const together = await Promise.all(prompts.map((p) => engine.generate(request(p))));
        for (const [i, p] of prompts.entries()) {
          const alone = await engine.generate(request(p));
          assert.deepEqual(together[i]?.completions[0]?.tokenIds, alone.completions[0]?.tokenIds, `prompt ${i}`);
        }
      } finally {
        await engine.close();
      }
    });

    test("greedy generation through the rollout engine equals transformers' generate(), decoding eagerly", async () => {
      const model = CausalLM.load(dir, { layout: 'inference' });
      assert.throws(
        () => new RolloutEngine(model, { maxLength: 32, captureDecode: true }),
        /captureDecode is not available for Qwen[23]MoeForCausalLM/,
      );
      const engine = new RolloutEngine(model, { maxLength: 32, ownsModel: true });
      try {
        assert.equal(engine.decodeStepStats, null, 'no capture for a mixture of experts');
        const prompt = (get(ref, 'generate.prompt').toArray() as number[][])[0] as number[];
        const result = await engine.generate({ promptIds: prompt, temperature: 0, maxTokens: 8, ignoreEos: true });
        assert.deepEqual(result.completions[0]?.tokenIds, (get(ref, 'generate.tokens').toArray() as number[][])[0]);
      } finally {
        await engine.close();
      }
    });

    test('one training step: LM loss + router_aux_loss_coef * aux and every gradient equal transformers (1e-4)', () => {
      const model = CausalLM.load(dir, { requiresGrad: true });
      try {
        torch.scope(() => {
          const moe = model.config.moe as NonNullable<typeof model.config.moe>;
          const ids = get(ref, 'train.ids');
          const mask = get(ref, 'train.mask');
          const routerLogits: torch.Tensor[] = [];
          const logits = model.forward(ids, {
            attentionMask: mask,
            onRouting: (_, r) => routerLogits.push(torch.keep(r.logits)),
          });
          // transformers' causal LM loss: logits[:, :-1] predict labels[:, 1:], mean over labels != -100
          const [batch, seq, vocab] = logits.shape as [number, number, number];
          const lmLoss = torch.crossEntropy(
            logits.narrow(1, 0, seq - 1).reshape([-1, vocab]),
            get(ref, 'train.labels')
              .narrow(1, 1, seq - 1)
              .reshape([-1]),
          );
          const aux = loadBalancingLoss(routerLogits, moe, mask.reshape([batch * seq]));
          const loss = lmLoss.add(aux.mul(moe.routerAuxLossCoef));
          assert.ok(Math.abs(aux.item() - get(ref, 'train.aux_loss').item()) < 1e-5, `aux ${aux.item()}`);
          assert.ok(Math.abs(loss.item() - get(ref, 'train.loss').item()) < TOLERANCE, `loss ${loss.item()}`);
          loss.backward();
          disposeAll(routerLogits);
          let compared = 0;
          for (const [name, p] of model.parameters()) {
            const expected = ref.get(`grad.${name}`);
            assert.ok(expected !== undefined, `transformers has a gradient for ${name}`);
            // an expert no token was routed to has no gradient here; transformers' fused 3-d tensor has zeros there
            const diff = p.grad === null ? expected.abs().max().item() : maxAbsDiff(p.grad, expected);
            assert.ok(diff < TOLERANCE, `${name}: max |grad diff| = ${diff}`);
            compared++;
          }
          assert.equal(compared, [...ref.keys()].filter((k) => k.startsWith('grad.')).length);
          // the aux term matters here: without it the router's gradient is off
          const routerGrad = model.parameters().get('model.layers.0.mlp.gate.weight')?.grad as torch.Tensor;
          assert.ok(routerGrad.abs().max().item() > 1e-3);
        });
      } finally {
        model.dispose();
      }
    });

    test("without the aux term the router's gradient differs from transformers' (the test above can fail)", () => {
      const model = CausalLM.load(dir, { requiresGrad: true });
      try {
        torch.scope(() => {
          const ids = get(ref, 'train.ids');
          const logits = model.forward(ids, { attentionMask: get(ref, 'train.mask') });
          const [, seq, vocab] = logits.shape as [number, number, number];
          torch
            .crossEntropy(
              logits.narrow(1, 0, seq - 1).reshape([-1, vocab]),
              get(ref, 'train.labels')
                .narrow(1, 1, seq - 1)
                .reshape([-1]),
            )
            .backward();
          const name = 'model.layers.0.mlp.gate.weight';
          const diff = maxAbsDiff(model.parameters().get(name)?.grad as torch.Tensor, get(ref, `grad.${name}`));
          assert.ok(diff > 10 * TOLERANCE, `router gradient without aux differs by only ${diff}`);
        });
      } finally {
        model.dispose();
      }
    });

    for (const [checkpoint, chunkSize] of [
      [false, 256],
      [true, 3],
    ] as const) {
      test(`forwardBackward with routerAuxLoss (checkpoint ${checkpoint}, chunkSize ${chunkSize}): loss and gradients equal transformers`, () => {
        const model = CausalLM.load(dir, { requiresGrad: true });
        try {
          torch.scope(() => {
            const moe = model.config.moe as NonNullable<typeof model.config.moe>;
            const mask = get(ref, 'train.mask');
            // transformers' loss: mean NLL over the labels that are not -100, each predicted from the position before
            const labelled = get(ref, 'train.labels').slice(1, 1).ne(-100).float();
            const result = forwardBackward(
              model,
              get(ref, 'train.ids'),
              ({ logProbs }) => logProbs.mul(labelled).sum().neg().div(labelled.sum()),
              {
                attentionMask: mask,
                checkpoint,
                chunkSize,
                routerAuxLoss: moe.routerAuxLossCoef,
              },
            );
            assert.ok(Math.abs((result.routerAuxLoss as torch.Tensor).item() - get(ref, 'train.aux_loss').item()) < 1e-5);
            assert.ok(Math.abs(result.loss.item() - get(ref, 'train.loss').item()) < TOLERANCE, `loss ${result.loss.item()}`);
            for (const [name, p] of model.parameters()) {
              const expected = get(ref, `grad.${name}`);
              const diff = p.grad === null ? expected.abs().max().item() : maxAbsDiff(p.grad, expected);
              assert.ok(diff < TOLERANCE, `${name}: max |grad diff| = ${diff}`);
            }
          });
        } finally {
          model.dispose();
        }
      });
    }

    test('save writes the per-expert layout; it loads back equal, and transformers loads it with equal logits', () => {
      const model = CausalLM.load(dir);
      const out = join(tmp, name);
      try {
        model.save(out);
      } finally {
        model.dispose();
      }
      const header = torch.readSafetensorsHeader(join(out, 'model.safetensors'));
      assert.deepEqual(header.entries.get('model.layers.0.mlp.experts.7.down_proj.weight')?.shape, [64, 32]);
      assert.deepEqual(header.entries.get('model.layers.0.mlp.gate.weight')?.shape, [8, 64]);
      if (name === 'qwen3-moe')
        assert.ok(!header.entries.has('model.layers.1.mlp.gate.weight'), 'layer 1 is dense (mlp_only_layers)');
      else assert.deepEqual(header.entries.get('model.layers.1.mlp.shared_expert_gate.weight')?.shape, [1, 64]);
      const reloaded = CausalLM.load(out);
      try {
        torch.scope(() => {
          assert.ok(maxAbsDiff(reloaded.forward(get(ref, 'plain.ids')), get(ref, 'plain.logits')) < TOLERANCE);
        });
      } finally {
        reloaded.dispose();
      }
      const python = join(repoRoot, '.cache/python-ref/bin/python');
      assert.ok(existsSync(python), `${python} not found: run \`bash scripts/python-env.sh\``);
      const output = execFileSync(
        python,
        [join(repoRoot, 'scripts/fixtures/hf_models.py'), 'verify', out, `${dir}/reference.safetensors`],
        { encoding: 'utf8', env: { ...process.env, HF_HUB_OFFLINE: '1', TRANSFORMERS_OFFLINE: '1' } },
      );
      const result = JSON.parse(output.trim().split('\n').at(-1) as string) as { ok: boolean; architectures: string[] };
      assert.equal(result.ok, true, output);
      assert.deepEqual(result.architectures, [loadModelConfig(dir).architecture]);
    });
  });
}

describe('model init', () => {
  test('model init writes a random qwen3_moe that loads and runs', () => {
    const out = join(tmp, 'init');
    const { config } = initModel(out, {
      architecture: 'qwen3_moe',
      hiddenSize: 32,
      numLayers: 2,
      numExperts: 4,
      numExpertsPerTok: 2,
    });
    assert.equal(config.model_type, 'qwen3_moe');
    const model = CausalLM.load(out);
    try {
      assert.deepEqual(model.config.moe?.sparseLayers, [true, true]);
      assert.equal(model.parameters().has('model.layers.1.mlp.experts.3.up_proj.weight'), true);
      torch.scope(() => {
        const logits = model.forward(torch.tensor([[1, 2, 3]], { dtype: 'int64' }));
        assert.deepEqual(logits.shape, [1, 3, model.config.vocabSize]);
        assert.equal(logits.isfinite().all().item(), 1);
      });
    } finally {
      model.dispose();
    }
    const cli = (...args: string[]) =>
      execFileSync(process.execPath, ['--import', 'tsx', join(repoRoot, 'src/cli/main.ts'), 'model', 'init', ...args], {
        encoding: 'utf8',
        stdio: 'pipe',
      });
    cli(
      join(tmp, 'cli'),
      '--arch',
      'qwen3_moe',
      '--hidden-size',
      '32',
      '--layers',
      '1',
      '--experts',
      '4',
      '--experts-per-tok',
      '1',
    );
    const written = JSON.parse(readFileSync(join(tmp, 'cli', 'config.json'), 'utf8')) as Record<string, unknown>;
    assert.deepEqual([written.architectures, written.num_experts, written.num_experts_per_tok], [['Qwen3MoeForCausalLM'], 4, 1]);
    assert.throws(
      () => cli(join(tmp, 'cli2'), '--experts', '4'),
      /--experts needs --arch qwen2_moe or qwen3_moe, got --arch qwen2/,
    );
    assert.throws(
      () => initModel(join(tmp, 'bad'), { architecture: 'qwen3_moe', numExperts: 2, numExpertsPerTok: 3 }),
      /num_experts_per_tok': 3 exceeds num_experts 2/,
    );
  });
});
