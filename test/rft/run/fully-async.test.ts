// synchronizer.sync_style fully_async end to end on the tiny job (./helpers.ts):
// 1. an explorer process (mode explore) swaps weights in the middle of an explore step. The test plays the trainer
//    process: a workflow publishes version 1 into the job's sync folder after its first call, then calls the model
//    until a call comes back stamped 1 (the explorer's follower loaded the folder through the gate). What ends the
//    wait is the swap itself, not a time: the step's rows carry versions 0 and 1, and the same seeded call gives
//    other log-probs after the swap (the weights really changed).
// 2. mode both (one engine, a pool of two): trainer and explorer in one process; every train step's staleness
//    metrics agree with the versions of the experiences it trained on (none newer than the trainer's weights).
// 3. mode both resumed from a checkpoint: the explorer goes on from the checkpoint's weights version, and so do the
//    versions its experiences carry.
// 4. sync_offset has no meaning with fully_async: refused, naming the key.
import assert from 'node:assert/strict';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { SqliteBuffer } from '../../../src/rft/buffer/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { ConfigError, loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { publishToSyncFolder } from '../../../src/rft/sync/sync-folder.js';
import { WORKFLOWS, type WorkflowContext } from '../../../src/rft/workflow/index.js';
import { makeJob } from './helpers.js';

const metricLines = (jobDir: string) =>
  readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>);

test('fully_async with sync_offset is refused, naming the key', () => {
  const { configFile } = makeJob({ totalSteps: 2, saveInterval: 2 });
  assert.throws(
    () =>
      loadConfig(configFile, {
        resolveAlgorithm,
        overrides: ['synchronizer.sync_style=fully_async', 'synchronizer.sync_offset=1'],
      }),
    (error: unknown) =>
      error instanceof ConfigError &&
      /synchronizer\.sync_offset: \(1\) has no meaning with sync_style fully_async/.test(error.message),
  );
});

test('mode explore: a version published mid-step is swapped in at once; one explore step carries versions 0 and 1', {
  timeout: 600_000,
}, async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 1, saveInterval: 1 });
  const bufferPath = join(root, 'buffer.db');
  /** The first task's calls: [version, log-probs of the seeded call] before and after the swap. */
  const seen: { version: number; logprobs: number[] }[] = [];
  let swapper: string | null = null;
  WORKFLOWS.register('fully_async_probe', async ({ task, model, seed }: WorkflowContext): Promise<Experience[]> => {
    const tokenizer = model.tokenizer;
    assert.ok(tokenizer);
    const call = async () => {
      const result = await model.generate({ promptIds: tokenizer.encode('1+2='), maxTokens: 2, temperature: 1, seed });
      const completion = result.completions[0];
      assert.ok(completion);
      const experience = model.toExperience(completion, { reward: 0 });
      return { experience, version: experience.info.modelVersion as number, logprobs: completion.logprobs };
    };
    const first = await call();
    swapper ??= task.id;
    if (swapper !== task.id) return [first.experience];
    seen.push(first);
    // the trainer process's part: version 1, other weights, in the job's sync folder
    await publishToSyncFolder(
      {
        saveWeights: async (dir) => {
          initModel(dir, { hiddenSize: 32, numLayers: 1, numHeads: 2, seed: 7, alphabet: '0123456789+= ' });
        },
      },
      jobDir,
      1,
    );
    // the explorer follows the folder and swaps between two calls: the first call stamped 1 ends the wait
    let last = await call();
    while (last.version === 0) last = await call();
    seen.push(last);
    return [first.experience, last.experience];
  });
  const overrides = [
    'mode=explore',
    'buffer.trainer_input.experience_buffer.storage_type=sql',
    `buffer.trainer_input.experience_buffer.path=${bufferPath}`,
    'buffer.explorer_input.default_workflow_type=fully_async_probe',
    'synchronizer.sync_style=fully_async',
    'synchronizer.sync_timeout=300',
  ];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });

  assert.deepEqual(
    seen.map((s) => s.version),
    [0, 1],
    'the first task called the model on version 0, then on version 1',
  );
  assert.notDeepEqual(seen[0]?.logprobs, seen[1]?.logprobs, 'the seeded call ran on other weights after the swap');
  const buffer = new SqliteBuffer({ path: bufferPath, readonly: true });
  try {
    const rows = buffer.peek({ limit: 100 }).map(({ experience: e }) => e.info);
    assert.ok(rows.length >= 3);
    assert.ok(rows.every((info) => info.step === 1));
    const versions = new Set(rows.map((info) => info.modelVersion));
    assert.deepEqual([...versions].sort(), [0, 1], 'explore step 1 holds experiences of versions 0 and 1');
    assert.deepEqual(
      rows.filter((info) => info.taskId === swapper).map((info) => info.modelVersion),
      [0, 1],
    );
  } finally {
    await buffer.close();
  }
});

for (const [label, engines] of [
  ['one engine', null],
  ['a pool of 2 engines (engine_num 2)', 'explorer.rollout_model.engine_num=2'],
] as const) {
  test(`mode both (${label}): staleness metrics per train step agree with the versions trained on`, {
    timeout: 600_000,
  }, async () => {
    const totalSteps = 4;
    const { configFile, jobDir } = makeJob({
      totalSteps,
      saveInterval: 2,
      extra: 'synchronizer:\n  sync_style: fully_async\n',
    });
    const overrides = engines === null ? [] : [engines];
    await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
    const metrics = metricLines(jobDir);
    assert.deepEqual(
      metrics.map((m) => m.step),
      [1, 2, 3, 4],
    );
    for (const m of metrics) {
      const trainerVersion = (m.step as number) - 1;
      const mean = m['sample/model_version/mean'] as number;
      const min = m['sample/model_version/min'] as number;
      const max = m['sample/model_version/max'] as number;
      assert.ok(min <= mean && mean <= max, `step ${m.step}: min ${min} ≤ mean ${mean} ≤ max ${max}`);
      // version v exists once train step v ended: an experience trained at step s was made with v ≤ s − 1
      assert.ok(max <= trainerVersion, `step ${m.step}: no experience newer than the trainer's weights (${max})`);
      assert.ok(Math.abs((m['trainer/staleness'] as number) - (trainerVersion - mean)) < 1e-9, `step ${m.step}`);
      assert.equal(m['trainer/staleness/max'], trainerVersion - min);
    }
    assert.equal(metrics[0]?.['sample/model_version/max'], 0, 'step 1 trains on rollouts of the base model');
  });
}

test('mode both resumed from checkpoint 2: explores and trains steps 3 and 4 from weights version 2 on', {
  timeout: 600_000,
}, async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: 4, saveInterval: 2, extra: 'synchronizer:\n  sync_style: fully_async\n' });
  // a run that stopped after its checkpoint at step 2 (the stage's done marker removed: it did not finish)
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides: ['buffer.total_steps=2'] }), { log: () => {} });
  rmSync(join(jobDir, 'done.json'));
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { log: () => {} });
  const metrics = metricLines(jobDir);
  assert.deepEqual(
    metrics.map((m) => m.step),
    [1, 2, 3, 4],
  );
  for (const m of metrics.slice(2)) {
    assert.ok((m['explorer/model_version'] as number) >= 2, `explore step ${m.step} started from version 2 or newer`);
    assert.ok((m['sample/model_version/min'] as number) >= 2, `train step ${m.step}: experiences of version 2 or newer`);
  }
});
