// Trinity-RFT's keys for hardware and engines this backend does not have, and its values in Trinity's terms
// (src/rft/config/ignored-keys.ts, src/rft/run/config/trinity-mappings.ts, trinity-report.ts): what is ignored is
// reported with its value and why, what is mapped says what it became, bad values are problems at their key path,
// and cluster.* is checked against the machine.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { type Config, parseConfig, resolveStages, type StageConfig } from '../../../src/rft/run/config/index.js';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { stageSettings } from '../../../src/rft/run/config/stage-settings.js';
import { runConfig, trinityKeysFile } from '../../../src/rft/run/run.js';
import { clusterPlacement, type Machine } from '../../../src/rft/run/config/trinity-report.js';
import { modelFolder, tasksetFile, problemsOf } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-keys-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

/** A runnable config with `extra` top-level keys; `trainerInput` is buffer.trainer_input (a YAML flow mapping). */
function configText(extra: string, mode = 'both', trainerInput = '{}'): string {
  return `mode: ${mode}
model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
buffer:
  batch_size: 2
  train_batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
  trainer_input: ${trainerInput}
${extra}`;
}

const load = (text: string, file = join(dir, 'run.yaml')): Config => parseConfig(text, { env: {}, cwd: dir, file });

const problemsIn = (text: string): string[] => problemsOf(load, text);

const mappedTo = (config: Config, path: string): string | null =>
  config.trinity_keys.mapped.find((m) => m.path === path)?.to ?? null;

describe('Trinity keys this backend ignores', () => {
  it('takes them out of the tree and records each with its value and why', () => {
    const config = load(
      configText(`explorer:
  rollout_model: {gpu_memory_utilization: 0.7, tensor_parallel_size: 2, enforce_eager: "true"}
trainer: {ulysses_sequence_parallel_size: 1, trainer_config: {actor_rollout_ref: {actor: {fsdp_config: {param_offload: true}}}}}
ray_namespace: demo
log: {level: INFO}
cluster: {ray_address: auto}
`),
    );
    const ignored = new Map(config.trinity_keys.ignored.map((k) => [k.path, k]));
    assert.deepEqual([...ignored.keys()].sort(), [
      'cluster.ray_address',
      'explorer.rollout_model.enforce_eager',
      'explorer.rollout_model.gpu_memory_utilization',
      'explorer.rollout_model.tensor_parallel_size',
      'log.level',
      'ray_namespace',
      'trainer.trainer_config',
      'trainer.ulysses_sequence_parallel_size',
    ]);
    assert.equal(ignored.get('explorer.rollout_model.gpu_memory_utilization')?.value, 0.7);
    assert.match(ignored.get('explorer.rollout_model.gpu_memory_utilization')?.why ?? '', /KV-cache/);
    assert.equal(config.trinity_keys.cluster, null, 'cluster.ray_address alone asks for no placement');
  });

  it('reports a value of the wrong type at its key path, with the others', () => {
    const problems = problemsIn(
      configText(`explorer: {rollout_model: {gpu_memory_utilization: high}}
trainer: {ulysses_sequence_parallel_size: 1.5, trainer_config: 3}
`),
    );
    assert.deepEqual(problems.map((p) => p.split(':')[0]).sort(), [
      'explorer.rollout_model.gpu_memory_utilization',
      'trainer.trainer_config',
      'trainer.ulysses_sequence_parallel_size',
    ]);
    assert.match(problems.find((p) => p.startsWith('trainer.trainer_config')) ?? '', /expected a mapping, got 3/);
  });

  it("takes a stage's keys too, and mix's veRL batch knobs out of policy_loss_fn_args", () => {
    const config = load(
      configText(`algorithm:
  algorithm_type: grpo
  repeat_times: 2
  policy_loss_fn_args: {clip_range: 0.2, ppo_micro_batch_size_per_gpu: 4, ngpus_trainer: 4}
stages:
  - stage_name: a
    trainer: {trainer_type: verl}
`),
    );
    const paths = config.trinity_keys.ignored.map((k) => k.path).sort();
    assert.deepEqual(paths, [
      'algorithm.policy_loss_fn_args.ngpus_trainer',
      'algorithm.policy_loss_fn_args.ppo_micro_batch_size_per_gpu',
      'stages.0.trainer.trainer_type',
    ]);
    assert.equal(config.stages[0]?.algorithm.policy_loss_fn_args?.clip_range, 0.2);
  });

  it('leaves keys it does not list to the schema (an unknown key is still a problem)', () => {
    const problems = problemsIn(configText('trainer: {use_dynamic_bsize: true}\n'));
    assert.equal(problems.length, 1);
    assert.match(problems[0] ?? '', /^trainer\.use_dynamic_bsize: unknown key 'use_dynamic_bsize'/);
  });
});

