// trainer.stop_when: a mode-train stage evaluates its current weights every eval_interval steps and ends at the first
// evaluation meeting the rule; the readable eval line of the log.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../../../src/rft/run/config/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { formatEvalMetrics } from '../../../src/rft/explorer/evaluation.js';
import { makeJob } from './helpers.js';

type Line = Record<string, number>;

/** Runs the config; returns the lines the run printed (stage lines go to the progress reporter's stderr). */
async function run(configFile: string, overrides: string[]) {
  const printed: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array) => {
    printed.push(...String(chunk).split('\n'));
    return true;
  }) as typeof process.stderr.write;
  try {
    const result = await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: (l) => printed.push(l) });
    return { result, printed };
  } finally {
    process.stderr.write = write;
  }
}
const metricLines = (jobDir: string): Line[] =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Line);

/** An SFT job over the addition tasks whose eval score is continuous in the greedy answers (so it moves with the
 * weights): the sum of the answer's character codes / 1000. */
function sftJob(stopWhen: string, totalSteps: number) {
  const job = makeJob({ totalSteps, saveInterval: 2 });
  writeFileSync(
    join(job.root, 'codes.mjs'),
    'export const codeSum = ({ response }) => [...response].reduce((s, c) => s + c.charCodeAt(0), 0) / 1000;\n',
  );
  const tasks = join(job.root, 'tasks.jsonl');
  // three-digit answers: after a few steps the greedy answer starts with a digit, not the end of the answer
  const sft = join(job.root, 'sft.jsonl');
  const rows = readFileSync(tasks, 'utf8').trim().split('\n');
  writeFileSync(
    sft,
    `${rows.map((r) => JSON.stringify({ ...JSON.parse(r), response: (JSON.parse(r) as { response: string }).response.padStart(3, '0') })).join('\n')}\n`,
  );
  const overrides = [
    'mode=train',
    'algorithm.algorithm_type=sft',
    'algorithm.optimizer.lr=0.01',
    'buffer.train_batch_size=8',
    'buffer.trainer_input.experience_buffer.storage_type=file',
    `buffer.trainer_input.experience_buffer.path=${sft}`,
    `buffer.explorer_input.eval_tasksets=[{name: eval, path: ${tasks}, rollout_args: {temperature: 0}, ` +
      `default_reward_fn_type: ${join(job.root, 'codes.mjs')}#codeSum}]`,
    'explorer.eval_interval=2',
    `trainer.stop_when=${stopWhen}`,
  ];
  return { ...job, overrides };
}

test('stop_when never met: the stage evaluates the weights it trained every eval_interval steps, as mode bench does', async () => {
  const { configFile, jobDir, overrides } = sftJob('{metric: eval/eval/mean@1, at_most: -1000}', 4);
  const { result, printed: lines } = await run(configFile, overrides);
  assert.equal(result.stages.at(-1)?.steps, 4, 'all total_steps trained');
  const trainEval = metricLines(jobDir).filter((m) => m['eval/eval/mean@1'] !== undefined);
  assert.deepEqual(
    trainEval.map((m) => m.step),
    [2, 4],
  );
  assert.ok(lines.some((l) => /\[run\] eval at step 2: eval mean@1 \d\.\d{3}$/.test(l)));
  // the same checkpoints through mode bench (weights from the checkpoint folders): the same scores, and not the
  // base model's (the evaluation saw the trained weights, not the ones its engine started with)
  rmSync(join(jobDir, 'metrics.jsonl'));
  rmSync(join(jobDir, 'done.json'));
  await run(configFile, [...overrides, 'mode=bench', 'trainer.stop_when=null']);
  const bench = new Map(metricLines(jobDir).map((m) => [m.step, m['eval/eval/mean@1']]));
  assert.equal(bench.get(2), trainEval[0]?.['eval/eval/mean@1']);
  assert.equal(bench.get(4), trainEval[1]?.['eval/eval/mean@1']);
  assert.notEqual(bench.get(0), bench.get(2), 'two SFT steps at lr 0.01 change the greedy answers');
});

