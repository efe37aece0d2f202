// examples/visual_count in a shortened form: the example's data generator (make-data.ts: rendered images, exact
// counts), its model (make-model.ts: a tiny random Qwen2.5-VL) and its SFT config (config.yaml: format.image_key)
// run end to end through `trinity run`'s runConfig (the dataset's images reach the prompt tokens and the trainer's
// vision tower) on fewer images (400) and steps (150 of 16, constant learning rate). The final checkpoint is a
// Qwen2.5-VL folder (vision weights, image processor, tokenizer), and its greedy accuracy on held-out images
// (evaluate.ts) beats the best image-blind answer (always one count: 0.25, the sets are balanced) by 10 points or
// more, and the random model's accuracy by as much.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { heldoutAccuracy } from '../../examples/visual_count/evaluate.js';
import { makeVisualCountData, type VisualCountRow } from '../../examples/visual_count/make-data.js';
import { VISUAL_COUNT_MODEL } from '../../examples/visual_count/make-model.js';
import { initVisionLanguageModel, Qwen2_5VLModel } from '../../src/model/index.js';
import { resolveAlgorithm } from '../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../src/rft/run/config/index.js';
import { runConfig } from '../../src/rft/run/index.js';
import { oneThreadForRuns } from '../rft/run/helpers.js';

const example = join(dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'visual_count');
const STEPS = 150;
let root = '';
let heldout: VisualCountRow[] = [];
let restoreThreads = () => {};

before(async () => {
  // one thread here and in the run's trainer (OMP_NUM_THREADS, read by the run's settings): the fastest on a shared machine
  restoreThreads = oneThreadForRuns();
  root = mkdtempSync(join(tmpdir(), 'visual-count-'));
  heldout = (await makeVisualCountData(join(root, 'data'), { seed: 0, train: 400, heldout: 60 })).heldout;
  initVisionLanguageModel(join(root, 'model'), { ...VISUAL_COUNT_MODEL, seed: 1 });
});
after(() => {
  restoreThreads();
  rmSync(root, { recursive: true, force: true });
});

test('SFT on the rendered images raises held-out counting accuracy above any image-blind answer', async (t) => {
  const heldoutFile = join(root, 'data', 'heldout.jsonl');
  const before = await heldoutAccuracy(join(root, 'model'), heldoutFile);
  const config = loadConfig(join(example, 'config.yaml'), {
    resolveAlgorithm,
    overrides: [
      `checkpoint_root_dir=${join(root, 'runs')}`,
      `model.model_path=${join(root, 'model')}`,
      `buffer.trainer_input.experience_buffer.path=${join(root, 'data', 'train.jsonl')}`,
      `buffer.total_steps=${STEPS}`,
      'algorithm.optimizer.lr_warmup_steps=0',
      'algorithm.optimizer.lr_scheduler_type=constant',
      `trainer.save_interval=${STEPS}`,
    ],
  });
  const result = await runConfig(config, { log: () => {} });
  const trained = result.finalModelDir;
  assert.ok(trained !== null && trained !== undefined, 'the run names its final model folder');
  // a vision-language folder: the vision tower's weights, the image processor and the tokenizer travel with it
  for (const file of ['config.json', 'model.safetensors', 'preprocessor_config.json', 'tokenizer.json'])
    assert.ok(existsSync(join(trained, file)), `${file} in ${trained}`);
  Qwen2_5VLModel.load(trained).dispose();
  const after = await heldoutAccuracy(trained, heldoutFile);
  const counts = new Map<string, number>();
  for (const row of heldout) counts.set(row.response, (counts.get(row.response) ?? 0) + 1);
  const blind = Math.max(...counts.values()) / heldout.length;
  t.diagnostic(`held-out accuracy ${before} -> ${after} after ${STEPS} steps (image-blind best ${blind})`);
  assert.ok(after >= blind + 0.1, `held-out accuracy ${after} after ${STEPS} SFT steps; image-blind best ${blind}`);
  assert.ok(after >= before + 0.1, `held-out accuracy ${before} → ${after}`);
});
