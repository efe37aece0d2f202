// An eval taskset named as the training taskset (Trinity's grpo_frozen_lake example names both 'frozenlake'): the
// run trains on one and evaluates the other, and everything that names them keeps them apart — the eval scores
// eval/<name>/..., the training series rollout/..., the eval samples, and the report's eval chart.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { buildReport } from '../../../src/rft/report/html.js';
import { readRun } from '../../../src/rft/report/read.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

test('an eval taskset sharing the training taskset name is evaluated apart from training', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  // the eval taskset: other tasks (sums to 9 and up, none of which the taskset trains on), the same name
  const evalRows = ['5+4=', '6+5=', '7+7='].map((prompt, i) => JSON.stringify({ prompt, response: String(9 + i * 2) }));
  const evalFile = join(root, 'eval.jsonl');
  writeFileSync(evalFile, `${evalRows.join('\n')}\n`);
  const overrides = [
    'buffer.explorer_input.taskset.name=arith',
    `buffer.explorer_input.eval_tasksets=[{name: arith, path: ${evalFile}, rollout_args: {temperature: 0}}]`,
    'explorer.eval_on_startup=true',
    'explorer.eval_interval=2',
  ];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });

  const rows = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Record<string, number>);
  const at = (step: number) => Object.assign({}, ...rows.filter((r) => r.step === step)) as Record<string, number>;
  // eval at step 0 (startup) and step 2, under the shared name; training series at steps 1 and 2
  for (const step of [0, 2]) assert.ok(Number.isFinite(at(step)['eval/arith/mean@1']), `eval/arith/mean@1 at step ${step}`);
  for (const step of [1, 2]) assert.ok(Number.isFinite(at(step)['rollout/reward/mean']), `rollout/reward/mean at step ${step}`);
  assert.equal(at(0)['rollout/reward/mean'], undefined, 'the startup evaluation is not a training step');

  // the eval samples are the eval taskset's three tasks, not the training taskset's 25
  const samples = readFileSync(join(jobDir, 'eval_samples.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { taskset: string; prompt: string });
  assert.ok(samples.length > 0);
  for (const s of samples) {
    assert.equal(s.taskset, 'arith');
    assert.ok(
      ['5+4=', '6+5=', '7+7='].some((p) => s.prompt.includes(p)),
      `an eval prompt, got ${s.prompt}`,
    );
  }

  // the report: one eval chart for the name, and the training curves beside it
  const { data } = buildReport(await readRun(jobDir));
  const chartIds = data.charts.map((c) => c.id);
  assert.ok(chartIds.includes('eval-arith'), chartIds.join(', '));
});
