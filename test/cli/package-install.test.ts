// The package as a user installs it: `npm pack` of this repository, installed into a new project outside it (a
// package.json with no "type"), then `npx trinity` there on the project's own TypeScript workflow, reward and loss,
// each importing 'trinity-rft/rft' — what README "Use it from your own project" tells a user to run.
//
// Offline: the project's package-lock.json is the repository's (its runtime packages, with their resolved URLs and
// integrity hashes; devDependencies left out, so a runtime import of one fails here) plus the tarball, and `npm ci
// --offline` takes every package from npm's cache, where the repository's own `npm ci` put them. Install scripts: the
// project's allowScripts (npm install-scripts) approves trinity-rft's postinstall (scripts/postinstall.mjs), which
// runs with TRINITY_NATIVE_ADDON naming this checkout's built addon, so it copies that instead of building one (a
// build takes minutes); it denies better-sqlite3's (a compile of SQLite; nothing these commands run opens a SQLite
// database) and esbuild's (a check of its binary).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { runProcess } from '../helpers/run-process.js';

const ROOT = join(import.meta.dirname, '..', '..');
const BUILT_ADDON = join(ROOT, 'native', 'build', 'trinity_torch.node');
// a harness guard against a hung command, far beyond the seconds each takes
const GUARD_SECONDS = 300;

interface PackageJson {
  name: string;
  version: string;
  license: string;
  bin: Record<string, string>;
  engines: Record<string, string>;
  dependencies: Record<string, string>;
  scripts: Record<string, string>;
}
interface LockEntry {
  dev?: boolean;
  [key: string]: unknown;
}

const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as PackageJson;
const project = mkdtempSync(join(tmpdir(), 'trinity-user-project-'));
let packedFiles: string[] = [];

// The environment of a command typed in the project: npm's variables of a surrounding `npm test` (its
// npm_config_local_prefix would point npm at this repository) left out, where npm keeps its cache and settings kept.
const KEPT_NPM_VARIABLES = new Set([
  'npm_config_cache',
  'npm_config_userconfig',
  'npm_config_globalconfig',
  'npm_config_registry',
]);
const ENV: NodeJS.ProcessEnv = {
  ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || KEPT_NPM_VARIABLES.has(k))),
  PATH: `${dirname(process.execPath)}:${process.env.PATH ?? ''}`,
};
delete ENV.INIT_CWD;

/** Runs `command args` in the project (or `cwd`); returns its output, failing with it on a non-zero exit. */
async function inProject(command: string, args: string[], options: { cwd?: string; env?: NodeJS.ProcessEnv } = {}) {
  const what = `${command} ${args.join(' ')}`;
  const result = await runProcess(command, args, {
    cwd: options.cwd ?? project,
    env: { ...ENV, ...options.env },
    guard: { seconds: GUARD_SECONDS, what },
  });
  assert.equal(result.code, 0, `${what} exited with ${result.code ?? result.signal}:\n${result.output}`);
  return result.output;
}

/** `npx trinity ARGS` in the project, offline (npx finds the installed bin; it must not fetch anything). */
const trinity = (...args: string[]) => inProject('npx', ['--offline', 'trinity', ...args]);

/** The project's lockfile: the tarball, and the repository's locked runtime packages (see the header). */
function projectLockfile(tarball: string): object {
  const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as { packages: Record<string, LockEntry> };
  const integrity = `sha512-${createHash('sha512')
    .update(readFileSync(join(project, tarball)))
    .digest('base64')}`;
  const runtime = Object.entries(lock.packages).filter(([path, entry]) => path !== '' && entry.dev !== true);
  const installScript = ['preinstall', 'install', 'postinstall'].some((s) => pkg.scripts[s] !== undefined);
  return {
    name: 'my-agent',
    lockfileVersion: 3,
    requires: true,
    packages: {
      '': { name: 'my-agent', dependencies: { [pkg.name]: `file:${tarball}` } },
      [`node_modules/${pkg.name}`]: {
        version: pkg.version,
        resolved: `file:${tarball}`,
        integrity,
        ...(installScript ? { hasInstallScript: true } : {}),
        license: pkg.license,
        dependencies: pkg.dependencies,
        bin: pkg.bin,
        engines: pkg.engines,
      },
      ...Object.fromEntries(runtime),
    },
  };
}

