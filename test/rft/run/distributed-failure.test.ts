// A data-parallel run whose rank 0 fails its stage between two steps: `trinity run --nproc-per-node 2` of a two-stage
// job whose first stage samples its training batches with a sample_strategy plug-in (./fail-at-step-2.mjs, written
// here) that hands out step 1's batch and throws at step 2. The plug-in runs in rank 0's run loop alone (rank 1 only
// trains what rank 0 sends), so rank 0's stage fails while rank 1 waits for its next command. Rank 0's trainer then
// tells rank 1 that the stage failed and why: both ranks exit non-zero, rank 1 naming rank 0 and its error, and rank 1
// never starts the second stage. trainer.distributed_timeout is 600 s (the launcher gives a rank that does not stop
// 605 s before SIGTERM), far beyond the harness guard: a rank 1 that went on to wait at the second stage's rendezvous
// would fail this test at the guard; nothing here measures time.
import assert from 'node:assert/strict';

import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const FAILURE = 'the sample strategy broke at step 2 (a test fault)';

const PLUGIN = `export const failAtStep2 = {
  description: 'step 1: the buffer batch; step 2: throws',
  defaults: {},
  run: () => {
    let calls = 0;
    return {
      async sample(input) {
        calls += 1;
        if (calls === 2) throw new Error(${JSON.stringify(FAILURE)});
        const experiences = await input.source.read(input.batchSize, { timeoutMs: input.timeoutMs, minCount: input.minCount ?? input.batchSize });
        return { experiences, metrics: { 'sample/count': experiences.length } };
      },
    };
  },
};
`;

function run(configFile: string, args: string[]) {
  return runProcess(process.execPath, [trinity, 'run', '--config', configFile, ...args], {
    guard: { seconds: 540, what: `trinity run ${args.join(' ')}` },
  });
}

test('rank 0 fails its stage after step 1: both ranks exit non-zero at once, rank 1 naming rank 0 and its error', {
  timeout: 600_000,
}, async () => {
  const extra = `stages:
  - stage_name: first
    algorithm:
      algorithm_type: grpo
      repeat_times: 4
      optimizer: {lr: 0.001}
      sample_strategy: fail-at-step-2.mjs#failAtStep2
  - stage_name: second
`;
  const { root, configFile, jobDir } = makeJob({ totalSteps: 3, saveInterval: 10, extra });
  writeFileSync(join(root, 'fail-at-step-2.mjs'), PLUGIN);
  const { code, output } = await run(configFile, [
    '--nproc-per-node',
    '2',
    '--set',
    'trainer.distributed_timeout=600',
    '--set',
    'trainer.micro_batch_size=2',
  ]);

  assert.notEqual(code, 0, output);
  // step 1 was trained on both ranks before the failure
  const metrics = readFileSync(join(jobDir, 'first', 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n');
  assert.deepEqual(
    metrics.map((l) => (JSON.parse(l) as { step: number }).step),
    [1],
  );
  // rank 0 fails with its own error; rank 1 with one that names rank 0 and carries rank 0's message
  assert.match(output, new RegExp(`\\[rank0\\]: trinity: .*${escapeRegExp(FAILURE)}`));
  assert.match(
    output,
    new RegExp(
      `\\[rank1\\]: trinity: .*trainer rank 1 of 2: rank 0's stage failed, so this rank stops too; rank 0: .*${escapeRegExp(FAILURE)}`,
    ),
  );
  const exits = [...output.matchAll(/\[launcher\] rank (\d) \(pid \d+\) exited: (.*)/g)].map((m) => [m[1], m[2]]);
  assert.equal(exits.length, 2, output);
  for (const [rank, how] of exits) assert.match(how as string, /^exit code [1-9]\d*$/, `rank ${rank}: ${how}\n${output}`);
  // rank 1 never went on to the second stage (where it would have waited for a rendezvous that never comes)
  assert.doesNotMatch(output, /\[rank1\]: \[second\]/);
  assert.equal(existsSync(join(jobDir, 'second')), false);
});

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
