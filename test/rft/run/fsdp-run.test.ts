// A whole run with trainer.trainer_strategy fsdp on 2 ranks (trinity run --nproc-per-node 2; CPU, Gloo; a tiny qwen2
// of 2 layers): the explorer on rank 0 samples with the weights gathered from the shards at each sync, the steps
// train the sharded policy, and the run ends with the metrics and the final parameters of the same run in one process
// without sharding (float32, 1e-5), and its final_model folder (consolidated) holds every weight. Real processes;
// every wait is on a process exit.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { readSafetensorsHeader } from '../../../src/torch/safetensors.js';
import { runProcess } from '../../helpers/run-process.js';
import { makeJob, measuresTimeOrMemory } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

function run(configFile: string, args: string[]) {
  return runProcess(process.execPath, [trinity, 'run', '--config', configFile, ...args], {
    guard: { seconds: 540, what: `trinity run ${args.join(' ')}` },
  });
}

/** The trainer's metrics of every step (explorer lines left out), without timings. */
function trainerMetrics(jobDir: string): Record<string, number>[] {
  return readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8')
    .split('\n')
    .filter((l) => l.trim())
    .map((l) => JSON.parse(l) as Record<string, number>)
    .filter((m) => 'actor/loss' in m)
    .map((m) => Object.fromEntries(Object.entries(m).filter(([k]) => !measuresTimeOrMemory(k))));
}

function finalModel(jobDir: string): Map<string, Float32Array> {
  const file = join(jobDir, 'final_model', 'model.safetensors');
  const bytes = readFileSync(file);
  const out = new Map<string, Float32Array>();
  for (const [name, entry] of readSafetensorsHeader(file).entries) {
    const copy = bytes.subarray(entry.byteOffset, entry.byteOffset + entry.byteLength);
    out.set(name, new Float32Array(copy.buffer.slice(copy.byteOffset, copy.byteOffset + copy.byteLength)));
  }
  return out;
}

// micro-batches of 2 rows: a step's 8 experiences are 4 micro-batches, 2 on each rank; fsdp recomputes each layer
const SETS = ['--set', 'trainer.micro_batch_size=2', '--set', 'trainer.gradient_checkpointing=true'];

test('trainer_strategy fsdp on 2 ranks: the run ends as the one-process run does', { timeout: 1_200_000 }, async () => {
  const model = { numLayers: 2 };
  const one = makeJob({ totalSteps: 3, saveInterval: 0, model });
  const whole = await run(one.configFile, SETS);
  assert.equal(whole.code, 0, whole.output);
  const sharded = makeJob({ totalSteps: 3, saveInterval: 0, model });
  const ranks = await run(sharded.configFile, [...SETS, '--set', 'trainer.trainer_strategy=fsdp', '--nproc-per-node', '2']);
  assert.equal(ranks.code, 0, ranks.output);
  assert.match(
    ranks.output,
    /trainer\.trainer_strategy=fsdp -> the policy's parameters, gradients and AdamW state sharded over the 2 trainer ranks/,
  );

  const expected = trainerMetrics(one.jobDir);
  const actual = trainerMetrics(sharded.jobDir);
  assert.equal(actual.length, 3);
  assert.equal(expected.length, 3);
  for (const [i, step] of expected.entries())
    for (const [key, value] of Object.entries(step))
      assert.ok(
        Math.abs((actual[i]?.[key] as number) - value) <= 1e-5 * Math.max(1, Math.abs(value)),
        `step ${i + 1} ${key}: ${actual[i]?.[key]} vs ${value}`,
      );
  const a = finalModel(one.jobDir);
  const b = finalModel(sharded.jobDir);
  assert.deepEqual([...b.keys()].sort(), [...a.keys()].sort());
  let worst = 0;
  for (const [name, x] of a) {
    const y = b.get(name) as Float32Array;
    assert.equal(y.length, x.length, name);
    for (let i = 0; i < x.length; i++) worst = Math.max(worst, Math.abs((x[i] as number) - (y[i] as number)));
  }
  assert.ok(worst <= 1e-5, `final parameters differ from the one-process run's by ${worst}`);
});
