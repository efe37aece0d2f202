// Mode bench's targets (explorer.bench_on_latest_checkpoint): the base model and every checkpoint, or only the newest;
// and `trinity bench` over the folder of a finished run (Trinity's flow: train, then benchmark the checkpoints).
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { benchTargets } from '../../../src/rft/explorer/bench.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

/** A job folder with checkpoints (state.json + model/) at `steps`, and LoRA-only ones (adapter/) at `adapters`. */
function jobWith(steps: number[], adapters: number[] = []): string {
  const jobDir = mkdtempSync(join(tmpdir(), 'bench-targets-'));
  for (const step of [...steps, ...adapters]) {
    const dir = join(jobDir, 'checkpoints', `global_step_${step}`);
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'state.json'), '{}');
    mkdirSync(join(dir, adapters.includes(step) ? 'adapter' : 'model'));
  }
  return jobDir;
}

test('bench: the base model and every checkpoint with a model, in step order', () => {
  const jobDir = jobWith([4, 2]);
  assert.deepEqual(
    benchTargets(jobDir, false).map((t) => [t.step, t.dir]),
    [
      [0, null],
      [2, join(jobDir, 'checkpoints', 'global_step_2', 'model')],
      [4, join(jobDir, 'checkpoints', 'global_step_4', 'model')],
    ],
  );
});

test('bench_on_latest_checkpoint: only the newest checkpoint; the base model when there is none', () => {
  const jobDir = jobWith([2, 4]);
  assert.deepEqual(
    benchTargets(jobDir, true).map((t) => t.step),
    [4],
  );
  assert.deepEqual(benchTargets(jobWith([]), true), [{ step: 0, dir: null }]);
});

test('a checkpoint holding only a LoRA adapter, or a sharded policy, is an error naming it (the engine loads full models)', () => {
  const jobDir = jobWith([2], [4]);
  assert.throws(() => benchTargets(jobDir, false), /global_step_4 holds a LoRA adapter, not a full model/);
  const sharded = join(jobWith([2]), 'checkpoints', 'global_step_2');
  rmSync(join(sharded, 'model'), { recursive: true });
  mkdirSync(join(sharded, 'sharded'));
  assert.throws(
    () => benchTargets(join(sharded, '..', '..'), false),
    /global_step_2 holds a fully sharded policy's shards, not a full model/,
  );
});

test('trinity bench after a finished run evaluates the base model and its checkpoints; the run stays finished', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 1 });
  const lines: string[] = [];
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: (l) => lines.push(l) });
  // done.json and the log say how many steps were trained of how many asked
  assert.ok(lines.includes('[run] finished: trained 2 of 2 step(s)'), lines.join('\n'));
  const done = () => JSON.parse(readFileSync(join(jobDir, 'done.json'), 'utf8')) as unknown;
  const trained = { finalModelDir: join(jobDir, 'final_model'), steps: 2, stepsAsked: 2, mode: 'both' };
  assert.deepEqual(done(), trained);
  // what `trinity bench --config FILE` runs: the same config with mode bench (and an eval taskset)
  const bench = [`buffer.explorer_input.eval_tasksets=[{name: eval, path: ${join(root, 'tasks.jsonl')}}]`, 'mode=bench'];
  const benchLines: string[] = [];
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides: bench }), {
    distributed: null,
    log: (l) => benchLines.push(l),
  });
  assert.ok(!benchLines.some((l) => /finished earlier/.test(l)), benchLines.join('\n'));
  const evaluated = readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, number>)
    .filter((m) => Number.isFinite(m['eval/eval/mean@1']))
    .map((m) => m.step);
  assert.deepEqual(evaluated, [0, 1, 2], 'the base model and both checkpoints');
  // the training stage's record stays: the same `trinity run` skips it as finished
  assert.deepEqual(done(), trained);
  const again: string[] = [];
  await runConfig(loadConfig(configFile, { resolveAlgorithm }), { distributed: null, log: (l) => again.push(l) });
  assert.ok(again.some((l) => /finished earlier/.test(l)));
});
