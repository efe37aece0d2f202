// LoRA on the experts of mixture-of-experts models (qwen3_moe, qwen2_moe with its shared expert): adapters in PEFT's
// per-expert format (written by scripts/fixtures/lora_moe_reference.py) give transformers' logits and gradients of
// the hand-merged model (1e-4); merge() adds scale * B_e A_e to each expert's weight; target_modules select expert
// projections as PEFT matches them; training moves only the adapters of the experts that got tokens; save → load.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { CausalLM, LoraModel } from '../../src/model/index.js';
import * as torch from '../../src/torch/index.js';
import { disposeAll, fixturesDir, get, maxAbsDiff, repoRoot } from './helpers/fixtures.js';

const TOLERANCE = 1e-4;
const loraFixtures = join(repoRoot, 'test/fixtures/lora');
const tmp = mkdtempSync(join(tmpdir(), 'lora-moe-'));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** The adapters of the fixtures and the base model each was made on. */
const MOE_ADAPTERS = [
  ['qwen3-moe-experts', 'qwen3-moe'],
  ['qwen2-moe-experts', 'qwen2-moe'],
] as const;

function loadKept(file: string): Map<string, torch.Tensor> {
  const tensors = torch.loadSafetensors(file);
  for (const t of tensors.values()) torch.keep(t);
  return tensors;
}

/** Mean next-token cross-entropy over ids [B, T] (the fixture's loss). */
function nextTokenLoss(model: CausalLM, ids: torch.Tensor): torch.Tensor {
  const [rows, length] = ids.shape as [number, number];
  const logits = model.forward(ids).narrow(1, 0, length - 1);
  const targets = ids.narrow(1, 1, length - 1).reshape([-1]);
  return torch.crossEntropy(logits.reshape([rows * (length - 1), -1]), targets);
}

for (const [name, base] of MOE_ADAPTERS) {
  test(`${name}: logits and adapter gradients equal transformers' hand-merged model; merge adds scale B_e A_e to each expert`, () => {
    const model = CausalLM.load(`${fixturesDir}${base}`);
    const ref = loadKept(join(loraFixtures, name, 'reference.safetensors'));
    const adapterFile = loadKept(join(loraFixtures, name, 'adapter_model.safetensors'));
    try {
      const ids = get(ref, 'ids');
      torch.scope(() => assert.ok(maxAbsDiff(model.forward(ids), get(ref, 'base.logits')) < TOLERANCE));
      const lora = LoraModel.load(model, join(loraFixtures, name));
      const experts = lora.modules.filter((m) => m.includes('.mlp.experts.'));
      assert.equal(experts.length, 2 * 8 * 3, 'every expert of both sparse layers is adapted');
      if (base === 'qwen2-moe') assert.ok(lora.modules.includes('model.layers.1.mlp.shared_expert.down_proj'));
      else assert.ok(lora.modules.includes('model.layers.1.mlp.gate_proj'), "the dense layer's gate_proj matches too");
      torch.scope(() => {
        const loss = nextTokenLoss(model, ids);
        loss.backward();
        const adapted = torch.noGrad(() => model.forward(ids));
        assert.ok(maxAbsDiff(adapted, get(ref, 'logits')) < TOLERANCE, `logits: ${maxAbsDiff(adapted, get(ref, 'logits'))}`);
        assert.ok(maxAbsDiff(adapted, get(ref, 'base.logits')) > 0.5, 'the adapter changes the logits');
        assert.ok(Math.abs(loss.item() - get(ref, 'loss').item()) < TOLERANCE);
        let worst = 0;
        let reached = 0;
        for (const [tensorName, parameter] of lora.loraParameters()) {
          // an expert no token was routed to is not in the graph: no gradient, which the reference has as zeros
          const grad = parameter.grad ?? torch.zerosLike(parameter);
          worst = Math.max(worst, maxAbsDiff(grad, get(ref, `grad.${tensorName}`)));
          if (tensorName.includes('.experts.') && grad.abs().max().item() > 0) reached++;
        }
        assert.ok(worst < TOLERANCE, `max |adapter gradient - reference| = ${worst}`);
        assert.ok(reached > experts.length, `gradient reaches the routed experts' adapters (${reached} tensors)`);
      });
      // merge: W_e += scale * B_e A_e, by hand from the file's tensors
      const expertWeight = 'model.layers.2.mlp.experts.5.down_proj';
      const layer = base === 'qwen3-moe' ? expertWeight : expertWeight.replace('layers.2', 'layers.1');
      const before = torch.keep(model.parameters().get(`${layer}.weight`)?.clone() as torch.Tensor);
      lora.merge();
      torch.scope(() => {
        const a = get(adapterFile, `base_model.model.${layer}.lora_A.weight`);
        const b = get(adapterFile, `base_model.model.${layer}.lora_B.weight`);
        const expected = before.add(b.matmul(a).mul(lora.scale));
        assert.ok(maxAbsDiff(model.parameters().get(`${layer}.weight`) as torch.Tensor, expected) < 1e-6);
        assert.ok(maxAbsDiff(model.forward(ids), get(ref, 'logits')) < TOLERANCE, 'merged logits');
      });
      lora.unload();
      before.dispose();
    } finally {
      model.dispose();
      disposeAll(ref.values());
      disposeAll(adapterFile.values());
    }
  });
}

