// A mixture-of-experts policy in the train step: SFT adds router_aux_loss_coef × the load-balancing loss to its loss
// (and its gradient reaches the router); GRPO only logs it; a dense policy has no such metric.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { initModel } from '../../../src/model/init.js';
import { loadBalancingLoss } from '../../../src/model/moe.js';
import { CausalLM } from '../../../src/model/transformer.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainStep } from '../../../src/rft/trainer/train-step.js';
import * as torch from '../../../src/torch/index.js';
import { expertData, loadPolicy, rollouts, tinyModelDir } from './toy.js';

torch.setNumThreads(1);
let root: string;
/** The same random qwen3_moe with router_aux_loss_coef 0.5 and 0. */
const dirs = { weighted: '', unweighted: '' };
before(() => {
  root = mkdtempSync(join(tmpdir(), 'router-aux-'));
  dirs.weighted = join(root, 'weighted');
  initModel(dirs.weighted, { architecture: 'qwen3_moe', hiddenSize: 32, numLayers: 1, numHeads: 2, numExperts: 4, seed: 3 });
  dirs.unweighted = join(root, 'unweighted');
  initModel(dirs.unweighted, { architecture: 'qwen3_moe', hiddenSize: 32, numLayers: 1, numHeads: 2, numExperts: 4, seed: 3 });
  for (const [dir, coef] of [
    [dirs.weighted, 0.5],
    [dirs.unweighted, 0],
  ] as const) {
    const file = join(dir, 'config.json');
    writeFileSync(file, JSON.stringify({ ...JSON.parse(readFileSync(file, 'utf8')), router_aux_loss_coef: coef }));
  }
});
after(() => rmSync(root, { recursive: true, force: true }));

function oneStep(model: CausalLM, type: string, batch: Experience[]): Record<string, number> {
  const optimizer = new torch.SGD([...model.parameters().values()], { lr: 1 });
  const algorithm = resolveAlgorithm({ algorithm_type: type, ...(type === 'grpo' ? { kl_loss_fn: 'none' } : {}) });
  return new TrainStep({ model, optimizer, algorithm, reference: null }).run(batch);
}

/** The load-balancing loss of `batch` (each row alone is a sequence with no padding) under `model`, before a step. */
function batchAux(model: CausalLM, batch: Experience[]): number {
  return torch.scope(() =>
    torch.noGrad(() => {
      const width = Math.max(...batch.map((e) => e.tokens.length));
      const ids = torch.tensor(batch.map((e) => [...e.tokens, ...Array(width - e.tokens.length).fill(0)].map(BigInt)));
      const mask = torch.tensor(batch.map((e) => e.tokens.map(() => 1n).concat(Array(width - e.tokens.length).fill(0n))));
      const logits: torch.Tensor[] = [];
      model.forward(ids, { attentionMask: mask, onRouting: (_, r) => logits.push(torch.keep(r.logits)) });
      const aux = loadBalancingLoss(logits, model.config.moe as NonNullable<typeof model.config.moe>, mask.reshape([-1])).item();
      for (const t of logits) t.dispose();
      return aux;
    }),
  );
}

test('sft: the loss is the NLL plus router_aux_loss_coef × the load-balancing loss, and the router learns from it', () => {
  const batch = expertData();
  const weighted = loadPolicy(dirs.weighted);
  const unweighted = loadPolicy(dirs.unweighted);
  try {
    const aux = batchAux(weighted, batch);
    const routerBefore = torch.keep(weighted.parameters().get('model.layers.0.mlp.gate.weight')?.clone() as torch.Tensor);
    const a = oneStep(weighted, 'sft', batch);
    const b = oneStep(unweighted, 'sft', batch);
    assert.ok(Math.abs((a.router_aux_loss as number) - aux) < 1e-5, `metric ${a.router_aux_loss} vs ${aux}`);
    // coefficient 0 still logs it (over the tokens of the packed pass: shared prompts once, last tokens left out)
    assert.ok(Number.isFinite(b.router_aux_loss) && (b.router_aux_loss as number) > 0);
    assert.ok(
      Math.abs((a.loss as number) - ((b.loss as number) + 0.5 * aux)) < 1e-5,
      `loss ${a.loss} vs ${b.loss} + 0.5 × ${aux}`,
    );
    // same start, same NLL: the routers differ after the step only by the aux term's gradient
    const routerDiff = torch.scope(() =>
      maxDiff(
        weighted.parameters().get('model.layers.0.mlp.gate.weight'),
        unweighted.parameters().get('model.layers.0.mlp.gate.weight'),
      ),
    );
    assert.ok(routerDiff > 1e-6, `the aux term moved the router by ${routerDiff}`);
    assert.ok(torch.scope(() => maxDiff(routerBefore, unweighted.parameters().get('model.layers.0.mlp.gate.weight'))) > 0);
    routerBefore.dispose();
  } finally {
    weighted.dispose();
    unweighted.dispose();
  }
});

test('grpo logs the load-balancing loss without adding it; a dense policy has no such metric', () => {
  const weighted = loadPolicy(dirs.weighted);
  const unweighted = loadPolicy(dirs.unweighted);
  const toy = tinyModelDir();
  const dense = CausalLM.load(toy.dir, { requiresGrad: true });
  try {
    const batch = rollouts(weighted);
    const a = oneStep(weighted, 'grpo', batch);
    const b = oneStep(unweighted, 'grpo', batch);
    assert.ok(Number.isFinite(a.router_aux_loss) && (a.router_aux_loss as number) > 0);
    assert.equal(a.loss, b.loss, 'the coefficient does not enter an RL loss');
    assert.equal(oneStep(dense, 'grpo', rollouts(dense)).router_aux_loss, undefined);
  } finally {
    weighted.dispose();
    unweighted.dispose();
    dense.dispose();
    toy.remove();
  }
});

function maxDiff(a: torch.Tensor | undefined, b: torch.Tensor | undefined): number {
  return (a as torch.Tensor)
    .sub(b as torch.Tensor)
    .abs()
    .max()
    .item();
}
