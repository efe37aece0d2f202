// A real `trinity run` process killed with SIGKILL mid-run; the same command resumes from the last checkpoint and
// finishes with every training step recorded exactly once.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { makeJob, measuresTimeOrMemory } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

const steps = (jobDir: string): number[] => {
  const file = join(jobDir, 'metrics.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => (JSON.parse(l) as { step: number }).step);
};

/**
 * Runs `trinity run`; with `killOn`, sends `signal` the moment the run's output first matches it (an event the run
 * reports, e.g. a checkpoint written), so how fast the machine is changes nothing the test asserts.
 */
function run(
  configFile: string,
  killOn?: RegExp,
  signal: NodeJS.Signals = 'SIGKILL',
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [trinity, 'run', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let sent = false;
    const take = (d: Buffer) => {
      output += d;
      if (killOn && !sent && killOn.test(output)) {
        sent = true;
        child.kill(signal);
      }
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trinity run did not finish within 240 s:\n${output}`));
    }, 240_000);
    child.on('exit', (code, signal) => {
      clearTimeout(deadline);
      resolve({ code, signal, output });
    });
  });
}

// many steps after the kill at checkpoint 2: the run cannot finish before the signal lands
const TOTAL_STEPS = 12;
const ALL_STEPS = Array.from({ length: TOTAL_STEPS }, (_, i) => i + 1);

for (const [label, extra] of [
  ['on-policy', ''],
  ['one-step off-policy (sync_offset 1: the explorer runs a step ahead)', 'synchronizer: {sync_offset: 1}'],
  ['fully_async (weights swapped mid-step)', 'synchronizer: {sync_style: fully_async}'],
] as const) {
  test(`kill -9 during a run, then the same command: resumes from the checkpoint, no step lost or repeated (${label})`, {
    timeout: 600_000,
  }, async () => {
    const { configFile, jobDir } = makeJob({ totalSteps: TOTAL_STEPS, saveInterval: 2, extra });
    const first = await run(configFile, /checkpoint step 2 saved/);
    assert.equal(first.signal, 'SIGKILL', `the first run should have been killed:\n${first.output}`);
    // the run may have written later checkpoints before the signal landed: it resumes from the newest
    const latest = listCheckpoints(jobDir).at(-1);
    assert.ok(latest !== undefined && latest >= 2 && latest < TOTAL_STEPS, `checkpoints: ${listCheckpoints(jobDir)}`);
    const second = await run(configFile);
    assert.equal(second.code, 0, second.output);
    assert.match(second.output, new RegExp(`resuming from checkpoint step ${latest} `));
    assert.deepEqual(steps(jobDir), ALL_STEPS);
    assert.deepEqual(listCheckpoints(jobDir).slice(-1), [TOTAL_STEPS]);
    assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
  });
}

/** The metrics of `step` that do not measure time. */
function lastStepMetrics(jobDir: string, step: number): Record<string, number> {
  const lines = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, number>)
    .filter((m) => m.step === step);
  const merged: Record<string, number> = Object.assign({}, ...lines);
  return Object.fromEntries(Object.entries(merged).filter(([k]) => !measuresTimeOrMemory(k)));
}

test('PPO with a critic and an adaptive KL penalty, killed after a checkpoint and resumed, ends with the metrics of the uninterrupted run', {
  timeout: 600_000,
}, async () => {
  const ppo = `algorithm:
  algorithm_type: ppo
  repeat_times: 2
  optimizer:
    lr: 0.001
  kl_penalty_fn: k1
  kl_penalty_fn_args: {adaptive: true, kl_coef: 0.05, target_kl: 0.01, horizon: 100}`;
  const steps = 6;
  const uninterrupted = makeJob({ totalSteps: steps, saveInterval: 2, algorithm: ppo });
  const whole = await run(uninterrupted.configFile);
  assert.equal(whole.code, 0, whole.output);
  const interrupted = makeJob({ totalSteps: steps, saveInterval: 2, algorithm: ppo });
  const killed = await run(interrupted.configFile, /checkpoint step 2 saved/);
  assert.equal(killed.signal, 'SIGKILL', killed.output);
  const resumed = await run(interrupted.configFile);
  assert.equal(resumed.code, 0, resumed.output);
  assert.match(resumed.output, /resuming from checkpoint step [24] /);
  const expected = lastStepMetrics(uninterrupted.jobDir, steps);
  const actual = lastStepMetrics(interrupted.jobDir, steps);
  // the run really used a critic and moved its KL coefficient
  assert.ok(
    Object.keys(expected).some((k) => k.includes('critic/')),
    Object.keys(expected).join(', '),
  );
  const klCoef = Object.keys(expected).find((k) => k.endsWith('kl_coef'));
  assert.ok(klCoef !== undefined && expected[klCoef] !== 0.05, `the adaptive KL coefficient moved: ${klCoef}`);
  assert.deepEqual(Object.keys(actual).sort(), Object.keys(expected).sort());
  for (const [key, value] of Object.entries(expected))
    assert.ok(
      Math.abs((actual[key] as number) - value) <= 1e-6 * Math.max(1, Math.abs(value)),
      `${key}: ${actual[key]} vs ${value}`,
    );
});

test('Ctrl-C (SIGINT) stops after the current step with exit code 130; the same command resumes and finishes', {
  timeout: 600_000,
}, async () => {
  const { configFile, jobDir } = makeJob({ totalSteps: TOTAL_STEPS, saveInterval: 2, extra: 'synchronizer: {sync_offset: 1}' });
  const first = await run(configFile, /checkpoint step 2 saved/, 'SIGINT');
  assert.equal(first.code, 130, `the first run should stop on SIGINT with 130:\n${first.output}`);
  assert.match(first.output, /stopping after the current step/);
  assert.ok(steps(jobDir).length < TOTAL_STEPS, 'the run stopped before its last step');
  const second = await run(configFile);
  assert.equal(second.code, 0, second.output);
  assert.match(second.output, /resuming from checkpoint step \d+/);
  assert.deepEqual(steps(jobDir), ALL_STEPS);
  assert.ok(existsSync(join(jobDir, 'final_model', 'model.safetensors')));
});
