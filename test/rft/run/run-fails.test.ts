// A run that cannot fill its train steps fails (src/rft/trainer/empty-steps.ts): whichever way every rollout goes
// wrong — the workflow throws, hangs or spins past explorer.max_timeout, runs out of its heap, returns a reward that
// is not a number or token ids outside the vocabulary, the sequences are longer than the model's context; with the
// built-in workflow, prompts longer than the context (truncation off; on, the placeholders alone fail the run too), an
// experience pipeline that filters every experience out, a chat template that throws, a tokenizer larger than the model's vocabulary — the
// run rejects with an error naming the cause and the last rollout failures, run_status.json says "failed", and there
// is no done.json (a rerun does not skip the stage as finished) and no final model.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

/** Workflows that fail every rollout, each in its own way (run on workflow worker threads: module paths). */
const WORKFLOWS = `export const throws = {
  run: async () => {
    throw new Error('the workflow threw on purpose');
  },
};

export const hangs = {
  run: () => new Promise(() => {}),
};

export const spins = {
  run: () => {
    for (;;) {}
  },
};

const experience = (task, tokens, reward) => [{ eid: task.id, tokens, promptLength: 2, reward, info: {} }];

export const nanReward = {
  run: async ({ task }) => experience(task, [5, 6, 3, 4], Number.NaN),
};

export const badTokenIds = {
  run: async ({ task }) => experience(task, [5, 6, 3, 1_000_000], 1),
};

export const hoards = {
  run: async () => {
    const kept = [];
    for (;;) kept.push(new Array(100_000).fill(kept.length));
  },
};

export const tooLong = {
  run: async ({ task }) => experience(task, Array.from({ length: 200 }, (_, i) => 3 + (i % 10)), 1),
};
`;

/**
 * Runs the tiny job (workflow `name` of WORKFLOWS, or the built-in simple_workflow for null) after `prepare` changed
 * its files; asserts the run failed as it should, and returns its error.
 */
async function failingRun(
  name: string | null,
  options: { totalSteps?: number; overrides?: string[]; prepare?: (root: string) => void; log?: (line: string) => void } = {},
): Promise<Error> {
  const { root, configFile, jobDir } = makeJob({ totalSteps: options.totalSteps ?? 2, saveInterval: 1 });
  writeFileSync(join(root, 'failing.ts'), WORKFLOWS);
  options.prepare?.(root);
  const overrides = [
    ...(name === null ? [] : [`buffer.explorer_input.default_workflow_type=./failing.ts#${name}`]),
    'explorer.max_retry_times=0',
    ...(options.overrides ?? []),
  ];
  const config = loadConfig(configFile, { resolveAlgorithm, overrides });
  let failure: Error | null = null;
  // a stage's lines go to the progress reporter's stderr: `log` gets those too
  const write = process.stderr.write.bind(process.stderr);
  const log = options.log;
  if (log)
    process.stderr.write = ((chunk: string | Uint8Array) => {
      for (const line of String(chunk).split('\n')) if (line !== '') log(line);
      return true;
    }) as typeof process.stderr.write;
  try {
    await assert.rejects(runConfig(config, { log: log ?? (() => {}), baseDir: root, distributed: null }), (error: Error) => {
      failure = error;
      return true;
    });
  } finally {
    process.stderr.write = write;
  }
  const error = failure as unknown as Error;
  assert.equal(error.name, 'NothingToTrainError', error.stack);
  const status = JSON.parse(readFileSync(join(jobDir, 'run_status.json'), 'utf8')) as { state: string; error: string };
  assert.equal(status.state, 'failed');
  assert.equal(status.error, error.message.split('\n')[0]);
  assert.ok(!existsSync(join(jobDir, 'done.json')), 'a failed run is not marked finished');
  assert.ok(!existsSync(join(jobDir, 'final_model')), 'no final model equal to the start');
  return error;
}

test('every workflow throws: the run fails naming the nothing-to-train cause and the workflow error', async () => {
  const error = await failingRun('throws');
  assert.match(error.message, /none of the 2 train step\(s\) run had anything to train on/);
  assert.match(error.message, /rollouts failed, or were rejected or filtered out/);
  assert.match(error.message, /last rollout failures: task \S+ run\(s\) 0,1,2,3: the workflow threw on purpose/);
});

test('every workflow hangs past explorer.max_timeout: the run fails at the bound of empty steps in a row', async () => {
  // 4 steps: the third empty one in a row ends the run there, before its metrics or checkpoint
  const error = await failingRun('hangs', { totalSteps: 4, overrides: ['explorer.max_timeout=1'] });
  assert.match(error.message, /train steps 1, 2, 3 had nothing to train on \(3 in a row is the most a run goes on with\)/);
  assert.match(error.message, /timed out after 1 s \(explorer.max_timeout\)/);
});

test('every workflow spins in a synchronous loop: its thread is ended at explorer.max_timeout and the run fails', async () => {
  const error = await failingRun('spins', { totalSteps: 4, overrides: ['explorer.max_timeout=1'] });
  assert.match(error.message, /train steps 1, 2, 3 had nothing to train on \(3 in a row is the most a run goes on with\)/);
  assert.match(error.message, /timed out after 1 s \(explorer.max_timeout\)/);
});

test('rewards that are not numbers: the run fails naming the malformed experiences', async () => {
  const error = await failingRun('nanReward');
  assert.match(error.message, /reward must be a finite number, got NaN/);
});

test('token ids outside the vocabulary: the run fails naming the rejected experiences', async () => {
  const error = await failingRun('badTokenIds');
  assert.match(error.message, /rejected: task \S+: tokens: token id 1000000 is outside the vocabulary \[0, \d+\)/);
});

