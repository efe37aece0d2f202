// model.enable_prompt_truncation through a whole run (the key, its settings, the explorer's handle, the trainer):
// tasks whose prompt is over max_prompt_tokens become masked placeholder experiences, counted in
// rollout/prompt_truncated_ratio, and the run trains on the others; with the key false they fail their rollouts as
// before (the engine's refusal naming the lengths: test/rft/workflow/prompt-truncation.test.ts).
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

/** makeJob's addition run (max_prompt_tokens 24, max_response_tokens 4) whose tasks alternate a prompt that fits
 * (a+b=, 23 prompt ids with the chat template) with one that does not (a+b+a+b+a+b=, 31). */
function mixedJob(extra = '') {
  const job = makeJob({ totalSteps: 2, saveInterval: 10, extra });
  const rows: string[] = [];
  for (let a = 0; a < 4; a++) {
    rows.push(JSON.stringify({ prompt: `${a}+1=`, response: String(a + 1) }));
    rows.push(JSON.stringify({ prompt: `${a}+1+${a}+1+${a}+1=`, response: String(3 * (a + 1)) }));
  }
  writeFileSync(join(job.root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
  return job;
}

const metricSteps = (jobDir: string) =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);

test('prompts over max_prompt_tokens are masked placeholders counted in rollout/prompt_truncated_ratio; the run trains', async () => {
  const { configFile, jobDir } = mixedJob();
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} });
  const metrics = metricSteps(jobDir);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2],
  );
  for (const m of metrics) {
    assert.equal(m['rollout/runs/failed'], 0, `step ${m.step}: no rollout failed`);
    assert.ok(Number.isFinite(m['actor/loss']), `step ${m.step}: trained`);
  }
  // 2 tasks a step, every other one too long: half the experiences of the run are placeholders
  const ratios = metrics.map((m) => m['rollout/prompt_truncated_ratio'] as number);
  assert.equal(ratios.reduce((a, b) => a + b, 0) / ratios.length, 0.5);
});

test('enable_prompt_truncation false: the long task of each step fails its run (its n = 4 samples)', async () => {
  const { configFile, jobDir } = mixedJob();
  const config = loadConfig(configFile, { resolveAlgorithm, overrides: ['model.enable_prompt_truncation=false'] });
  await runConfig(config, { log: () => {} });
  const metrics = metricSteps(jobDir);
  assert.ok(
    metrics.every((m) => m['rollout/runs/failed'] === 1 && m['rollout/prompt_truncated_ratio'] === 0),
    JSON.stringify(metrics.map((m) => [m['rollout/runs/failed'], m['rollout/prompt_truncated_ratio']])),
  );
});
