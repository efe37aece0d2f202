// trainer.use_dynamic_bsz in a run: the GRPO job of ./helpers.ts trains with micro-batches by a token budget
// (trainer.max_token_len_per_gpu) instead of trainer.micro_batch_size rows; each step logs how many micro-batches it
// ran, and the config no longer lists the keys as ignored on this backend.
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

test('use_dynamic_bsz: a GRPO run trains its steps in token-budget micro-batches', async () => {
  const job = makeJob({ totalSteps: 2, saveInterval: 2 });
  try {
    const overrides = ['trainer.use_dynamic_bsz=true', 'trainer.max_token_len_per_gpu=40'];
    const config = loadConfig(job.configFile, { resolveAlgorithm, overrides });
    assert.deepEqual(config.trinity_keys.ignored, [], 'nothing is ignored: the keys are read');
    const printed: string[] = [];
    const result = await runConfig(config, { log: (line) => printed.push(line) });
    assert.equal(result.stages[0]?.steps, 2, printed.join('\n'));
    const steps = readFileSync(join(job.jobDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, number>)
      .filter((m) => m['actor/grad_norm'] !== undefined);
    assert.equal(steps.length, 2);
    for (const m of steps) {
      // 8 rows (2 prompts of 4 samples) under a 40-position budget: more than one micro-batch, where the job's
      // micro_batch_size 8 makes one
      assert.ok((m['actor/micro_batches'] as number) >= 2, JSON.stringify(m));
      assert.equal(m['actor/oversized_micro_batches'], 0);
      assert.ok(Number.isFinite(m['actor/loss']));
    }
  } finally {
    rmSync(job.root, { recursive: true, force: true });
  }
});