describe('Trinity values mapped', () => {
  it('sync_method nccl (any case, or online) becomes the fastest weight channel for the placement', () => {
    const both = load(configText('synchronizer: {sync_method: NCCL}\n'));
    assert.equal(both.synchronizer.sync_method, 'memory');
    assert.match(mappedTo(both, 'synchronizer.sync_method') ?? '', /^memory \(the trainer and the embedded engine share/);
    const processes = load(
      configText('synchronizer: {sync_method: online}\nexplorer: {rollout_model: {engine_process: true}}\n'),
    );
    assert.equal(processes.synchronizer.sync_method, 'checkpoint');
    assert.match(mappedTo(processes, 'synchronizer.sync_method') ?? '', /^checkpoint \(the engines run in processes/);
    const explore = load(
      configText('synchronizer: {sync_method: nccl}\n', 'explore', '{experience_buffer: {storage_type: sql}}'),
    );
    assert.match(mappedTo(explore, 'synchronizer.sync_method') ?? '', /^checkpoint \(mode explore: the trainer and the explorer/);
    const offline = load(configText('synchronizer: {sync_method: offline}\n'));
    assert.equal(offline.synchronizer.sync_method, 'checkpoint');
  });

  it('names the channel of each stage when they differ', () => {
    const config = load(
      configText(`synchronizer: {sync_method: nccl}
stages:
  - stage_name: rl
  - stage_name: remote
    explorer: {rollout_model: {engine_process: true}}
`),
    );
    assert.match(mappedTo(config, 'synchronizer.sync_method') ?? '', /in stage 'rl': memory .*; in stage 'remote': checkpoint/);
  });

  it('engine_type vllm/sglang is the embedded engine, or the external pool when base_url is set', () => {
    const embedded = load(configText('explorer: {rollout_model: {engine_type: vllm_async}}\n'));
    assert.equal(embedded.explorer.rollout_model.engine_type, 'embedded');
    const external = load(
      configText(
        'explorer: {rollout_model: {engine_type: SGLang, base_url: "http://127.0.0.1:9/v1"}}\nsynchronizer: {sync_method: checkpoint}\n',
      ),
    );
    assert.equal(external.explorer.rollout_model.engine_type, 'openai');
    assert.match(mappedTo(external, 'explorer.rollout_model.engine_type') ?? '', /^openai/);
  });

  it('a queue on sqlite:/// is the SQL buffer on that file in separate processes, two configs in one folder sharing it', () => {
    const buffer = '{experience_buffer: {name: exps, storage_type: queue, path: "sqlite:///shared.db"}}';
    const explorer = load(configText('', 'explore', buffer), join(dir, 'explorer.yaml'));
    const trainer = load(configText('', 'train', buffer), join(dir, 'trainer.yaml'));
    for (const config of [explorer, trainer]) {
      assert.equal(config.buffer.trainer_input.experience_buffer.storage_type, 'sql');
      assert.equal(config.buffer.trainer_input.experience_buffer.path, join(dir, 'shared.db'));
    }
    const absolute = load(configText('', 'explore', `{experience_buffer: {storage_type: sql, path: "sqlite:///${dir}/abs.db"}}`));
    assert.equal(absolute.buffer.trainer_input.experience_buffer.path, join(dir, 'abs.db'));
    // mode both: the in-process queue, and the copy Trinity would keep is not written
    const both = load(configText('', 'both', buffer));
    assert.equal(both.buffer.trainer_input.experience_buffer.storage_type, 'queue');
    assert.match(mappedTo(both, 'buffer.trainer_input.experience_buffer.path') ?? '', /^not used: mode both/);
  });

  it('runner_num, the rollout dtype, warmup_style and use_token_level_loss_in_sft become their keys here', () => {
    const config = load(
      configText(`explorer: {runner_num: 10, rollout_model: {engine_num: 4, dtype: float32}}
algorithm: {algorithm_type: grpo, repeat_times: 2, optimizer: {warmup_style: cosine}}
`),
    );
    assert.equal(config.explorer.runner_per_model, 3); // ⌈10 / 4⌉
    assert.equal(config.model.dtype, 'float32');
    assert.equal(config.algorithm.optimizer.lr_scheduler_type, 'cosine');
    const chord = load(
      configText(
        'algorithm: {algorithm_type: mix_chord, repeat_times: 2, policy_loss_fn_args: {use_token_level_loss_in_sft: false}}\n',
        'both',
        `{auxiliary_buffers: {sft_dataset: {path: ${tasks}}}}`,
      ),
    );
    assert.equal(chord.algorithm.policy_loss_fn_args?.sft_loss_agg_mode, 'seq-mean-token-mean');
  });

  it("trainer_config's veRL knobs that mean something here set their keys; the rest stays ignored", () => {
    const config = load(
      configText(`trainer:
  trainer_config:
    actor_rollout_ref:
      model: {enable_gradient_checkpointing: false, use_remove_padding: false, use_shm: true}
      actor: {ppo_micro_batch_size_per_gpu: 4, optim: {lr: 2.0e-5, warmup_style: cosine}}
`),
    );
    assert.equal(config.trainer.micro_batch_size, 4);
    assert.equal(config.trainer.gradient_checkpointing, false);
    assert.equal(config.trainer.use_remove_padding, false);
    assert.equal(config.algorithm.optimizer.lr, 2e-5);
    assert.equal(config.algorithm.optimizer.lr_scheduler_type, 'cosine');
    assert.deepEqual(config.trinity_keys.ignored, [
      {
        path: 'trainer.trainer_config',
        value: { actor_rollout_ref: { model: { use_shm: true } } },
        why: config.trinity_keys.ignored[0]?.why,
      },
    ]);
    const conflict = problemsIn(
      configText(
        'trainer: {micro_batch_size: 2, trainer_config: {actor_rollout_ref: {actor: {ppo_micro_batch_size_per_gpu: 4}}}}\n',
      ),
    );
    assert.deepEqual(conflict, [
      'trainer.trainer_config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: sets trainer.micro_batch_size, which is set to 2: remove one',
    ]);
  });

  it('trainer.use_dynamic_bsz: micro-batches by max_token_len_per_gpu (veRL name too, default 2 · max_model_len)', () => {
    const budget = (trainer: string): number | null => {
      const [stage] = resolveStages(load(configText(`trainer: ${trainer}\n`)));
      return stageSettings(stage as StageConfig, model).trainer.microBatchTokens;
    };
    assert.equal(budget('{use_dynamic_bsz: true, max_token_len_per_gpu: 512}'), 512);
    assert.equal(budget('{use_dynamic_bsz: true}'), 128, "Trinity's default: 2 · model.max_model_len (64)");
    assert.equal(budget('{ppo_max_token_len_per_gpu: 300}'), 300, 'a budget alone turns it on');
    assert.equal(budget('{use_dynamic_bsz: false, max_token_len_per_gpu: 512}'), null);
    assert.equal(budget('{micro_batch_size: 2}'), null, 'rows by default');
    const veRL = load(
      configText(
        'trainer: {trainer_config: {actor_rollout_ref: {actor: {use_dynamic_bsz: true, ppo_max_token_len_per_gpu: 256}}}}\n',
      ),
    );
    assert.equal(veRL.trainer.use_dynamic_bsz, true);
    assert.equal(veRL.trainer.max_token_len_per_gpu, 256);
    assert.deepEqual(problemsIn(configText('trainer: {max_token_len_per_gpu: 512, ppo_max_token_len_per_gpu: 256}\n')), [
      "trainer.ppo_max_token_len_per_gpu: (256) is veRL's name for trainer.max_token_len_per_gpu, which is set to 512: remove one",
    ]);
  });

  it("explorer.rollout_model.seed is the base of the workflow runs' sampling seeds", () => {
    const [seeded] = resolveStages(load(configText('explorer: {rollout_model: {seed: 7}}\n')));
    const [unseeded] = resolveStages(load(configText('')));
    assert.equal(stageSettings(seeded as StageConfig, model).seed, 7);
    assert.equal(stageSettings(unseeded as StageConfig, model).seed, 42, "without it: the taskset selector's seed, 42");
  });

  it('refuses a mapping that contradicts the key it maps to, at the Trinity key', () => {
    const problems = problemsIn(configText('explorer: {runner_num: 8, runner_per_model: 2, rollout_model: {dtype: float16}}\n'));
    assert.deepEqual(problems.map((p) => p.split(':')[0]).sort(), ['explorer.rollout_model.dtype', 'explorer.runner_num']);
  });
});

describe('cluster.{node_num, gpu_per_node}', () => {
  const config = load(configText('cluster: {node_num: 1, gpu_per_node: 4}\n'));
  const stages = resolveStages(config);
  const cluster = config.trinity_keys.cluster;
  const on = (machine: Machine) => clusterPlacement(cluster, stages, machine);

  it('on a machine without a GPU: the trainer and the explorer run on the CPU', () => {
    const { lines, problems } = on({ gpus: 0, worldSize: 1 });
    assert.deepEqual(problems, []);
    assert.match(lines.join('\n'), /gpu_per_node=4 -> no GPU is visible here: the trainer and the explorer run on the CPU/);
  });

  it('refuses more GPUs than are visible, or than one process of the config places', () => {
    assert.match(on({ gpus: 2, worldSize: 1 }).problems[0]?.message ?? '', /more GPUs than the 2 visible/);
    const placed = on({ gpus: 8, worldSize: 1 }).problems[0]?.message ?? '';
    assert.match(placed, /one process of this config places 2 device\(s\).*--nproc-per-node/);
    assert.deepEqual(on({ gpus: 8, worldSize: 3 }).problems, [], 'three trainer ranks and the engine place 4');
  });

  it('refuses several nodes, saying how multi-machine runs are started', () => {
    const multi = load(configText('cluster: {node_num: 2, gpu_per_node: 0}\n'));
    const { problems } = clusterPlacement(multi.trinity_keys.cluster, resolveStages(multi), { gpus: 0, worldSize: 1 });
    assert.equal(problems[0]?.path, 'cluster.node_num');
    assert.match(problems[0]?.message ?? '', /docs\/distributed\.md/);
  });
});

describe('trinity config check', () => {
  it('prints the ignored and mapped blocks as comments above the resolved config', async () => {
    const text = configText(`synchronizer: {sync_method: nccl}
explorer: {rollout_model: {enforce_eager: true}}
`);
    const { resolvedYaml } = await checkConfigText(text, join(dir, 'check.yaml'));
    assert.ok(!resolvedYaml.includes('trinity_keys'), 'the record is not a key of the printed config');
    const head = resolvedYaml.split('\n').slice(0, 4);
    assert.deepEqual(head, [
      '# ignored on this backend (Trinity keys for vLLM/veRL/Ray that have no counterpart here):',
      "#   explorer.rollout_model.enforce_eager=true (vLLM's CUDA-graph switch: the embedded engine always runs eagerly)",
      "# mapped (Trinity keys read in this backend's terms):",
      '#   synchronizer.sync_method=nccl -> memory (the trainer and the embedded engine share this process, mode both: weights are handed over in memory)',
    ]);
  });
});

describe('trinity run', () => {
  it('prints the blocks once, before its stages, and keeps them in the job folder', async () => {
    const config = load(
      configText(`name: printed
trainer: {ulysses_sequence_parallel_size: 1}
synchronizer: {sync_method: nccl}
stages: [{stage_name: a}, {stage_name: b}]
`),
    );
    // both stages finished already: runConfig prints, records and skips them (nothing is loaded or trained)
    for (const stage of resolveStages(config)) {
      mkdirSync(stage.checkpoint_job_dir, { recursive: true });
      writeFileSync(join(stage.checkpoint_job_dir, 'done.json'), '{"finalModelDir": null, "steps": 0}\n');
    }
    const lines: string[] = [];
    await runConfig(config, { log: (line) => lines.push(line), distributed: null });
    assert.equal(lines.filter((l) => l.startsWith('ignored on this backend')).length, 1);
    assert.equal(lines.filter((l) => l.startsWith('mapped (')).length, 1);
    const first = lines.findIndex((l) => l.includes('finished earlier'));
    const printed = lines.findIndex((l) => l.startsWith('  trainer.ulysses_sequence_parallel_size=1'));
    assert.ok(printed >= 0 && printed < first, 'printed before the first stage');
    const kept = readFileSync(join(config.checkpoint_job_dir, 'trinity-keys.txt'), 'utf8');
    assert.match(
      kept,
      /^ignored on this backend .*\n {2}trainer\.ulysses_sequence_parallel_size=1 .*\nmapped .*\n {2}synchronizer\.sync_method=nccl -> memory/s,
    );
  });

  it('an explorer process keeps its own record beside its own lock', () => {
    assert.equal(trinityKeysFile('run.lock'), 'trinity-keys.txt');
    assert.equal(trinityKeysFile('run.explorer-a.lock'), 'trinity-keys.explorer-a.txt');
  });
});
