// trainer.trainer_strategy (fsdp, fsdp2: the policy sharded over the trainer ranks, src/rft/trainer/fsdp.ts) and
// trainer.{param,optimizer}_offload (src/rft/trainer/config.ts checkTrainerStrategy, src/rft/run/config/
// trinity-report.ts shardingPlacement): what the strategy covers is checked at its key path, the stage settings carry
// it to the trainer ranks, and what it and the offload keys do on this machine is said in the config report — on the
// CPU offload changes nothing, and the report says so; on a GPU it is a problem (not implemented).
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig, resolveStages } from '../../../src/rft/run/config/index.js';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { shardingPlacement } from '../../../src/rft/run/config/trinity-report.js';
import { modelFolder, problemsOf, runnableConfigText, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-strategy-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

/** A runnable config whose trainer section is `trainer` (a YAML flow mapping), with `extra` top-level keys. */
function configText(trainer: string, extra = ''): string {
  return runnableConfigText({ model, tasks, root: dir }, `trainer: ${trainer}\n${extra}`);
}

const load = (text: string): Config => parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'run.yaml') });

describe('trainer.trainer_strategy', () => {
  it('fsdp and fsdp2 shard the policy; unset, every rank holds it (the settings the trainer ranks get)', () => {
    const strategy = (trainer: string) =>
      stageSettings(resolveStages(load(configText(trainer)))[0] as never, model).trainer.strategy;
    assert.equal(strategy('{trainer_strategy: fsdp}'), 'fsdp');
    assert.equal(strategy('{trainer_strategy: fsdp2}'), 'fsdp');
    assert.equal(strategy('{}'), 'ddp');
  });

  it('refuses what it does not cover, at the key path', () => {
    const problems = (trainer: string) => problemsOf(load, configText(trainer));
    assert.match(problems('{trainer_strategy: megatron}')[0] ?? '', /^trainer\.trainer_strategy: megatron .*not implemented/);
    assert.match(
      problems('{trainer_strategy: fsdp, gradient_checkpointing: false}')[0] ?? '',
      /^trainer\.gradient_checkpointing: false: .*gathers each layer again for its backward/,
    );
    assert.match(problems('{trainer_strategy: fsdp2, zero_stage: 1}')[0] ?? '', /^trainer\.zero_stage: 1: .*already shards/);

    assert.match(
      problems('{param_offload: true}')[0] ?? '',
      /^trainer\.param_offload: offloads the shards of trainer\.trainer_strategy/,
    );
    assert.deepEqual(problems('{trainer_strategy: fsdp, param_offload: true, optimizer_offload: true}'), []);
  });
});

describe('the config report', () => {
  const stages = resolveStages(load(configText('{trainer_strategy: fsdp, param_offload: true, optimizer_offload: true}')));

  it('on the CPU: sharded over the ranks, offload changes nothing (said, not silent)', () => {
    const { lines, problems } = shardingPlacement(stages, { gpus: 0, worldSize: 2 });
    assert.deepEqual(problems, []);
    assert.deepEqual(lines, [
      "trainer.trainer_strategy=fsdp -> the policy's parameters, gradients and AdamW state sharded over the 2 trainer ranks, each layer gathered while it runs",
      'trainer.param_offload=true -> nothing: the trainer runs on the CPU, where the shards and the optimizer state already live in host memory',
      'trainer.optimizer_offload=true -> nothing: the trainer runs on the CPU, where the shards and the optimizer state already live in host memory',
    ]);
    assert.match(shardingPlacement(stages, { gpus: 0, worldSize: 1 }).lines[0] ?? '', /one trainer rank: nothing to shard/);
  });

  it('with LoRA: accepted, the frozen base sharded and the adapters replicated', () => {
    const withLora = configText('{trainer_strategy: fsdp}').replace(
      /^model: .*$/m,
      `model: {model_path: ${model}, max_model_len: 64, lora: {rank: 4, alpha: 8, target_modules: all-linear}}`,
    );
    assert.deepEqual(problemsOf(load, withLora), []);
    assert.deepEqual(shardingPlacement(resolveStages(load(withLora)), { gpus: 0, worldSize: 2 }).lines, [
      'trainer.trainer_strategy=fsdp -> the frozen base model sharded (the LoRA adapters replicated, their gradients summed) over the 2 trainer ranks, each layer gathered while it runs',
    ]);
  });

  it('on a GPU (trainer.device auto): offload is a problem at its key', () => {
    const { problems } = shardingPlacement(stages, { gpus: 1, worldSize: 1 });
    assert.deepEqual(
      problems.map((p) => p.path),
      ['trainer.param_offload', 'trainer.optimizer_offload'],
    );
    assert.match(problems[0]?.message ?? '', /not implemented/);
  });

  it('trinity config check prints the lines with the mapped keys', async () => {
    const text = configText('{trainer_strategy: fsdp2, param_offload: true, device: cpu}');
    const { resolvedYaml } = await checkConfigText(text, join(dir, 'check.yaml'), { env: { WORLD_SIZE: '1' } });
    assert.match(resolvedYaml, /# {3}trainer\.trainer_strategy=fsdp2 -> one trainer rank: nothing to shard/);
    assert.match(resolvedYaml, /# {3}trainer\.param_offload=true -> nothing: the trainer runs on the CPU/);
  });
});