test("sequences longer than the model's context: the run fails naming the rejected experiences", async () => {
  const error = await failingRun('tooLong');
  assert.match(error.message, /rejected: task \S+: tokens: 200 tokens exceed the model's max length \d+/);
});

/** Rewrites the JSON file `file` of the job's model folder. */
function editModelFile(root: string, file: string, edit: (json: Record<string, unknown>) => void): void {
  const path = join(root, 'model', file);
  const json = JSON.parse(readFileSync(path, 'utf8')) as Record<string, unknown>;
  edit(json);
  writeFileSync(path, JSON.stringify(json));
}

/** Replaces the job's taskset with prompts made by `prompt`. */
function writeTasks(root: string, prompt: (i: number) => string): void {
  const rows = Array.from({ length: 4 }, (_, i) => JSON.stringify({ prompt: prompt(i), response: '1' }));
  writeFileSync(join(root, 'tasks.jsonl'), `${rows.join('\n')}\n`);
}

test('a workflow that runs out of its heap (explorer.workflow_max_heap_mb): the run fails naming the limit', async () => {
  const error = await failingRun('hoards', { overrides: ['explorer.workflow_max_heap_mb=32'] });
  assert.equal(error.name, 'NothingToTrainError');
  assert.match(error.message, /out of memory: the workflow's worker thread reached its heap limit of 32 MB/);
});

test('prompts longer than the context, truncation off (the built-in workflow): the run fails naming the prompt length', async () => {
  const error = await failingRun(null, {
    prepare: (root) => writeTasks(root, (i) => `${'1+'.repeat(40)}${i}=`),
    overrides: ['model.enable_prompt_truncation=false'],
  });
  assert.match(error.message, /the prompt has \d+ tokens; the engine's maxLength \(\d+ positions per slot\) leaves no room/);
});

test('every prompt over max_prompt_tokens (truncation on, the default): placeholders only, the run fails naming them', async () => {
  const error = await failingRun(null, { prepare: (root) => writeTasks(root, (i) => `${'1+'.repeat(40)}${i}=`) });
  assert.equal(error.name, 'NothingToTrainError');
  assert.match(error.message, /every experience is the placeholder of a prompt over model\.max_prompt_tokens/);
});

test('every experience filtered out by the experience pipeline: the run fails naming the pipeline', async () => {
  // the built-in workflow's rewards are at most 1: reward_filter at 2 keeps none of them
  const error = await failingRun(null, {
    overrides: ['data_processor.experience_pipeline.operators=[{name: reward_filter, args: {threshold: 2}}]'],
  });
  assert.match(error.message, /none of the 2 train step\(s\) run had anything to train on/);
  assert.match(error.message, /the experience pipeline kept none of the step's 8 experience\(s\)/);
});

test('a chat template that throws: the run fails naming the template error', async () => {
  const error = await failingRun(null, {
    prepare: (root) =>
      editModelFile(root, 'tokenizer_config.json', (config) => {
        config.chat_template = "{{ raise_exception('this template refuses every conversation') }}";
      }),
  });
  assert.match(error.message, /last rollout failures: .*this template refuses every conversation/);
});

test("a tokenizer larger than the model's vocabulary: said once when the engine starts; the run fails naming the token id", async () => {
  const lines: string[] = [];
  const error = await failingRun(null, {
    log: (line) => lines.push(line),
    prepare: (root) => {
      // the model has 17 token ids (0..16): the tokenizer gets two more, which every prompt uses
      editModelFile(root, 'tokenizer.json', (tokenizer) => {
        Object.assign((tokenizer.model as { vocab: Record<string, number> }).vocab, { x: 17, y: 18 });
      });
      writeTasks(root, (i) => `x+${i}=y`);
    },
  });
  assert.match(error.message, /prompt\[\d+\] = 17 is not a token id \(vocabulary size 17\)/);
  const warnings = lines.filter((line) => line.includes('the tokenizer has 19 token ids, the model 17'));
  assert.equal(warnings.length, 1, lines.join('\n'));
  assert.match(warnings[0] as string, /ids 17\.\.18 cannot be trained on: rollouts holding them are rejected before the buffer/);
});

test('an explorer process (mode explore) whose every rollout fails fails too, naming the workflow error', async () => {
  const error = await failingRun('throws', {
    totalSteps: 4,
    overrides: [
      'mode=explore',
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      'synchronizer.sync_style=trainer_driven', // it never waits for a trainer process
    ],
  });
  assert.match(error.message, /explore steps 1, 2, 3 had nothing to train on/);
  assert.match(error.message, /the workflow threw on purpose/);
});

test('trinity run: a run whose every rollout fails exits 1 with the cause on stderr', async () => {
  const { root, configFile, jobDir } = makeJob({ totalSteps: 2, saveInterval: 1 });
  // .mts: outside tsx, a module-path workflow in a folder without package.json must say it is ESM
  writeFileSync(join(root, 'failing.mts'), WORKFLOWS);
  const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));
  const args = ['run', '--config', configFile, '--set', 'buffer.explorer_input.default_workflow_type=./failing.mts#throws'];
  const child = spawn(process.execPath, [trinity, ...args, '--set', 'explorer.max_retry_times=0'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => {
    stderr += d;
  });
  const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
  assert.equal(code, 1, stderr);
  assert.match(stderr, /trinity: stage 'run': none of the 2 train step\(s\) run had anything to train on/);
  assert.match(stderr, /the workflow threw on purpose/);
  assert.ok(!existsSync(join(jobDir, 'done.json')));
});
