// `trinity config check` reports every bad module argument of the algorithm section in one run, each at its key
// path (issue 48: mix_chord's policy_loss_fn_args problems came one per run, six reruns for six mistakes).
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

function configText(algorithm: string): string {
  return `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
algorithm: ${algorithm}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
`;
}

async function problemsOf(algorithm: string): Promise<string[]> {
  const error = await checkConfigText(configText(algorithm), join(dir, 'c.yaml'), { resolveAlgorithm }).then(
    () => null,
    (e: unknown) => e,
  );
  assert.ok(error instanceof ConfigError, `expected a ConfigError, got ${String(error)}`);
  return error.problems.map((p) => `${p.path}: ${p.message}`);
}

describe('config check: the algorithm section', () => {
  it('reports three bad arguments across two modules from one run, each at its key path', async () => {
    const problems = await problemsOf(
      '{algorithm_type: mix_chord, repeat_times: 2, ' +
        "policy_loss_fn_args: {mu_peak: 'high', clip_rnge: 0.2}, entropy_loss_fn_args: {entropy_coef: 'x'}}",
    );
    assert.equal(problems.length, 3, problems.join('\n'));
    assert.match(problems[0] ?? '', /^algorithm\.policy_loss_fn_args\.mu_peak: must be a number/);
    assert.match(problems[1] ?? '', /^algorithm\.policy_loss_fn_args\.clip_rnge: unknown argument .*did you mean 'clip_range'/);
    assert.match(problems[2] ?? '', /^algorithm\.entropy_loss_fn_args\.entropy_coef: must be a number/);
  });

  it('still reports a single bad argument as one problem with the module named', async () => {
    const problems = await problemsOf('{algorithm_type: grpo, repeat_times: 2, policy_loss_fn_args: {clip_range: true}}');
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
