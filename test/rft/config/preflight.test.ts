// The pre-run checks (src/rft/run/config/preflight.ts) that `trinity config check` and runConfig share: what a run would
// refuse (a missing taskset, model, workflow or reward function; rows without the prompt key; a job folder that
// cannot be made) is reported before anything runs, as problems naming the key path and the reason.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { configCommand } from '../../../src/cli/config-command.js';
import { type ConfigProblem, ConfigError, parseConfig } from '../../../src/rft/run/config/index.js';
import { preflightProblems, unwritableReason } from '../../../src/rft/run/config/preflight.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { modelFolder, tasksetFile } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'trinity-preflight-'));
const model = modelFolder(join(dir, 'model'), 100);
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
writeFileSync(join(dir, 'plugin.ts'), 'export const myReward = () => 1;\nexport const notAFunction = 3;\n');

let jobs = 0;
/** A mode-both run over the fixtures; `extra` YAML is appended (later keys of the same section win via --set). */
function config(extra = '', overrides: string[] = []) {
  const text = `
model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
name: job${jobs++}
buffer:
  batch_size: 2
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
${extra}`;
  return parseConfig(text, { env: {}, cwd: dir, file: join(dir, 'config.yaml'), overrides });
}

const lines = (problems: readonly ConfigProblem[]) => problems.map((p) => `${p.path}: ${p.message}`);
const check = async (extra = '', overrides: string[] = []) =>
  lines(await preflightProblems(config(extra, overrides), { baseDir: dir }));

