// A taskset given as a Hugging Face dataset folder of parquet files, from the config file to the tasks a run uses:
// the config → stage translation hands path, split and subset_name to the loader, and `trinity run` explores the
// train split and evaluates the test split (test/fixtures/datasets/addition, written by datasets: README.md
// `configs:` with subsets default and spaced, a sharded train split).
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadTaskset } from '../../../src/rft/buffer/taskset.js';
import { loadConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { runConfig, stageSettings } from '../../../src/rft/run/index.js';
import { makeJob } from '../run/helpers.js';

const ADDITION = join(import.meta.dirname, '..', '..', 'fixtures', 'datasets', 'addition');
const expected = JSON.parse(readFileSync(join(ADDITION, '..', 'expected.json'), 'utf8')) as {
  splits: { path: string; subset: string | null; split: string; rows: { id: string; question: string; answer: string }[] }[];
};
const reference = (split: string, subset: string | null = null) =>
  expected.splits.find((s) => s.path === 'addition' && s.split === split && s.subset === subset)?.rows ?? [];

const FORMAT = '{prompt_key: question, response_key: answer}';
const overrides = [
  `buffer.explorer_input.taskset.path=${ADDITION}`,
  'buffer.explorer_input.taskset.format.prompt_key=question',
  'buffer.explorer_input.taskset.format.response_key=answer',
  `buffer.explorer_input.eval_tasksets=[{name: held_out, path: ${ADDITION}, split: test, format: ${FORMAT}, rollout_args: {temperature: 0}}]`,
];

test('config → stage settings → loader: split and subset_name of a parquet dataset folder reach the tasks', async () => {
  const { configFile, root } = makeJob({ totalSteps: 1, saveInterval: 1 });
  const tasksOf = async (extra: string[]) => {
    const config = loadConfig(configFile, { resolveAlgorithm, overrides: [...overrides, ...extra] });
    const settings = stageSettings(resolveStages(config)[0] as Parameters<typeof stageSettings>[0], join(root, 'model'));
    const [train, held] = await Promise.all([
      loadTaskset(settings.tasksets[0]?.taskset as Parameters<typeof loadTaskset>[0]),
      loadTaskset(settings.evalTasksets[0] as Parameters<typeof loadTaskset>[0]),
    ]);
    return { train: train.tasks, held: held.tasks };
  };
  const plain = await tasksOf([]);
  // the default subset's train split: both shards, in order, as load_dataset returns them
  assert.deepEqual(
    plain.train.map((t) => [t.id, t.prompt, t.response]),
    reference('train').map((r) => [r.id, r.question, r.answer]),
  );
  assert.equal(plain.train.length, 20);
  assert.deepEqual(
    plain.held.map((t) => [t.id, t.prompt, t.response, t.isEval]),
    reference('test').map((r) => [r.id, r.question, r.answer, true]),
  );
  const spaced = await tasksOf(['buffer.explorer_input.taskset.subset_name=spaced']);
  assert.deepEqual(
    spaced.train.map((t) => [t.id, t.response]),
    reference('train', 'spaced').map((r) => [r.id, r.answer]),
  );
  // a subset the dataset does not have: the loader names the dataset's card and the subsets it has
  const missing = await tasksOf(['buffer.explorer_input.taskset.subset_name=hard']).catch((error: Error) => error);
  assert.match(
    String(missing),
    /README\.md: taskset 'taskset_0': no subset 'hard' \(subset_name\): the dataset has default, spaced/,
  );
});

test('trinity run explores the parquet train split and evaluates its test split', async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  const config = loadConfig(configFile, { resolveAlgorithm, overrides: [...overrides, 'explorer.eval_on_startup=true'] });
  await runConfig(config, { log: () => {} });
  const metrics = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [0, 1],
  );
  assert.ok(Number.isFinite(metrics[0]?.['eval/held_out/mean@1']), 'the test split was evaluated');
  assert.ok(Number.isFinite(metrics[1]?.['rollout/reward/mean']), 'the train split was explored');
  // the evaluated problems are the test split's rows, with their ids, prompts and answers
  const samples = readFileSync(join(jobDir, 'eval_samples.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as { taskId: string; prompt: string; reference: string });
  assert.deepEqual(
    samples.map((s) => [s.taskId, s.prompt, s.reference]).sort(),
    reference('test')
      .map((r) => [r.id, r.question, r.answer])
      .sort(),
  );
});
