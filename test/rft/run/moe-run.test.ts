// A whole GRPO run (explorer, engine, weight sync, trainer, checkpoint) on a tiny random qwen3_moe: the mixture of
// experts decodes eagerly in the explorer, trains, logs the router's load-balancing loss, and saves a final model that
// loads back as the same architecture. With LoRA on the experts (model.lora.target_modules gate_proj, up_proj,
// down_proj), the final merged model differs from the base in the experts' weights only.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadModelConfig } from '../../../src/model/index.js';
import * as torch from '../../../src/torch/index.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

test('grpo on a qwen3_moe policy runs end to end and logs router_aux_loss', { timeout: 600_000 }, () => {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    model: { architecture: 'qwen3_moe', numExperts: 4 },
  });
  try {
    const model = join(root, 'model');
    const run = spawnSync(process.execPath, [trinity, 'run', '--config', configFile], { encoding: 'utf8', timeout: 540_000 });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    const lines = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const withAux = lines.filter((l) => Object.keys(l).some((k) => k.endsWith('router_aux_loss')));
    assert.ok(withAux.length >= 2, `router_aux_loss in ${withAux.length} metric lines: ${JSON.stringify(lines.at(-1))}`);
    assert.equal(loadModelConfig(join(jobDir, 'final_model')).architecture, 'Qwen3MoeForCausalLM');
    // the experts and the router were trained (an expert no token reached may keep its weights)
    const before = torch.loadSafetensors(join(model, 'model.safetensors'));
    const after = torch.loadSafetensors(join(jobDir, 'final_model', 'model.safetensors'));
    const moved = (name: string) =>
      torch.scope(
        () =>
          (before.get(name) as torch.Tensor)
            .ne(after.get(name) as torch.Tensor)
            .any()
            .item() === 1,
      );
    assert.ok(moved('model.layers.0.mlp.gate.weight'), 'router unchanged');
    assert.ok(
      [0, 1, 2, 3].some((e) => moved(`model.layers.0.mlp.experts.${e}.down_proj.weight`)),
      'no expert changed',
    );
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('grpo with LoRA on the experts of a qwen3_moe: the merged final model moves the experts and nothing else', {
  timeout: 600_000,
}, () => {
  const { root, configFile, jobDir } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    model: { architecture: 'qwen3_moe', numExperts: 4 },
  });
  try {
    const sets = ['model.lora.rank=4', 'model.lora.alpha=8', 'model.lora.target_modules=[gate_proj,up_proj,down_proj]'];
    const run = spawnSync(process.execPath, [trinity, 'run', '--config', configFile, ...sets.flatMap((s) => ['--set', s])], {
      encoding: 'utf8',
      timeout: 540_000,
    });
    assert.equal(run.status, 0, `${run.stdout}\n${run.stderr}`);
    const before = torch.loadSafetensors(join(root, 'model', 'model.safetensors'));
    const after = torch.loadSafetensors(join(jobDir, 'final_model', 'model.safetensors'));
    const moved = [...before.keys()].filter((name) =>
      torch.scope(
        () =>
          (before.get(name) as torch.Tensor)
            .ne(after.get(name) as torch.Tensor)
            .any()
            .item() === 1,
      ),
    );
    assert.ok(moved.length > 0, 'the merged adapters changed no weight');
    const notExperts = moved.filter((name) => !/^model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$/.test(name));
    assert.deepEqual(notExperts, [], 'only the experts carry adapters');
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