test('target_modules select expert projections as PEFT matches them (names, regex, exclusions)', () => {
  const model = CausalLM.load(`${fixturesDir}qwen2-moe`);
  try {
    const modulesOf = (options: Parameters<typeof LoraModel.attach>[1]) => {
      const lora = LoraModel.attach(model, options);
      const modules = lora.modules;
      lora.unload();
      return modules;
    };
    const all = modulesOf({ targetModules: 'all-linear' });
    // per layer: q, k, v, o + 8 experts x 3 + the shared expert's 3 (the routers are not adapted)
    assert.equal(all.length, 2 * (4 + 8 * 3 + 3));
    assert.ok(!all.some((m) => m.endsWith('.mlp.gate') || m.endsWith('shared_expert_gate')));
    assert.deepEqual(modulesOf({ targetModules: '.*\\.experts\\.\\d+\\.down_proj', layersToTransform: [0] }), [
      ...Array.from({ length: 8 }, (_, e) => `model.layers.0.mlp.experts.${e}.down_proj`),
    ]);
    const noShared = modulesOf({ targetModules: ['up_proj'], excludeModules: '.*shared_expert.*' });
    assert.equal(noShared.length, 2 * 8);
    assert.throws(() => LoraModel.attach(model, { targetModules: ['gate'] }), /match no projection.*mlp\.experts\.\{e\}/);
  } finally {
    model.dispose();
  }
});

test('AdamW on expert adapters lowers a loss, moves only the adapters of routed experts, and save → load reproduces them', () => {
  const model = CausalLM.load(`${fixturesDir}qwen3-moe`);
  const other = CausalLM.load(`${fixturesDir}qwen3-moe`);
  const original = new Map([...model.parameters()].map(([n, t]) => [n, torch.keep(t.detach().clone())]));
  try {
    const lora = LoraModel.attach(model, { r: 4, loraAlpha: 8, targetModules: '.*\\.experts\\.\\d+\\.\\w+_proj', seed: 4 });
    assert.equal(lora.modules.length, 2 * 8 * 3);
    const params = lora.loraParameters();
    const optimizer = new torch.AdamW([...params.values()], { lr: 1e-2, weightDecay: 0 });
    torch.manualSeed(12);
    // one short row: its 4 tokens reach at most 8 of the 16 (layer, expert) pairs, so some experts get no token
    const ids = torch.keep(torch.randint(3, 120, [1, 4]));
    const losses: number[] = [];
    let untouched = 0;
    for (let step = 0; step < 8; step++) {
      losses.push(
        torch.scope(() => {
          const loss = nextTokenLoss(model, ids);
          loss.backward();
          return loss.item();
        }),
      );
      if (step === 0) {
        // B = 0 at the start: dB = scale G A^T is non-zero exactly for the experts some token was routed to
        const routed = new Set<string>();
        torch.noGrad(() =>
          model.forward(ids, {
            onRouting: (layer, routing) => {
              for (const e of routing.experts.reshape([-1]).toArray() as number[]) routed.add(`${layer}.${e}`);
            },
          }),
        );
        for (const [tensorName, parameter] of params) {
          if (!tensorName.includes('lora_B')) continue;
          const [, layer, expert] = /layers\.(\d+)\.mlp\.experts\.(\d+)\./.exec(tensorName) as RegExpExecArray;
          const grad = parameter.grad; // null: the expert was not in the graph
          const moved = grad !== null && torch.scope(() => grad.abs().max().item() > 0);
          assert.equal(moved, routed.has(`${layer}.${expert}`), `${tensorName}: gradient iff the expert was routed to`);
          if (!moved) untouched++;
        }
      }
      optimizer.step();
      optimizer.zeroGrad();
    }
    assert.ok(untouched > 0, 'some experts got no token');
    assert.ok((losses.at(-1) as number) < (losses[0] as number) - 0.1, `loss ${losses.map((l) => l.toFixed(3)).join(' → ')}`);
    for (const [n, t] of model.parameters()) assert.equal(maxAbsDiff(t, original.get(n) as torch.Tensor), 0, `${n} frozen`);

    const dir = join(tmp, 'experts');
    lora.save(dir);
    const header = torch.readSafetensorsHeader(join(dir, 'adapter_model.safetensors'));
    assert.ok(header.entries.has('base_model.model.model.layers.2.mlp.experts.7.down_proj.lora_B.weight'));
    const config = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(config.target_modules, '.*\\.experts\\.\\d+\\.\\w+_proj');
    const reloaded = LoraModel.load(other, dir);
    torch.scope(() => assert.equal(maxAbsDiff(other.forward(ids), model.forward(ids)), 0));
    reloaded.unload();
    optimizer.dispose();
    lora.unload();
    ids.dispose();
  } finally {
    model.dispose();
    other.dispose();
    disposeAll(original.values());
  }
});
