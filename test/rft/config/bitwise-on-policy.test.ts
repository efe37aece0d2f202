// trainer.bitwise_on_policy's rules (src/rft/trainer/config.ts checkBitwiseOnPolicy): the sampler and the trainer
// must run the batch-invariant forward on the same weights in the same dtype, on the CPU. What the mode does not
// cover is refused at its key, never accepted and ignored: an external engine, another trainer dtype, a GPU and sharded
// parameters (trainer_strategy fsdp). Rows packed without pads (use_remove_padding true) keep the bits and are accepted.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig } from '../../../src/rft/run/config/index.js';
import { modelFolder, problemsOf, runnableConfigText, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-bitwise-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

/** A runnable config with bitwise_on_policy and `trainer` (YAML flow-mapping entries), `explorer` likewise. */
function configText(trainer = '', explorer = ''): string {
  return runnableConfigText(
    { model, tasks, root: dir },
    `trainer: {bitwise_on_policy: true${trainer ? `, ${trainer}` : ''}}\nexplorer: {rollout_model: {${explorer}}}\n`,
  );
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });
const problems = (trainer = '', explorer = '') => problemsOf(load, configText(trainer, explorer));

describe('trainer.bitwise_on_policy', () => {
  it('is accepted with the embedded engine on the CPU, padded or packed rows and data parallelism', () => {
    assert.deepEqual(problems(), []);
    assert.deepEqual(problems('use_remove_padding: false'), []);
    assert.deepEqual(problems('use_remove_padding: true'), []);
  });

  it('refuses what it does not cover, at its key', () => {
    const only = (list: string[]) => {
      assert.equal(list.length, 1, list.join('\n'));
      return list[0] as string;
    };
    assert.match(only(problems('trainer_strategy: fsdp')), /^trainer\.bitwise_on_policy: .*trainer_strategy fsdp/);
    assert.match(only(problems('device: cuda')), /^trainer\.bitwise_on_policy: runs on the CPU.*trainer\.device is cuda/);
    assert.match(
      only(problems('param_dtype: float32')),
      /^trainer\.bitwise_on_policy: needs the trainer to compute in the rollout engine's dtype/,
    );
    assert.ok(
      problems('', 'engine_type: openai, base_url: "http://127.0.0.1:1/v1"').some((p) =>
        /^trainer\.bitwise_on_policy: needs the embedded rollout engine/.test(p),
      ),
    );
  });
});