describe('pre-run checks', () => {
  it('pass for a config whose files and names are all there', async () => {
    assert.deepEqual(await check(), []);
    // a module-path reward function that loads
    assert.deepEqual(await check('', ['buffer.explorer_input.default_reward_fn_type=plugin.ts#myReward']), []);
  });

  it('name a missing taskset, eval taskset, split or taskset folder', async () => {
    // a folder with a test split only
    const testSplitOnly = join(dir, 'test-split-only');
    mkdirSync(testSplitOnly, { recursive: true });
    tasksetFile(join(testSplitOnly, 'test.jsonl'));
    const cases: [string, RegExp][] = [
      [
        'buffer.explorer_input.taskset.path=/no/such/tasks.jsonl',
        /^buffer\.explorer_input\.taskset\.path: .*no such file.*\/no\/such\/tasks\.jsonl/,
      ],
      [
        'buffer.explorer_input.eval_tasksets.0.path=missing-eval.jsonl',
        /^buffer\.explorer_input\.eval_tasksets\.0\.path: .*missing-eval\.jsonl/,
      ],
      [
        `buffer.explorer_input.taskset.path=${testSplitOnly}`,
        /^buffer\.explorer_input\.taskset\.path: .*no split 'train': the dataset has test \(1 file\)/,
      ],
      [
        'buffer.explorer_input.taskset.storage_type=sql',
        /^buffer\.explorer_input\.taskset\.path: .*(no such SQLite file|not an SQLite database)/,
      ],
    ];
    for (const [override, expected] of cases) {
      const found = await check('', [override]);
      assert.equal(found.length, 1, `${override}: ${found.join('\n')}`);
      assert.match(found[0] as string, expected, override);
    }
  });

  it('name a missing model folder, a folder without config.json, a broken config.json, a missing adapter', async () => {
    mkdirSync(join(dir, 'empty-model'), { recursive: true });
    mkdirSync(join(dir, 'broken-model'), { recursive: true });
    writeFileSync(join(dir, 'broken-model', 'config.json'), '{"vocab_size": ');
    const cases: [string, RegExp][] = [
      ['model.model_path=/no/such/model', /^model\.model_path: model folder \/no\/such\/model does not exist/],
      [
        `model.model_path=${dir}/empty-model`,
        /^model\.model_path: .*empty-model is not a Hugging Face model folder \(no config\.json\)/,
      ],
      [`model.model_path=${dir}/broken-model`, /^model\.model_path: .*broken-model\/config\.json cannot be read: /],
      ['model.critic_model_path=/no/critic', /^model\.critic_model_path: model folder \/no\/critic does not exist/],
      [
        `model.lora.path=${dir}/empty-model`,
        /^model\.lora\.path: .*empty-model is not a PEFT adapter folder \(no adapter_config\.json\)/,
      ],
    ];
    for (const [override, expected] of cases) {
      const found = await check('', [override]);
      assert.equal(found.length, 1, `${override}: ${found.join('\n')}`);
      assert.match(found[0] as string, expected, override);
    }
  });

  it('name a model folder or adapter behind a symlink loop as such, not as missing', async () => {
    symlinkSync(join(dir, 'loop-b'), join(dir, 'loop-a'));
    symlinkSync(join(dir, 'loop-a'), join(dir, 'loop-b'));
    const loop = /too many (levels of )?symbolic links|ELOOP/i;
    for (const key of ['model.model_path', 'model.lora.path']) {
      const found = await check('', [`${key}=${dir}/loop-a`]);
      assert.equal(found.length, 1, found.join('\n'));
      assert.ok(found[0]?.startsWith(`${key}: ${dir}/loop-a`), found[0]);
      assert.match(found[0] as string, loop);
      assert.doesNotMatch(found[0] as string, /does not exist|no (adapter_)?config\.json/);
    }
  });

  it('an external server in mode explore or bench needs no local model folder', async () => {
    const remote = [
      'model.model_path=/no/such/model',
      'explorer.rollout_model.engine_type=openai',
      'explorer.rollout_model.base_url=http://127.0.0.1:9/v1',
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      'synchronizer.sync_method=checkpoint',
    ];
    assert.deepEqual(await check('', [...remote, 'mode=explore']), []);
    // mode both trains the local weights: the folder is needed
    assert.match((await check('', remote.slice(0, 3)))[0] ?? '', /^model\.model_path: model folder \/no\/such\/model/);
  });

  it("refuse workflow_args keys a built-in workflow does not read, suggesting the closest; a user's are not checked", async () => {
    const taskset = 'buffer.explorer_input.taskset';
    const found = await check('', [
      'buffer.explorer_input.default_workflow_type=frozen_lake_workflow',
      `${taskset}.workflow_args={sizee: 4, corners: true, max_step: 8}`,
    ]);
    assert.deepEqual(found, [
      `${taskset}.workflow_args.sizee: unknown argument 'sizee' of workflow 'frozen_lake_workflow'; did you mean 'size'?; it reads max_steps, agent_max_steps, experience_mode, step_reward_mode, invalid_action_penalty, reward_fn_type, reward_fn_args, seed, size, p, corners, is_slippery, env_max_steps, desc`,
      `${taskset}.workflow_args.max_step: unknown argument 'max_step' of workflow 'frozen_lake_workflow'; did you mean 'max_steps'?; it reads max_steps, agent_max_steps, experience_mode, step_reward_mode, invalid_action_penalty, reward_fn_type, reward_fn_args, seed, size, p, corners, is_slippery, env_max_steps, desc`,
    ]);
    // math_boxed_workflow reads with_think and format_score_coef; simple_workflow reads none
    assert.deepEqual(
      await check('', [`${taskset}.workflow_args={with_think: true}`, `${taskset}.default_workflow_type=math_boxed_workflow`]),
      [],
    );
    assert.match(
      (await check('', [`${taskset}.workflow_args={with_think: true}`]))[0] ?? '',
      /^buffer\.explorer_input\.taskset\.workflow_args\.with_think: unknown argument 'with_think' of workflow 'simple_workflow'; it reads none$/,
    );
    // a workflow from a module path declares nothing: its arguments are its own business
    writeFileSync(join(dir, 'my-workflow.ts'), 'export const run = async () => [];\n');
    assert.deepEqual(
      await check('', [`${taskset}.workflow_args={anything: 1}`, `${taskset}.default_workflow_type=my-workflow.ts#run`]),
      [],
    );
    // a workflow's own check of its values (WorkflowSpec.checkArgs)
    const trainableRuler = `${taskset}.default_workflow_type=math_trainable_ruler_workflow`;
    assert.deepEqual(await check('', [`${taskset}.workflow_args={probability_ground_truth_available: 1.5}`, trainableRuler]), [
      `${taskset}.workflow_args: math_trainable_ruler_workflow: workflow_args.probability_ground_truth_available must be a number in [0, 1], got 1.5`,
    ]);
    assert.deepEqual(await check('', [`${taskset}.workflow_args={probability_ground_truth_available: 0.5}`, trainableRuler]), []);
  });

  it('name unknown workflows and reward functions, in the defaults and in rows', async () => {
    const cases: [string[], RegExp][] = [
      [
        ['buffer.explorer_input.default_workflow_type=simpel_workflow'],
        /^buffer\.explorer_input\.default_workflow_type: unknown workflow 'simpel_workflow'; did you mean 'simple_workflow'/,
      ],
      [
        ['buffer.explorer_input.default_reward_fn_type=acuracy_reward'],
        /^buffer\.explorer_input\.default_reward_fn_type: unknown reward function 'acuracy_reward'; did you mean 'accuracy_reward'/,
      ],
      [
        ['buffer.explorer_input.default_reward_fn_type=plugin.ts#nope'],
        /^buffer\.explorer_input\.default_reward_fn_type: reward function 'plugin\.ts#nope': .*plugin\.ts has no export 'nope'/,
      ],
      [
        ['buffer.explorer_input.default_reward_fn_type=plugin.ts#notAFunction'],
        /^buffer\.explorer_input\.default_reward_fn_type: reward function 'plugin\.ts#notAFunction': the export is a number/,
      ],
      [
        ['buffer.explorer_input.default_workflow_type=missing.ts#run'],
        /^buffer\.explorer_input\.default_workflow_type: workflow 'missing\.ts#run': module file .*missing\.ts does not exist/,
      ],
      [
        ['buffer.explorer_input.taskset.default_workflow_type=no_such_workflow'],
        /^buffer\.explorer_input\.taskset\.default_workflow_type: unknown workflow 'no_such_workflow'/,
      ],
      [
        [
          'buffer.explorer_input.eval_tasksets.0.path=tasks.jsonl',
          'buffer.explorer_input.eval_tasksets.0.default_reward_fn_type=nope',
        ],
        /^buffer\.explorer_input\.eval_tasksets\.0\.default_reward_fn_type: unknown reward function 'nope'/,
      ],
      [
        // a built-in reward's arguments are checked before the first task
        [
          'buffer.explorer_input.default_reward_fn_type=rubric_judge_reward',
          'buffer.explorer_input.taskset.reward_fn_args.rubric=be correct',
          'buffer.explorer_input.taskset.reward_fn_args.min_score=5',
          'buffer.explorer_input.taskset.reward_fn_args.max_score=2',
        ],
        /^buffer\.explorer_input\.taskset\.reward_fn_args: .*rubric_judge_reward.*min_score/,
      ],
      [
        // an environment workflow's episode reward (workflow_args reward_fn_type): its name and its arguments
        [
          'buffer.explorer_input.default_workflow_type=frozen_lake_workflow',
          'buffer.explorer_input.taskset.workflow_args.reward_fn_type=nope',
        ],
        /^buffer\.explorer_input\.taskset\.workflow_args\.reward_fn_type: unknown reward function 'nope'/,
      ],
      [
        [
          'buffer.explorer_input.default_workflow_type=frozen_lake_workflow',
          'buffer.explorer_input.taskset.workflow_args.reward_fn_type=trajectory_accuracy_grader_reward',
          'buffer.explorer_input.taskset.workflow_args.reward_fn_args.judge_api_base_url_env=NO_SUCH_JUDGE_URL',
        ],
        /^buffer\.explorer_input\.taskset\.workflow_args\.reward_fn_args: .*NO_SUCH_JUDGE_URL \(judge_api_base_url_env\), which is not set/,
      ],
    ];
    for (const [overrides, expected] of cases) {
      const found = await check('', overrides);
      assert.equal(found.length, 1, `${overrides.join(' ')}: ${found.join('\n')}`);
      assert.match(found[0] as string, expected, overrides.join(' '));
    }
    // a row that names its own workflow (format.workflow_key): the row is named
    const rows = tasksetFile(join(dir, 'row-workflows.jsonl'), [
      { prompt: 'a', workflow: 'simple_workflow' },
      { prompt: 'b', workflow: 'math_workflow' },
      { prompt: 'c', workflow: 'mystery_workflow' },
    ]);
    const found = await check('', [
      `buffer.explorer_input.taskset.path=${rows}`,
      'buffer.explorer_input.taskset.format.workflow_key=workflow',
    ]);
    assert.equal(found.length, 1, found.join('\n'));
    assert.match(
      found[0] as string,
      /^buffer\.explorer_input\.taskset\.format\.workflow_key: unknown workflow 'mystery_workflow'.*\(named by taskset 'taskset_0' row 3 \(task 'taskset_0:2'\), key 'workflow'\)/,
    );
  });

  it("let Trinity's environment rows ({seed, size, p}) go without a prompt for an environment workflow only", async () => {
    const rows = tasksetFile(join(dir, 'frozenlake.jsonl'), [
      { seed: 27589, size: 3, p: 0.71, index: 0, uid: '27589_3_0.71' },
      { seed: 412, size: 5, p: 0.62, index: 1, uid: '412_5_0.62' },
    ]);
    const taskset = `buffer.explorer_input.taskset.path=${rows}`;
    for (const workflow of ['frozen_lake_workflow', 'sokoban_workflow', 'household_workflow'])
      assert.deepEqual(await check('', [taskset, `buffer.explorer_input.default_workflow_type=${workflow}`]), [], workflow);
    const found = await check('', [taskset]); // simple_workflow reads the prompt
    assert.equal(found.length, 1, found.join('\n'));
    assert.match(found[0] as string, /frozenlake\.jsonl:1: missing key 'prompt'/);
  });

  it('name the file, line and key of rows without the prompt key (each format)', async () => {
    const cases: [unknown[], string[], RegExp][] = [
      [[{ prompt: 'a' }, { question: 'b' }], [], /row-keys-0\.jsonl:2: missing key 'prompt'/],
      [
        [{ question: 'a' }, { prompt: 'b' }],
        ['buffer.explorer_input.taskset.format.prompt_key=question'],
        /row-keys-1\.jsonl:2: missing key 'question'/,
      ],
      [[{ prompt: 'a' }, { prompt: null }], [], /row-keys-2\.jsonl:2: missing key 'prompt'/],
      [[{ prompt: 'a' }, { prompt: ['x'] }], [], /row-keys-3\.jsonl:2: key 'prompt' must be a string, got an array/],
      [
        [{ msgs: [{ role: 'user', content: 'a' }] }, { prompt: 'b' }],
        ['buffer.explorer_input.taskset.format.messages_key=msgs'],
        /row-keys-4\.jsonl:2: missing key 'msgs'/,
      ],
    ];
    for (const [i, [rows, overrides, expected]] of cases.entries()) {
      const file = tasksetFile(join(dir, `row-keys-${i}.jsonl`), rows);
      const found = await check('', [`buffer.explorer_input.taskset.path=${file}`, ...overrides]);
      assert.equal(found.length, 1, found.join('\n'));
      assert.match(found[0] as string, /^buffer\.explorer_input\.taskset\.path: /);
      assert.match(found[0] as string, expected);
    }
  });

  it('name missing dataset files of the trainer and stop token ids outside the vocabulary', async () => {
    const train = ['mode=train', 'buffer.train_batch_size=2', 'algorithm.algorithm_type=sft'];
    const sft = await check('', [
      ...train,
      'buffer.trainer_input.experience_buffer.storage_type=file',
      'buffer.trainer_input.experience_buffer.path=sft.jsonl',
    ]);
    assert.equal(sft.length, 1, sft.join('\n'));
    assert.match(sft[0] as string, /^buffer\.trainer_input\.experience_buffer\.path: .*sft\.jsonl: cannot read: ENOENT/);
    const stop = await check('', ['buffer.explorer_input.taskset.rollout_args.stop_token_ids=[5, 100, 7]']);
    assert.deepEqual(stop, [
      "buffer.explorer_input.taskset.rollout_args.stop_token_ids: token id 100 is outside the model's vocabulary (vocab_size 100)",
    ]);
  });

  it('list every problem at once', async () => {
    const found = await check('', [
      'model.model_path=/no/model',
      'buffer.explorer_input.taskset.path=/no/tasks.jsonl',
      'buffer.explorer_input.default_workflow_type=nope',
      'buffer.explorer_input.default_reward_fn_type=nope',
      'checkpoint_root_dir=/proc/trinity',
    ]);
    assert.deepEqual(found.map((line) => line.split(':')[0]).sort(), [
      'buffer.explorer_input.default_reward_fn_type',
      'buffer.explorer_input.default_workflow_type',
      'buffer.explorer_input.taskset.path',
      'checkpoint_root_dir',
      'model.model_path',
    ]);
  });

  it('skip stages that finished (runConfig skips them), starting the next from the finished model', async () => {
    const stages = `stages: [{stage_name: one}, {stage_name: two}]`;
    const first = config(stages, ['model.model_path=/deleted/model']);
    const [one] = first.stages;
    assert.ok(one);
    mkdirSync(one.checkpoint_job_dir, { recursive: true });
    writeFileSync(join(one.checkpoint_job_dir, 'done.json'), JSON.stringify({ finalModelDir: model, steps: 1 }));
    assert.deepEqual(lines(await preflightProblems(first, { baseDir: dir })), []);
    // the finished stage's model was deleted since: the stage after it cannot start
    writeFileSync(join(one.checkpoint_job_dir, 'done.json'), JSON.stringify({ finalModelDir: '/deleted/final', steps: 1 }));
    assert.deepEqual(lines(await preflightProblems(first, { baseDir: dir })), [
      "model.model_path: model folder /deleted/final does not exist (in stage 'two')",
    ]);
  });
});

