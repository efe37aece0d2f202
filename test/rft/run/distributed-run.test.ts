// Data-parallel runs end to end (CPU, Gloo): `trinity run --nproc-per-node 2` of the tiny GRPO job against the same
// job in one process, and a rank killed with SIGKILL mid-run, then resumed with one rank. Real processes; every wait
// is on a line the run prints or a process exit.
import assert from 'node:assert/strict';
import type { ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { readSafetensorsHeader } from '../../../src/torch/safetensors.js';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** Runs `trinity run --config F ...args`; `onOutput` sees the output so far after each chunk (to act on an event). */
function run(configFile: string, args: string[] = [], onOutput?: (output: string, child: ChildProcess) => void) {
  return runProcess(process.execPath, [trinity, 'run', '--config', configFile, ...args], {
    onOutput,
    guard: { seconds: 540, what: `trinity run ${args.join(' ')}` },
  });
}

const metricLines = (jobDir: string): { step: number; [key: string]: number }[] => {
  const file = join(jobDir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as { step: number });
};

/** The float32 tensors of a safetensors file, by name. */
function readFloat32(file: string): Map<string, Float32Array> {
  const bytes = readFileSync(file);
  const out = new Map<string, Float32Array>();
  for (const [name, entry] of readSafetensorsHeader(file).entries) {
    assert.equal(entry.dtype, 'float32', `${name} is ${entry.dtype}`);
    const copy = bytes.subarray(entry.byteOffset, entry.byteOffset + entry.byteLength);
    out.set(name, new Float32Array(copy.buffer.slice(copy.byteOffset, copy.byteOffset + copy.byteLength)));
  }
  return out;
}

// micro-batches of 2 rows: a step's 8 experiences are 4 micro-batches, 2 on each rank
const SETS = ['--set', 'trainer.micro_batch_size=2'];

test('trinity run --nproc-per-node 2: every step once, the same rollouts and final parameters as one process', {
  timeout: 1_200_000,
}, async (t) => {
  const single = makeJob({ totalSteps: 3, saveInterval: 2 });
  const ranks = makeJob({ totalSteps: 3, saveInterval: 2 });
  const one = await run(single.configFile, SETS);
  assert.equal(one.code, 0, one.output);
  const two = await run(ranks.configFile, [...SETS, '--nproc-per-node', '2']);
  assert.equal(two.code, 0, two.output);

  // where each rank runs, and what rank 1 did
  assert.match(two.output, /\[rank0\]: data-parallel trainer: rank 0 of 2 \(local rank 0, rendezvous at 127\.0\.0\.1:\d+\)/);
  assert.match(two.output, /\[rank1\]: data-parallel trainer: rank 1 of 2 \(local rank 1, rendezvous at 127\.0\.0\.1:\d+\)/);
  assert.match(two.output, /\[rank1\]: \[run\] rank 1: following rank 0's trainer \(stage of 3 steps/);
  assert.match(two.output, /\[rank1\]: \[run\] rank 1: rank 0 ended the stage; trained 3 steps from step 0/);

  const oneMetrics = metricLines(single.jobDir);
  const twoMetrics = metricLines(ranks.jobDir);
  assert.deepEqual(
    twoMetrics.map((m) => m.step),
    [1, 2, 3],
  );
  // rank 0 explores as one process does: the same rewards per step
  assert.deepEqual(
    twoMetrics.map((m) => m['rollout/reward/mean']),
    oneMetrics.map((m) => m['rollout/reward/mean']),
  );
  t.diagnostic(assertSameFinalModel(single, ranks, ''));
});

/** The final models of the one-process and the 2-rank job agree within 1e-5 (float32), and training moved them. */
function assertSameFinalModel(single: { root: string; jobDir: string }, ranks: { jobDir: string }, stage: string): string {
  const a = readFloat32(join(single.jobDir, stage, 'final_model', 'model.safetensors'));
  const b = readFloat32(join(ranks.jobDir, stage, 'final_model', 'model.safetensors'));
  assert.deepEqual([...b.keys()].sort(), [...a.keys()].sort());
  let worst = 0;
  let moved = 0;
  const start = readFloat32(join(single.root, 'model', 'model.safetensors'));
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    const s = start.get(name) as Float32Array;
    for (let i = 0; i < x.length; i++) {
      worst = Math.max(worst, Math.abs((x[i] as number) - (y[i] as number)));
      moved = Math.max(moved, Math.abs((x[i] as number) - (s[i] as number)));
    }
  }
  assert.ok(moved > 1e-4, `training moved the parameters by at most ${moved}: the comparison would prove nothing`);
  assert.ok(worst <= 1e-5, `largest parameter difference between 2 ranks and 1 process: ${worst}`);
  return `${stage || 'run'}: largest difference ${worst.toExponential(2)}, largest change by training ${moved.toExponential(2)}`;
}

test('--nproc-per-node 2 through stages (SFT from a dataset, then GRPO): rank 1 follows each; same parameters', {
  timeout: 1_200_000,
}, async (t) => {
  // the SFT stage's steps come from the dataset (25 rows / 9 per step = 3): rank 1 must count them as rank 0 does
  const extra = `stages:
  - stage_name: sft
    mode: train
    algorithm: {algorithm_type: sft, optimizer: {lr: 0.001}}
    buffer:
      train_batch_size: 9
      total_steps: null
      trainer_input:
        experience_buffer: {storage_type: file, path: tasks.jsonl}
  - stage_name: grpo
    mode: both
`;
  const single = makeJob({ totalSteps: 2, saveInterval: 2, extra });
  const ranks = makeJob({ totalSteps: 2, saveInterval: 2, extra });
  const one = await run(single.configFile, SETS);
  assert.equal(one.code, 0, one.output);
  const two = await run(ranks.configFile, [...SETS, '--nproc-per-node', '2']);
  assert.equal(two.code, 0, two.output);
  const sftModel = join(ranks.jobDir, 'sft', 'final_model');
  for (const line of [
    "[sft] rank 1: following rank 0's trainer (stage of 3 steps",
    '[sft] rank 1: rank 0 ended the stage; trained 3 steps from step 0',
    `[grpo] rank 1: following rank 0's trainer (stage of 2 steps, model ${sftModel})`,
    '[grpo] rank 1: rank 0 ended the stage; trained 2 steps from step 0',
  ])
    assert.ok(two.output.includes(`[rank1]: ${line}`), `missing '${line}':\n${two.output}`);
  assert.deepEqual(
    metricLines(join(ranks.jobDir, 'sft')).map((m) => m.step),
    [1, 2, 3],
  );
  assert.deepEqual(
    metricLines(join(ranks.jobDir, 'grpo')).map((m) => m.step),
    [1, 2],
  );
  t.diagnostic(assertSameFinalModel(single, ranks, 'sft'));
  t.diagnostic(assertSameFinalModel(single, ranks, 'grpo'));

  // the same command again: both ranks skip the finished stages
  const again = await run(ranks.configFile, [...SETS, '--nproc-per-node', '2']);
  assert.equal(again.code, 0, again.output);
  for (const stage of ['sft', 'grpo'])
    assert.match(again.output, new RegExp(`\\[rank1\\]: \\[${stage}\\] rank 1: finished earlier .*: skipped`));
});

test('a rank killed with SIGKILL: the run exits non-zero naming the rank and collective; 1 rank resumes it', {
  timeout: 1_200_000,
}, async () => {
  const TOTAL = 8;
  const { configFile, jobDir } = makeJob({ totalSteps: TOTAL, saveInterval: 2 });
  let killed: number | null = null;
  const first = await run(configFile, [...SETS, '--nproc-per-node', '2'], (output) => {
    const pid = /\[launcher\] rank 1: pid (\d+)/.exec(output)?.[1];
    if (killed === null && pid !== undefined && /\[rank0\]: .*checkpoint step 2 saved/.test(output)) {
      killed = Number(pid);
      process.kill(killed, 'SIGKILL');
    }
  });
  assert.ok(killed !== null, `rank 1 was never killed:\n${first.output}`);
  assert.notEqual(first.code, 0, first.output);
  assert.match(first.output, new RegExp(`rank 1 \\(pid ${killed}\\) exited: killed by SIGKILL`));
  // rank 0 names itself and the collective it was in when rank 1's connection broke
  assert.match(first.output, /\[rank0\]: trinity: .*\b\w+ on rank 0 of 2 \(gloo\) (failed|timed out)/);
  const latest = listCheckpoints(jobDir).at(-1);
  assert.ok(latest !== undefined && latest >= 2 && latest < TOTAL, `checkpoints: ${listCheckpoints(jobDir)}`);

  const second = await run(configFile, SETS);
  assert.equal(second.code, 0, second.output);
  assert.match(second.output, new RegExp(`resuming from checkpoint step ${latest} `));
  assert.deepEqual(
    metricLines(jobDir).map((m) => m.step),
    Array.from({ length: TOTAL }, (_, i) => i + 1),
  );
  assert.deepEqual(listCheckpoints(jobDir).slice(-1), [TOTAL]);
});

test('Ctrl-C on --nproc-per-node 2 stops every rank after the step (130); the same command finishes the run', {
  timeout: 1_200_000,
}, async () => {
  const TOTAL = 6;
  const { configFile, jobDir } = makeJob({ totalSteps: TOTAL, saveInterval: 2 });
  let sent = false;
  const first = await run(configFile, [...SETS, '--nproc-per-node', '2'], (output, child) => {
    if (!sent && /\[rank0\]: .*checkpoint step 2 saved/.test(output)) {
      sent = true;
      child.kill('SIGINT');
    }
  });
  assert.equal(first.code, 130, first.output);
  assert.match(first.output, /\[rank1\]: \[run\] rank 1: stopped; run the same command to resume/);
  assert.match(first.output, /\[launcher\] rank 0 \(pid \d+\) exited: exit code 130/);
  assert.match(first.output, /\[launcher\] rank 1 \(pid \d+\) exited: exit code 130/);
  const second = await run(configFile, [...SETS, '--nproc-per-node', '2']);
  assert.equal(second.code, 0, second.output);
  assert.match(second.output, /\[rank0\]: \[run\] resuming from checkpoint step \d+ /);
  assert.deepEqual(
    metricLines(jobDir).map((m) => m.step),
    Array.from({ length: TOTAL }, (_, i) => i + 1),
  );
});
