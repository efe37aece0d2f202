// trinity run end to end on a tiny model: explorer and trainer loops, sync, checkpoints, metrics, resume.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { CausalLM } from '../../../src/model/index.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { requiredVersion, runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const metricSteps = (jobDir: string) =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);

test('required weights version: on-policy, one-step off-policy, sync every 2', () => {
  assert.deepEqual(
    [1, 2, 3, 4].map((s) => requiredVersion(s, 1, 0)),
    [0, 1, 2, 3],
  );
  assert.deepEqual(
    [1, 2, 3, 4].map((s) => requiredVersion(s, 1, 1)),
    [0, 0, 1, 2],
  );
  assert.deepEqual(
    [1, 2, 3, 4, 5].map((s) => requiredVersion(s, 2, 0)),
    [0, 0, 2, 2, 4],
  );
});

test('a both-mode GRPO run: every step explored, trained, synced; checkpoints, metrics and a final model', async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 4, saveInterval: 2 });
  const config = loadConfig(configFile, { resolveAlgorithm });
  const lines: string[] = [];
  const result = await runConfig(config, { log: (l) => lines.push(l) });
  const metrics = metricSteps(jobDir);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2, 3, 4],
  );
  for (const m of metrics) {
    for (const key of ['actor/loss', 'actor/grad_norm', 'rollout/reward/mean', 'explorer/model_version', 'time/train_s']) {
      assert.ok(Number.isFinite(m[key]), `step ${m.step}: ${key} missing`);
    }
    // strictly on-policy (sync_interval 1, offset 0): step s explores with the weights of trainer step s - 1
    assert.equal(m['explorer/model_version'], (m.step as number) - 1);
  }
  assert.deepEqual(listCheckpoints(jobDir), [2, 4]);
  assert.ok(result.finalModelDir && existsSync(join(result.finalModelDir, 'model.safetensors')));
  const trained = CausalLM.load(result.finalModelDir);
  trained.dispose();
  // the same command again: the stage is finished and skipped
  const again = await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: (l) => lines.push(l) });
  assert.equal(again.finalModelDir, result.finalModelDir);
  assert.ok(lines.some((l) => /finished earlier/.test(l)));
});

test("sync styles: trainer_driven never makes the explorer wait; explorer_driven syncs at the explorer's request", async () => {
  for (const style of ['trainer_driven', 'explorer_driven'] as const) {
    const { configFile, jobDir } = makeJob({
      totalSteps: 5,
      saveInterval: 5,
      extra: `synchronizer:\n  sync_style: ${style}\n  sync_interval: 2\n`,
    });
    await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} });
    const metrics = metricSteps(jobDir);
    assert.deepEqual(
      metrics.map((m) => m.step),
      [1, 2, 3, 4, 5],
      style,
    );
    const versions = metrics.map((m) => m['explorer/model_version'] as number);
    for (const [i, v] of versions.entries()) {
      assert.ok(v <= i, `${style}: explore step ${i + 1} cannot use weights newer than trainer step ${i}`);
      if (i > 0) assert.ok(v >= (versions[i - 1] as number), `${style}: versions never go back`);
    }
    if (style === 'explorer_driven') {
      // requests at explore steps 3 and 5 (every 2 after the first): weights change only there
      assert.equal(versions[0], 0);
      assert.equal(versions[1], 0);
      assert.equal(versions[2], versions[3]);
      assert.ok((versions[2] as number) >= 1);
    }
  }
});

test("the algorithm's sample strategy runs on each training batch (RAFT: the best response per group)", async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 2 });
  const config = loadConfig(configFile, { resolveAlgorithm, overrides: ['algorithm.algorithm_type=raft'] });
  await runConfig(config, { log: () => {} });
  for (const m of metricSteps(jobDir)) {
    assert.equal(m['sample/read'], 8, 'batch_size 2 × repeat_times 4 read');
    assert.ok((m['sample/count'] as number) <= 2, 'at most one response per task kept');
  }
});

