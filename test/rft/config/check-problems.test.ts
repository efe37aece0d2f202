// What `trinity config check` reports in one run (issue 48): every bad module argument of the algorithm section,
// each at its key path (mix_chord's policy_loss_fn_args problems came one per run, six reruns for six mistakes), and
// what `trinity run` would refuse at its first stage, such as a wandb monitor without an API key.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { ConfigError } from '../../../src/rft/config/errors.js';
import { checkConfigText } from '../../../src/rft/run/config/check.js';
import { modelFolder, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-algorithm-problems-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));

function configText(algorithm: string, extra = ''): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
algorithm: ${algorithm}
${extra}buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
`;
}

async function problemsOf(text: string, env: NodeJS.ProcessEnv = {}): Promise<string[]> {
  const error = await checkConfigText(text, join(dir, 'c.yaml'), { resolveAlgorithm, env }).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
  return error.problems.map((p) => `${p.path}: ${p.message}`);
}

describe('config check: the algorithm section', () => {
  it('reports three bad arguments across two modules from one run, each at its key path', async () => {
    const problems = await problemsOf(
      configText(
        '{algorithm_type: mix_chord, repeat_times: 2, ' +
          "policy_loss_fn_args: {mu_peak: 'high', clip_rnge: 0.2}, entropy_loss_fn_args: {entropy_coef: 'x'}}",
      ),
    );
    assert.equal(problems.length, 3, problems.join('\n'));
    assert.match(problems[0] ?? '', /^algorithm\.policy_loss_fn_args\.mu_peak: must be a number/);
    assert.match(problems[1] ?? '', /^algorithm\.policy_loss_fn_args\.clip_rnge: unknown argument .*did you mean 'clip_range'/);
    assert.match(problems[2] ?? '', /^algorithm\.entropy_loss_fn_args\.entropy_coef: must be a number/);
  });

  it('still reports a single bad argument as one problem with the module named', async () => {
    const problems = await problemsOf(
      configText('{algorithm_type: grpo, repeat_times: 2, policy_loss_fn_args: {clip_range: true}}'),
    );
    assert.deepEqual(problems, ["algorithm.policy_loss_fn_args.clip_range: must be a number, got true (policy_loss_fn 'ppo')"]);
  });

  it('resolveAlgorithm throws every slot problem at once as an AggregateError', () => {
    assert.throws(
      () =>
        resolveAlgorithm({
          algorithm_type: 'grpo',
          advantage_fn_args: { epsilon: 'x' },
          kl_loss_fn_args: { kl_coef: 'y' },
        }),
      (error: unknown) => error instanceof AggregateError && error.errors.length === 2,
    );
  });
});

describe('config check: monitor credentials', () => {
  const grpo = '{algorithm_type: grpo, repeat_times: 2}';

  it('refuses wandb and mlflow monitors without their credentials, naming the key and the environment variable', async () => {
    const problems = await problemsOf(configText(grpo, 'monitor: {monitor_type: [wandb, mlflow]}\n'));
    assert.deepEqual(problems, [
      'monitor.monitor_type: monitor_type mlflow needs monitor_args.uri or MLFLOW_TRACKING_URI (the tracking server address)',
      'monitor.monitor_type: monitor_type wandb needs monitor_args.api_key or WANDB_API_KEY',
    ]);
  });

  it('refuses swanlab by name, saying why and what to use instead (alone or beside a monitor that works)', async () => {
    for (const monitor of ['swanlab', '[tensorboard, swanlab]']) {
      const problems = await problemsOf(configText(grpo, `monitor: {monitor_type: ${monitor}}\n`));
      assert.equal(problems.length, 1, problems.join('\n'));
      assert.match(
        problems[0] as string,
        /^monitor\.monitor_type: got 'swanlab': SwanLab is not supported here: it has no JavaScript client .*; use wandb or mlflow .*tensorboard/,
      );
    }
    // a name that is nothing at all stays an unknown value
    const unknown = await problemsOf(configText(grpo, 'monitor: {monitor_type: swanlabs}\n'));
    assert.equal(unknown.length, 1, unknown.join('\n'));
    assert.doesNotMatch(unknown[0] as string, /JavaScript client/);
  });

  it('passes when monitor_args or the environment give them', async () => {
    const withArgs = configText(grpo, 'monitor: {monitor_type: wandb, monitor_args: {api_key: k}}\n');
    await checkConfigText(withArgs, join(dir, 'c.yaml'), { resolveAlgorithm, env: {} });
    const fromEnv = configText(grpo, 'monitor: {monitor_type: [wandb, mlflow]}\n');
    const env = { WANDB_API_KEY: 'k', MLFLOW_TRACKING_URI: 'http://127.0.0.1:5000' };
    await checkConfigText(fromEnv, join(dir, 'c.yaml'), { resolveAlgorithm, env });
  });
});

describe('config check: every problem of a file in one run', () => {
  it('problems in five sections, an unknown key and policy_loss_fn_args all appear together', async () => {
    const problems = await problemsOf(`model: {model_path: ${model}, max_model_len: 64, max_prompt_tokens: 80}
checkpoint_root_dir: ${dir}/runs
algorithm: {algorithm_type: grpo, repeat_times: 2, policy_loss_fn_args: {clip_rnge: 0.2}}
buffer:
  batch_size: 0
  explorer_input:
    taskset: {path: ${tasks}, fromat: {prompt_key: q}}
    default_workflow_type: simple_workflow
explorer: {eval_interval: -1}
synchronizer: {sync_style: sometimes}
trainer: {save_interval: soon}
`);
    const paths = problems.map((p) => p.split(':')[0]);
    for (const path of [
      'model.max_prompt_tokens',
      'algorithm.policy_loss_fn_args.clip_rnge',
      'buffer.batch_size',
      'buffer.explorer_input.taskset.fromat',
      'explorer.eval_interval',
      'synchronizer.sync_style',
      'trainer.save_interval',
    ]) {
      assert.ok(paths.includes(path), `${path} in:\n${problems.join('\n')}`);
    }
  });
});

describe('config check: a bad mode', () => {
  it('reports the mode alone, not the rules of the default mode', async () => {
    const problems = await problemsOf(
      configText('{algorithm_type: grpo, repeat_times: 2}', 'mode: trian\n').replace(
        'buffer:\n',
        'buffer:\n  trainer_input: {experience_buffer: {storage_type: file, path: /d.jsonl}}\n',
      ),
    );
    assert.equal(problems.length, 1, problems.join('\n'));
    assert.match(problems[0] ?? '', /^mode: expected one of .*; got 'trian'; did you mean 'train'\?$/);
  });
});