// The user's files, next to their config: a workflow that scores with the task's reward function, a reward with a
// metric of its own, and PPO scaled by an argument, reporting the scale as a metric.
const WORKFLOW = `import { REWARD_FUNCTIONS, scoreResponse, type WorkflowSpec } from 'trinity-rft/rft';

export const chatWorkflow: WorkflowSpec = {
  description: 'one chat turn, scored by the reward function the taskset names',
  run: async ({ task, model, repeatTimes, seed, baseDir }) => {
    const rewardFn = await REWARD_FUNCTIONS.resolve(task.rewardFn ?? 'accuracy_reward', baseDir);
    const result = await model.chat([{ role: 'user', content: task.prompt ?? '' }], { n: repeatTimes, seed, temperature: 1 });
    return Promise.all(
      result.choices.map(async (choice) => {
        const response = choice.message.content ?? '';
        const { reward, metrics } = await scoreResponse(rewardFn, { response, task, args: {} });
        return model.toExperience(choice, { reward, metrics: { ...metrics, my_workflow_ran: 1 } });
      }),
    );
  },
};
`;
const REWARD = `import type { RewardFn } from 'trinity-rft/rft';

// 0.375 for an even-length response, 0.625 for an odd one
export const parityReward: RewardFn = ({ response }) => ({
  reward: response.length % 2 === 0 ? 0.375 : 0.625,
  metrics: { my_reward_ran: 7 },
});
`;
const LOSS = `import { POLICY_LOSS_FN, type PolicyLossInput } from 'trinity-rft/rft';

export const scaledPpo = {
  description: 'PPO scaled by a factor',
  defaults: { scale: 1 },
  run(input: PolicyLossInput, options?: { scale?: number }) {
    const scale = options?.scale ?? 1;
    const ppo = POLICY_LOSS_FN.create('ppo')(input);
    return { loss: ppo.loss.mul(scale), metrics: { ...ppo.metrics, my_loss_scale: scale } };
  },
};
`;
const CONFIG = `project: my-agent
name: custom
checkpoint_root_dir: ./runs
model:
  model_path: ./model
  max_prompt_tokens: 24
  max_response_tokens: 4
algorithm:
  algorithm_type: grpo
  repeat_times: 4
  policy_loss_fn: ./my-loss.ts#scaledPpo
  policy_loss_fn_args:
    scale: 0.25
buffer:
  batch_size: 2
  total_steps: 2
  explorer_input:
    taskset:
      path: tasks.jsonl
    default_workflow_type: ./my-workflow.ts#chatWorkflow
    default_reward_fn_type: ./my-reward.ts#parityReward
explorer:
  eval_on_startup: false
trainer:
  save_interval: 2
monitor:
  monitor_type: [jsonl]
`;

