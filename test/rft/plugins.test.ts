// Algorithm modules from user code by module path (`path/to/file.ts#export`), as Trinity-RFT's dotted paths.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadAlgorithmPlugins, POLICY_LOSS_FN, resolveAlgorithm } from '../../src/rft/algorithm/index.js';
import { checkConfigFile } from '../../src/rft/run/config/check.js';
import * as torch from '../../src/torch/index.js';
import { modelFolder, tasksetFile } from './config/helpers.js';

const algorithmIndex = fileURLToPath(new URL('../../src/rft/algorithm/index.ts', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'algo-plugin-'));
writeFileSync(
  join(dir, 'my-loss.ts'),
  `import { POLICY_LOSS_FN } from ${JSON.stringify(algorithmIndex)};
import type { PolicyLossInput } from ${JSON.stringify(algorithmIndex)};
export const scaledPpo = {
  description: 'PPO scaled by a factor',
  defaults: { scale: 0.5 },
  run(input: PolicyLossInput, options?: { scale?: number }) {
    const result = POLICY_LOSS_FN.create('ppo')(input);
    return { loss: result.loss.mul(options?.scale ?? 0.5), metrics: result.metrics };
  },
};
export const notAModule = 42;
`,
);

test('a policy loss by module path is registered, resolved with its arguments, and computes', async () => {
  const spec = './my-loss.ts#scaledPpo';
  assert.deepEqual(await loadAlgorithmPlugins({ policy_loss_fn: spec }, dir), [spec]);
  assert.deepEqual(await loadAlgorithmPlugins({ policy_loss_fn: spec }, dir), [], 'loaded once');
  const algorithm = resolveAlgorithm({ algorithm_type: 'grpo', policy_loss_fn: spec, policy_loss_fn_args: { scale: 0.25 } });
  assert.equal(algorithm.policyLossFn.name, spec);
  torch.scope(() => {
    const input = {
      logprob: torch.tensor([[-1.0, -2.0, -0.5]]),
      oldLogprob: torch.tensor([[-1.1, -1.9, -0.5]]),
      advantages: torch.tensor([[1.0, -1.0, 0.5]]),
      actionMask: torch.tensor([[1, 1, 0]], { dtype: 'bool' }),
    };
    const ppo = POLICY_LOSS_FN.create('ppo')(input).loss.item();
    const ours = POLICY_LOSS_FN.create(spec, { scale: 0.25 })(input).loss.item();
    assert.ok(Math.abs(ours - 0.25 * ppo) < 1e-7);
  });
  assert.throws(
    () => resolveAlgorithm({ algorithm_type: 'grpo', policy_loss_fn: spec, policy_loss_fn_args: { scal: 1 } }),
    /scal.*did you mean 'scale'/,
  );
});

test('a module-path export that is not an algorithm module, or a missing export, is a precise error', async () => {
  await assert.rejects(loadAlgorithmPlugins({ advantage_fn: './my-loss.ts#notAModule' }, dir), /must be an object \{ defaults/);
  await assert.rejects(loadAlgorithmPlugins({ advantage_fn: './my-loss.ts#nope' }, dir), /has no export 'nope'/);
});

test('config check (checkConfigFile, as `trinity config check` and the Studio call it) loads module-path algorithm modules first', async () => {
  writeFileSync(
    join(dir, 'checked-loss.ts'),
    'export const checkedLoss = { defaults: { weight: 1 }, run: () => ({ loss: null, metrics: {} }) };\n',
  );
  modelFolder(join(dir, 'model'));
  tasksetFile(join(dir, 'tasks.jsonl'));
  const configFile = (lossSpec: string): string => {
    const file = join(dir, `check-${lossSpec.replace(/\W/g, '')}.yaml`);
    writeFileSync(
      file,
      `model: {model_path: model, max_model_len: 64}
checkpoint_root_dir: runs
algorithm:
  algorithm_type: grpo
  repeat_times: 2
  policy_loss_fn: ${lossSpec}
  policy_loss_fn_args: {weight: 0.5}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: tasks.jsonl}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
`,
    );
    return file;
  };
  const { resolvedYaml } = await checkConfigFile(configFile('./checked-loss.ts#checkedLoss'), { resolveAlgorithm });
  assert.match(resolvedYaml, /policy_loss_fn: \.\/checked-loss\.ts#checkedLoss\n/);
  assert.match(resolvedYaml, /policy_loss_fn_args:\n\s+weight: 0\.5\n/);
  await assert.rejects(
    checkConfigFile(configFile('./no-loss.ts#x'), { resolveAlgorithm }),
    /algorithm: algorithm\.policy_loss_fn '\.\/no-loss\.ts#x': module file .*no-loss\.ts does not exist \(.*check-nolosstsx\.yaml:3:1\)/,
  );
});