describe('job folders that cannot be made', () => {
  it('are refused under /proc, /sys and /dev, under a file, and where nothing exists', () => {
    writeFileSync(join(dir, 'a-file'), 'x');
    const cases: [string, RegExp][] = [
      ['/proc/trinity/runs', /is under \/proc, a system folder/],
      ['/proc/self/trinity', /is under \/proc, a system folder/],
      ['/sys/kernel/trinity', /is under \/sys, a system folder/],
      ['/dev/trinity/runs', /is under \/dev, a system folder/],
      [join(dir, 'a-file', 'runs'), /a-file is a file, not a folder/],
    ];
    for (const [path, expected] of cases) assert.match(unwritableReason(path) ?? 'null', expected, path);
    for (const path of [join(dir, 'new', 'deeper'), dir, '/dev/shm/trinity-runs'])
      assert.equal(unwritableReason(path), null, path);
  });

  it('make config check and runConfig fail before anything is created', async () => {
    for (const root of ['/proc/trinity-runs', '/sys/trinity-runs', join(dir, 'a-file')]) {
      const c = config('', [`checkpoint_root_dir=${root}`]);
      const found = lines(await preflightProblems(c, { baseDir: dir }));
      assert.equal(found.length, 1, found.join('\n'));
      assert.match(found[0] as string, /^checkpoint_root_dir: the job folder cannot be made: /);
      await assert.rejects(runConfig(c, { log: () => {}, baseDir: dir }), (error: Error) => {
        assert.ok(error instanceof ConfigError);
        assert.match(error.message, /checkpoint_root_dir: the job folder cannot be made/);
        return true;
      });
    }
    assert.equal(existsSync('/proc/trinity-runs'), false);
  });
});

