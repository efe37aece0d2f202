// A vision-language run under data parallelism end to end (CPU, Gloo): Trinity's mix_vlm config
// (test/fixtures/trinity-examples/mix_vlm.yaml: GRPO on geometry3k-like image prompts through simple_mm_workflow, SFT
// on expert rows with images) on a tiny random Qwen2.5-VL, in float32 at lr 1e-3 so that 2 steps move the weights,
// once in one process and once with `trinity run --nproc-per-node 2` (micro-batches of 2 rows, so the ranks' rows and
// images differ): both ranks train every step, and the final models agree within 1e-5, vision tower included. Real
// processes; every wait is on a process exit.
import assert from 'node:assert/strict';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { initVisionLanguageModel } from '../../../src/model/index.js';
import * as torch from '../../../src/torch/index.js';
import { runProcess } from '../../helpers/run-process.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));
const root = mkdtempSync(join(tmpdir(), 'trinity-vl-dp-run-'));
after(() => rmSync(root, { recursive: true, force: true }));

const SETS = [
  'buffer.batch_size=2',
  'buffer.train_batch_size=5',
  'buffer.total_steps=2',
  'algorithm.repeat_times=2',
  'model.max_response_tokens=4',
  'explorer.rollout_model.engine_num=1',
  'explorer.runner_per_model=2',
  'explorer.rollout_model.dtype=float32',
  'algorithm.optimizer.lr=1e-3',
  'trainer.micro_batch_size=2',
].flatMap((s) => ['--set', s]);

/** A safetensors file's tensors as float arrays by name. */
function weights(file: string): Map<string, Float32Array> {
  const tensors = torch.loadSafetensors(file);
  try {
    return new Map([...tensors].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
  } finally {
    for (const t of tensors.values()) t.dispose();
  }
}

test("trinity run --nproc-per-node 2 of Trinity's mix_vlm config: the final model of one process, vision tower included", {
  timeout: 1_200_000,
}, async (t) => {
  const model = join(root, 'vl-model');
  const vl = { hiddenSize: 32, numLayers: 1, numHeads: 2, visionHiddenSize: 16, visionDepth: 1, visionHeads: 2 };
  initVisionLanguageModel(model, { ...vl, minPixels: 56 * 56, maxPixels: 56 * 56, seed: 1 });
  const folder = join(root, 'examples');
  cpSync(fileURLToPath(new URL('../../fixtures/trinity-examples/', import.meta.url)), folder, { recursive: true });
  const run = (name: string, args: string[]) =>
    runProcess(process.execPath, [trinity, 'run', '--config', join(folder, 'mix_vlm.yaml'), ...SETS, ...args], {
      env: {
        ...process.env,
        OMP_NUM_THREADS: '1',
        TRINITY_MODEL_PATH: model,
        TRINITY_CHECKPOINT_ROOT_DIR: join(root, name),
      },
      guard: { seconds: 540, what: `trinity run mix_vlm ${args.join(' ')}` },
    });
  const one = await run('one', []);
  assert.equal(one.code, 0, one.output);
  const two = await run('two', ['--nproc-per-node', '2']);
  assert.equal(two.code, 0, two.output);
  assert.match(two.output, /\[rank0\]: \[run\] finished: trained 2 of 2 step\(s\)/);
  assert.match(two.output, /\[rank1\]: \[run\] rank 1: rank 0 ended the stage; trained 2 steps from step 0/);

  const finalModel = (name: string) => join(root, name, 'Trinity-RFT', 'mix_vlm', 'final_model', 'model.safetensors');
  const [a, b, start] = [weights(finalModel('one')), weights(finalModel('two')), weights(join(model, 'model.safetensors'))];
  assert.deepEqual([...b.keys()].sort(), [...a.keys()].sort());
  let worst = 0;
  let towerMoved = 0;
  for (const [name, x] of a) {
    // the key bias: no gradient in exact arithmetic (test/rft/trainer/helpers/rank-harness.ts largestDifference)
    if (name.endsWith('self_attn.k_proj.bias')) continue;
    const y = b.get(name) as Float32Array;
    const s = start.get(name) as Float32Array;
    for (let i = 0; i < x.length; i++) {
      worst = Math.max(worst, Math.abs((x[i] as number) - (y[i] as number)));
      if (name.startsWith('visual.')) towerMoved = Math.max(towerMoved, Math.abs((x[i] as number) - (s[i] as number)));
    }
  }
  assert.ok(towerMoved > 1e-4, `training moved the vision tower by at most ${towerMoved}: the comparison would prove nothing`);
  assert.ok(worst <= 1e-5, `largest parameter difference between 2 ranks and 1 process: ${worst}`);
  t.diagnostic(`largest difference ${worst.toExponential(2)}, vision tower moved ${towerMoved.toExponential(2)}`);
});