describe('trinity-rft installed from a packed tarball into a project of its own', () => {
  before(async () => {
    const packed = JSON.parse(
      await inProject('npm', ['pack', '--json', '--loglevel=error', '--pack-destination', project], { cwd: ROOT }),
    ) as [{ filename: string; files: { path: string }[] }];
    packedFiles = packed[0].files.map((f) => f.path);
    const tarball = packed[0].filename;
    const allowScripts = { [`file:${join(project, tarball)}`]: true, 'better-sqlite3': false, esbuild: false };
    const packageJson = { name: 'my-agent', private: true, dependencies: { [pkg.name]: `file:${tarball}` }, allowScripts };
    writeFileSync(join(project, 'package.json'), `${JSON.stringify(packageJson, null, 2)}\n`);
    writeFileSync(join(project, 'package-lock.json'), `${JSON.stringify(projectLockfile(tarball), null, 2)}\n`);
  });

  // the project holds an installed copy of every runtime package (~64 MB)
  after(() => rmSync(project, { recursive: true, force: true }));

  test('the tarball holds the sources, the command, the native sources and the setup; no tests, benchmarks or builds', () => {
    for (const file of [
      'bin/trinity.js',
      'src/rft/index.ts',
      'src/studio/app/index.html',
      'native/build.mjs',
      'native/src/ops.cpp',
      'scripts/setup.sh',
      'scripts/pip-offline.sh',
      'scripts/postinstall.mjs',
      'examples/quickstart/config.yaml',
      'README.md',
    ])
      assert.ok(packedFiles.includes(file), `the tarball lacks ${file}`);
    const unwanted = packedFiles.filter((f) => /^(test|bench|runs|\.cache|\.ci|native\/build|node_modules)\//.test(f));
    assert.deepEqual(unwanted, []);
  });

  test('npm ci installs it offline, and its postinstall takes the addon TRINITY_NATIVE_ADDON names', async () => {
    const output = await inProject('npm', ['ci', '--offline', '--foreground-scripts', '--no-audit', '--no-fund'], {
      env: { TRINITY_NATIVE_ADDON: BUILT_ADDON },
    });
    assert.match(output, /native addon copied from .*trinity_torch\.node \(TRINITY_NATIVE_ADDON\); nothing built/);
    const installed = join(project, 'node_modules', pkg.name);
    assert.deepEqual(readFileSync(join(installed, 'native', 'build', 'trinity_torch.node')), readFileSync(BUILT_ADDON));
    assert.ok(existsSync(join(project, 'node_modules', '.bin', 'trinity')), 'trinity is on the PATH of npx and npm scripts');
  });

  test('without its addon, npx trinity says how to get one where the package is installed', async () => {
    const addon = join(project, 'node_modules', pkg.name, 'native', 'build', 'trinity_torch.node');
    renameSync(addon, `${addon}.away`);
    try {
      const result = await runProcess('npx', ['--offline', 'trinity', 'model', 'init', 'unused'], {
        cwd: project,
        env: ENV,
        guard: { seconds: GUARD_SECONDS, what: 'npx trinity model init without the addon' },
      });
      assert.notEqual(result.code, 0);
      assert.match(result.output, /The native addon is not built .*Run `npm rebuild trinity-rft` in your project/);
    } finally {
      renameSync(`${addon}.away`, addon);
    }
  });

  test("npx trinity: a model, config check and a two-step run with the project's workflow, reward and loss", async () => {
    writeFileSync(join(project, 'my-workflow.ts'), WORKFLOW);
    writeFileSync(join(project, 'my-reward.ts'), REWARD);
    writeFileSync(join(project, 'my-loss.ts'), LOSS);
    writeFileSync(join(project, 'run.yaml'), CONFIG);
    const rows = [1, 2, 3].flatMap((a) => [1, 2].map((b) => JSON.stringify({ prompt: `${a}+${b}=`, response: `${a + b}` })));
    writeFileSync(join(project, 'tasks.jsonl'), `${rows.join('\n')}\n`);
    await trinity('model', 'init', 'model', '--hidden-size', '32', '--layers', '1', '--heads', '2', '--max-positions', '64');

    const resolved = await trinity('config', 'check', 'run.yaml');
    assert.match(resolved, /policy_loss_fn: \.\/my-loss\.ts#scaledPpo\n\s+policy_loss_fn_args:\n\s+scale: 0\.25\n/);
    assert.match(resolved, /default_workflow_type: \.\/my-workflow\.ts#chatWorkflow\n/);

    await trinity('run', '--config', 'run.yaml');
    const metricsFile = join(project, 'runs', 'my-agent', 'custom', 'metrics.jsonl');
    const steps = readFileSync(metricsFile, 'utf8')
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, number>);
    assert.deepEqual(
      steps.map((s) => s.step),
      [1, 2],
    );
    for (const s of steps) {
      assert.equal(s['rollout/my_workflow_ran/mean'], 1, `step ${s.step}: the workflow's metric`);
      assert.equal(s['rollout/my_reward_ran/mean'], 7, `step ${s.step}: the reward's metric`);
      for (const key of ['rollout/reward/min', 'rollout/reward/max'])
        assert.ok([0.375, 0.625].includes(s[key] as number), `step ${s.step}: ${key} ${s[key]} is one of the reward's values`);
      assert.equal(s['actor/policy/my_loss_scale'], 0.25, `step ${s.step}: the loss's metric, with its argument`);
    }
  });
});