test('stages: base evaluation (bench), SFT from a dataset, then GRPO from the SFT weights; a rerun skips them', async () => {
  const { root, configFile } = makeJob({
    totalSteps: 2,
    saveInterval: 2,
    extra: `stages:
  - stage_name: base
    mode: bench
  - stage_name: sft
    mode: train
    algorithm:
      algorithm_type: sft
      optimizer:
        lr: 0.003
    buffer:
      train_batch_size: 8
      total_steps: 3
      trainer_input:
        experience_buffer:
          storage_type: file
          path: tasks.jsonl
  - stage_name: grpo
    mode: both
`,
  });
  // the job's eval taskset (bench needs one): the training tasks themselves are enough here
  const overrides = [
    `buffer.explorer_input.eval_tasksets=[{name: eval, path: ${join(root, 'tasks.jsonl')}}]`,
    'explorer.eval_on_startup=false',
  ];
  const config = loadConfig(configFile, { resolveAlgorithm, overrides });
  const lines: string[] = [];
  const result = await runConfig(config, { log: (l) => lines.push(l) });
  const job = join(root, 'out', 'test', 'e2e');
  assert.deepEqual(JSON.parse(readFileSync(join(job, 'stages.json'), 'utf8')), ['base', 'sft', 'grpo']);
  const bench = metricSteps(join(job, 'base'));
  assert.ok(Number.isFinite(bench[0]?.['eval/eval/mean@1']), 'the base model was evaluated');
  assert.deepEqual(
    metricSteps(join(job, 'sft')).map((m) => m.step),
    [1, 2, 3],
  );
  assert.ok(
    lines.some((l) => l.includes(`model ${join(job, 'sft', 'final_model')}`)),
    'GRPO starts from the SFT weights',
  );
  assert.equal(result.finalModelDir, join(job, 'grpo', 'final_model'));
  const again: string[] = [];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: (l) => again.push(l) });
  assert.equal(again.filter((l) => /finished earlier/.test(l)).length, 3);
});

test('offline DPO in train mode from a preference dataset: the loss falls', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 4, saveInterval: 4 });
  const rows = Array.from({ length: 8 }, (_, i) =>
    JSON.stringify({ prompt: `${i}+1=`, chosen: String(i + 1), rejected: String(i + 2) }),
  );
  writeFileSync(join(root, 'pairs.jsonl'), `${rows.join('\n')}\n`);
  const overrides = [
    'mode=train',
    'algorithm.algorithm_type=dpo',
    'algorithm.repeat_times=2',
    'algorithm.optimizer.lr=0.01',
    'buffer.train_batch_size=8',
    'buffer.trainer_input.experience_buffer.storage_type=file',
    `buffer.trainer_input.experience_buffer.path=${join(root, 'pairs.jsonl')}`,
  ];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
  const metrics = metricSteps(jobDir);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2, 3, 4],
  );
  assert.ok((metrics[3]?.['actor/loss'] as number) < (metrics[0]?.['actor/loss'] as number), 'DPO loss falls');
});

test('a both-mode run with the priority replay buffer', async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 3, saveInterval: 3 });
  const overrides = ['buffer.trainer_input.experience_buffer.replay_buffer.enable=true'];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
  assert.deepEqual(
    metricSteps(jobDir).map((m) => m.step),
    [1, 2, 3],
  );
});

test("an SFT stage's loss ignores the taskset's sampling temperature (its rows are not rollouts)", async () => {
  const firstLoss = async (temperature: number) => {
    const { root, configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
    const overrides = [
      'mode=train',
      'algorithm.algorithm_type=sft',
      'buffer.train_batch_size=8',
      'buffer.trainer_input.experience_buffer.storage_type=file',
      `buffer.trainer_input.experience_buffer.path=${join(root, 'tasks.jsonl')}`,
      `buffer.explorer_input.taskset.rollout_args.temperature=${temperature}`,
    ];
    await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
    return metricSteps(jobDir)[0]?.['actor/policy/sft_loss'] as number;
  };
  const atOne = await firstLoss(1);
  assert.ok(Number.isFinite(atOne));
  assert.equal(await firstLoss(0.5), atOne, 'a rollout temperature of 0.5 would divide the logits by 0.5');
});

test('eval tasksets each use their own repeat_times (greedy mean@1 beside sampled mean@4 and pass@4)', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  const tasks = join(root, 'tasks.jsonl');
  const overrides = [
    `buffer.explorer_input.eval_tasksets=[{name: greedy, path: ${tasks}, rollout_args: {temperature: 0}}, ` +
      `{name: sampled, path: ${tasks}, repeat_times: 4, rollout_args: {temperature: 1.0}}]`,
    'explorer.eval_on_startup=true',
  ];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
  const first = metricSteps(jobDir)[0] as Record<string, number>;
  assert.equal(first.step, 0);
  assert.ok(Number.isFinite(first['eval/greedy/mean@1']));
  assert.equal(first['eval/greedy/mean@4'], undefined);
  for (const key of ['eval/sampled/mean@4', 'eval/sampled/pass@4', 'eval/sampled/pass@2']) {
    assert.ok(Number.isFinite(first[key]), `${key} in ${Object.keys(first).join(', ')}`);
  }
  assert.ok((first['eval/sampled/pass@4'] as number) >= (first['eval/sampled/mean@4'] as number));
  const samples = readFileSync(join(jobDir, 'eval_samples.jsonl'), 'utf8').trim().split('\n');
  assert.ok(samples.length > 0, 'eval samples written');
});