test('stop_when met: the stage ends at that evaluation with a checkpoint saying so; a resumed run trains no further', async () => {
  const { configFile, jobDir, overrides } = sftJob('{metric: eval/eval/mean@1, at_least: -1000}', 6);
  const { result, printed: lines } = await run(configFile, overrides);
  assert.equal(result.stages.at(-1)?.steps, 2);
  assert.ok(lines.some((l) => l.includes('eval/eval/mean@1 >= -1000 met, the stage ends here')));
  assert.deepEqual(listCheckpoints(jobDir), [2]);
  const state = JSON.parse(readFileSync(join(jobDir, 'checkpoints', 'global_step_2', 'state.json'), 'utf8')) as {
    stoppedAt?: number;
  };
  assert.equal(state.stoppedAt, 2);
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
  // killed after the checkpoint, before the stage was recorded as done: the rerun ends the stage at step 2 again
  rmSync(join(jobDir, 'done.json'));
  rmSync(join(jobDir, 'final_model'), { recursive: true });
  const { result: resumed, printed: again } = await run(configFile, overrides);
  assert.equal(resumed.stages.at(-1)?.steps, 2);
  assert.ok(again.some((l) => l.includes('was met at step 2 (checkpoint): the stage ended there')));
  assert.deepEqual(
    metricLines(jobDir).map((m) => m.step),
    [1, 2, 2],
    'no step trained after 2 (the train line and the eval line of step 2)',
  );
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
});

test('without stop_when a mode-train stage does not evaluate its eval tasksets, and its log says so', async () => {
  const { configFile, jobDir, overrides } = sftJob('null', 2);
  const { result, printed: lines } = await run(configFile, overrides);
  assert.equal(result.stages.at(-1)?.steps, 2);
  assert.deepEqual(
    metricLines(jobDir).filter((m) => m['eval/eval/mean@1'] !== undefined),
    [],
  );
  assert.ok(
    lines.some((l) => l.includes('eval_tasksets (eval) are not evaluated in this stage')),
    lines.join('\n'),
  );
});

test('stop_when config problems name the key', () => {
  const { configFile, overrides } = sftJob('{metric: eval/eval/mean@1, at_least: 0.5}', 4);
  const problems = (extra: string[]) => {
    try {
      loadConfig(configFile, { resolveAlgorithm, overrides: [...overrides, ...extra] });
      return [];
    } catch (error) {
      assert.ok(error instanceof ConfigError, String(error));
      return error.problems.map((p) => `${p.path}: ${p.message}`);
    }
  };
  assert.deepEqual(problems([]), []);
  assert.match(
    problems(['trainer.stop_when={metric: eval/eval/mean@1}'])[0] ?? '',
    /^trainer\.stop_when: give one of at_least or at_most/,
  );
  assert.match(
    problems(['trainer.stop_when={metric: eval/other/mean@1, at_least: 1}'])[0] ?? '',
    /^trainer\.stop_when\.metric: names eval taskset 'other', which is not in buffer\.explorer_input\.eval_tasksets \(eval\)/,
  );
  assert.match(
    problems(['trainer.stop_when={metric: actor/loss, at_most: 1}'])[0] ?? '',
    /^trainer\.stop_when\.metric: 'actor\/loss' is not an eval metric/,
  );
  assert.match(problems(['mode=both'])[0] ?? '', /^trainer\.stop_when: ends a mode-train stage .* this stage is mode both/);
});

test('the eval line shows mean@n and pass@n per taskset, not every statistic', () => {
  const metrics = {
    'eval/eval/mean@1': 0.42,
    'eval/eval/best@1': 0.42,
    'eval/eval/worst@1': 0.42,
    'eval/eval/pass@1': 0.42,
    'eval/sampled/mean@8': 0.385,
    'eval/sampled/best@1': 0.385,
    'eval/sampled/pass@2': 0.5,
    'eval/sampled/worst@8': 0,
    'eval/sampled/pass@8': 0.7021,
    'eval/sampled/response_length': 3.5,
  };
  assert.equal(
    formatEvalMetrics(metrics),
    'eval mean@1 0.420 | sampled mean@8 0.385, pass@8 0.702 | eval/sampled/response_length 3.500',
  );
});
