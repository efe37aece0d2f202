// Mix's expert data in Trinity-RFT's newest form (trainer_input.auxiliary_buffers.sft_dataset with a name of its own
// and total_epochs): a run in mode both trains until the expert rows' total_epochs are spent, then ends there, saying
// why, as Trinity's reader stops.
import assert from 'node:assert/strict';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

test("mix ends training when its expert data's total_epochs are spent", { timeout: 240_000 }, async () => {
  const job = makeJob({
    totalSteps: 6,
    saveInterval: 6,
    algorithm: 'algorithm:\n  algorithm_type: mix\n  repeat_times: 2\n  sample_strategy_args: {expert_data_ratio: 0.2}',
  });
  const sft = join(job.root, 'sft.jsonl');
  // 2 expert rows, read for 2 epochs: 4 rows; ⌈0.2 · 5⌉ = 1 per train step, so steps 1-4 train and step 5 ends the run
  writeFileSync(
    sft,
    `${JSON.stringify({ prompt: '1+1=', response: '2' })}\n${JSON.stringify({ prompt: '2+2=', response: '4' })}\n`,
  );
  const overrides = [
    'buffer.train_batch_size=5',
    `buffer.trainer_input.auxiliary_buffers={sft_dataset: {name: SFT_data, total_epochs: 2, path: ${sft}}}`,
  ];
  // stage lines go to the run's log, step lines to the progress reporter's stderr
  const printed: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    printed.push(...String(chunk).split('\n'));
    return true;
  }) as typeof process.stderr.write;
  let result: Awaited<ReturnType<typeof runConfig>>;
  try {
    result = await runConfig(loadConfig(job.configFile, { resolveAlgorithm, overrides }), { log: (l) => printed.push(l) });
  } finally {
    process.stderr.write = write;
  }
  assert.equal(result.stages.at(-1)?.steps, 4, printed.join('\n'));
  assert.ok(
    printed.some((l) =>
      /train step 5: the expert data 'sft_dataset' has 0 row\(s\) left of its total_epochs.*training ends/.test(l),
    ),
    printed.join('\n'),
  );
  const lines = readFileSync(join(job.jobDir, 'metrics.jsonl'), 'utf8').trim().split('\n');
  const expert = lines
    .map((l) => (JSON.parse(l) as Record<string, number>)['sample/expert_count'])
    .filter((n) => n !== undefined);
  assert.deepEqual(expert, [1, 1, 1, 1]);
});