test('a trainer with nothing to read stops after experience_buffer.max_read_timeout with an error naming the wait', async () => {
  const { configFile } = makeJob({ totalSteps: 2, saveInterval: 2 });
  const overrides = [
    'mode=train',
    'buffer.train_batch_size=8',
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    'buffer.trainer_input.experience_buffer.max_read_timeout=1',
  ];
  // synchronizer.sync_timeout stays at its default (3600 s): the read's own timeout is the one that ends it
  await assert.rejects(runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} }), (error: Error) => {
    assert.equal(error.name, 'BufferTimeoutError');
    assert.match(error.message, /experience_buffer.*timed out after 1000 ms/);
    return true;
  });
});

test('rollouts the model cannot train on are rejected and counted; a step left short trains on what came, without waiting', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 3, saveInterval: 3 });
  // per task (4 runs): run 0 and 3 valid, run 1 a token id past the vocabulary, run 2 throws (no retries)
  writeFileSync(
    join(root, 'faulty.ts'),
    `export const faulty = {
  repeatable: false,
  run: async ({ task, runIdBase }) => {
    if (runIdBase === 2) throw new Error('this run fails');
    const response = runIdBase === 1 ? [1_000_000] : [3, 4];
    return [{ eid: task.id + '/' + runIdBase, tokens: [5, 6, ...response], promptLength: 2, reward: runIdBase === 3 ? 1 : 0, info: {} }];
  },
};
`,
  );
  const overrides = ['buffer.explorer_input.default_workflow_type=./faulty.ts#faulty', 'explorer.max_retry_times=0'];
  // the read timeout stays at its default (1800 s): a run that waited for the missing rollouts would not finish
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {}, baseDir: root });
  const metrics = metricSteps(jobDir);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2, 3],
  );
  for (const m of metrics) {
    assert.equal(m['rollout/rejected_experiences'], 2, 'two tasks, one out-of-vocabulary run each');
    assert.equal(m['trainer/short_batch'], 1);
    assert.equal(m['actor/rows'], 4, 'trained on the 4 valid rollouts of the 8 asked for');
  }
});

test('trainer_driven: the explorer never waits for weights (a train batch spans two explore steps, which fixed sync would deadlock on)', async () => {
  // train step s needs explore steps 2s-1 and 2s; fixed sync (offset 0) would hold explore step 2 until weights
  // version 1, which needs train step 1, which needs explore step 2: it fails at once, naming the mutual wait (before
  // sync_timeout or max_read_timeout end it; src/rft/run/explorer-trainer-wait.ts). trainer_driven runs.
  for (const [style, finishes] of [
    ['trainer_driven', true],
    ['fixed', false],
  ] as const) {
    const { configFile, jobDir } = makeJob({
      totalSteps: 4,
      saveInterval: 4,
      extra: `synchronizer:\n  sync_style: ${style}\n  sync_timeout: 20\n`,
    });
    const run = runConfig(loadConfig(configFile, { resolveAlgorithm, overrides: ['buffer.train_batch_size=16'] }), {
      log: () => {},
    });
    if (!finishes) {
      await assert.rejects(
        run,
        /train step 1 waits for buffer\.train_batch_size = 16 experiences and the buffer holds 8, while the explorer waits for weights version 1 \(which train step 1 makes\) before explore step 2 .*explore step 1 made 8 experience\(s\) from buffer\.batch_size × repeat_times = 8 rollouts\. Set buffer\.train_batch_size to at most 8/,
      );
      continue;
    }
    await run;
    const metrics = metricSteps(jobDir);
    assert.deepEqual(
      metrics.map((m) => [m.step, m['actor/rows']]),
      [
        [1, 16],
        [2, 16],
      ],
      'four explore steps of 8 rollouts fill two train steps of 16',
    );
  }
});