describe('runConfig', () => {
  it('runs the pre-run checks before any stage: nothing is made, every problem is named', async () => {
    const c = config('', [
      'buffer.explorer_input.default_reward_fn_type=nope',
      'buffer.explorer_input.taskset.path=/no/tasks.jsonl',
    ]);
    await assert.rejects(runConfig(c, { log: () => {}, baseDir: dir }), (error: Error) => {
      assert.ok(error instanceof ConfigError);
      assert.match(error.message, /buffer\.explorer_input\.default_reward_fn_type: unknown reward function 'nope'/);
      assert.match(error.message, /buffer\.explorer_input\.taskset\.path: .*\/no\/tasks\.jsonl/);
      return true;
    });
    assert.equal(existsSync(c.checkpoint_job_dir), false);
  });
});

describe('trinity config check', () => {
  it('lists the pre-run problems with where each key was written: file:line:column or the --set override', async () => {
    const file = join(dir, 'located.yaml');
    writeFileSync(
      file,
      `model: {model_path: ${model}, max_model_len: 64}
buffer:
  explorer_input:
    taskset:
      path: missing.jsonl
    default_workflow_type: simple_workflow
`,
    );
    let err = '';
    const output = { stdout: { write: () => true }, stderr: { write: (text: string) => (err += text) } };
    const code = await configCommand(['check', file, '--no-algorithm-check', '--set', 'model.model_path=/no/model'], output);
    assert.equal(code, 1);
    assert.match(err, /^invalid config .*located\.yaml: 2 problems\n/);
    assert.match(err, /- model\.model_path: model folder \/no\/model does not exist \(--set model\.model_path=\/no\/model\)\n/);
    assert.match(err, /- buffer\.explorer_input\.taskset\.path: .*missing\.jsonl.* \(.*located\.yaml:5:7\)\n/);
  });
});
