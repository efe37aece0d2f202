// Mixture of experts in bfloat16 against transformers' float32 references (scripts/fixtures/hf_moe.py; the fixture
// weights are exact in bf16, so only the arithmetic differs): the forward (training and inference layouts) and one
// training step with the load-balancing loss stay within the bounds stated at the assertions.
//
// bf16 keeps 8 significant bits: each rounding is off by up to 2^-9 ≈ 0.2% relative, and a few layers of them, the
// router's softmax and the LM head's sums of 64 products leave the logits about 1% off (measured: 1.2% and 1.0% in
// norm, at most 0.08 on logits up to 4.4). Top-k routing is discontinuous: a token whose two best experts are
// nearly tied can go to another expert in bf16, and then that expert's gradient is not a rounded version of float32's
// but a different one. The training step therefore replays the float32 forward's routing (router replay), as an
// RL trainer with algorithm.enable_router_replay does with the engine's.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CausalLM, forwardBackward } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get } from './helpers/fixtures.js';

for (const name of ['qwen3-moe', 'qwen2-moe']) {
  const dir = `${fixturesDir}${name}`;
  const loadReference = () => {
    const ref = torch.loadSafetensors(`${dir}/reference.safetensors`);
    for (const t of ref.values()) torch.keep(t);
    return ref;
  };

  test(`${name} in bf16: logits within 2% (norm) and 0.1 of float32's, both layouts; the same experts chosen`, () => {
    const ref = loadReference();
    try {
      for (const layout of ['training', 'inference'] as const) {
        const model = CausalLM.load(dir, { dtype: 'bfloat16', layout });
        try {
          torch.scope(() => {
            // the same set of k experts per token (their order can swap when their weights round equal)
            const chosen: number[][][] = [];
            const sorted = (t: torch.Tensor) => t.sort({ dim: -1 }).values.toArray() as number[][];
            const logits = model.forward(get(ref, 'plain.ids'), { onRouting: (_, r) => chosen.push(sorted(r.experts)) });
            assert.equal(logits.dtype, 'bfloat16');
            const expected = get(ref, 'plain.logits');
            const error = logits.float().sub(expected);
            const relative = error.norm().item() / expected.norm().item();
            assert.ok(relative < 2e-2, `${layout}: |bf16 - fp32| / |fp32| = ${relative}`);
            assert.ok(error.abs().max().item() < 0.1, `${layout}: max |bf16 - fp32| = ${error.abs().max().item()}`);
            chosen.forEach((experts, j) => {
              assert.deepEqual(experts, sorted(get(ref, `plain.experts.${j}`)), `${layout}: sparse layer ${j}`);
            });
          });
        } finally {
          model.dispose();
        }
      }
    } finally {
      disposeAll(ref.values());
    }
  });

  test(`${name} in bf16: a training step (aux loss, float32 routing replayed) has float32's loss within 1% and gradients within 5%`, () => {
    const ref = loadReference();
    const model = CausalLM.load(dir, { dtype: 'bfloat16', requiresGrad: true });
    const float32 = CausalLM.load(dir);
    try {
      torch.scope(() => {
        const ids = get(ref, 'train.ids');
        const mask = get(ref, 'train.mask');
        const [rows, length] = ids.shape as [number, number];
        const routing: torch.Tensor[] = [];
        torch.noGrad(() =>
          float32.forward(ids, {
            attentionMask: mask,
            onRouting: (layer, r) => {
              routing[layer] = torch.keep(r.experts.reshape([rows, length, -1]));
            },
          }),
        );
        const moe = model.config.moe as NonNullable<typeof model.config.moe>;
        // transformers' loss: mean NLL over the labels that are not -100, each predicted from the position before
        const labelled = get(ref, 'train.labels').slice(1, 1).ne(-100).float();
        const result = forwardBackward(model, ids, ({ logProbs }) => logProbs.mul(labelled).sum().neg().div(labelled.sum()), {
          attentionMask: mask,
          routerAuxLoss: moe.routerAuxLossCoef,
          replayRouting: [...routing],
        });
        disposeAll(routing.filter((t) => t !== undefined));
        const loss = get(ref, 'train.loss').item();
        assert.ok(Math.abs(result.loss.item() - loss) < 1e-2 * loss, `loss ${result.loss.item()} in bf16, ${loss} in fp32`);
        const aux = get(ref, 'train.aux_loss').item();
        const bf16Aux = (result.routerAuxLoss as torch.Tensor).item();
        // the aux loss counts each token's own top-k, not the replayed one: a near-tie flipped in bf16 moves it by 1/R
        assert.ok(Math.abs(bf16Aux - aux) < 2e-2 * aux, `aux ${bf16Aux} in bf16, ${aux} in fp32`);
        let errorSquares = 0;
        let normSquares = 0;
        for (const [parameter, p] of model.parameters()) {
          const expected = get(ref, `grad.${parameter}`);
          assert.ok(p.grad === null || p.grad.dtype === 'bfloat16');
          const error = (p.grad === null ? expected : p.grad.float().sub(expected)).norm().item();
          const norm = expected.norm().item();
          errorSquares += error ** 2;
          normSquares += norm ** 2;
          // each parameter with a gradient to speak of (an expert with few tokens has a small one) within 15%
          if (norm > 1e-3) assert.ok(error < 0.15 * norm, `${parameter}: |bf16 - fp32| / |fp32| = ${error / norm}`);
        }
        const relative = Math.sqrt(errorSquares / normSquares);
        assert.ok(relative < 5e-2, `all gradients: |bf16 - fp32| / |fp32| = ${relative}`);
      });
    } finally {
      model.dispose();
      float32.dispose();
      disposeAll(ref.values());
    }
  });
}
