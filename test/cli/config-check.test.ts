// `trinity config check` and `trinity run` as a user runs them (a real process): what run would refuse, config check
// refuses too, with exit code 1, every problem named by its key path, and no stack trace; run refuses the same before
// its first stage and exits instead of hanging (a checkpoint_root_dir under /proc spun forever in Node's recursive
// mkdir) or aborting (repeat_times 1e9 ran out of heap).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { modelFolder, tasksetFile } from '../rft/config/helpers.js';

const BIN = join(import.meta.dirname, '..', '..', 'bin', 'trinity.js');
// stops a hang with a failure instead of the suite's timeout; far beyond the seconds these commands take
const HANG_GUARD_MS = 300_000;
const STACK_TRACE = /^\s+at .+(\(|:\d+:\d+)/m;

interface Result {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function trinity(args: string[]): Promise<Result> {
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { timeout: HANG_GUARD_MS, killSignal: 'SIGKILL' }, (error, stdout, stderr) => {
      const e = error as (Error & { code?: unknown; signal?: NodeJS.Signals | null }) | null;
      resolve({ code: e === null ? 0 : typeof e.code === 'number' ? e.code : null, signal: e?.signal ?? null, stdout, stderr });
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), 'trinity-cli-config-'));
const model = modelFolder(join(dir, 'model'));
const tasks = tasksetFile(join(dir, 'tasks.jsonl'));
let files = 0;
function configFile(extra: string): string {
  const file = join(dir, `c${files++}.yaml`);
  writeFileSync(
    file,
    `model: {model_path: ${model}, max_model_len: 64}
checkpoint_root_dir: ${dir}/runs
algorithm: {algorithm_type: grpo, repeat_times: 2}
buffer:
  batch_size: 2
  total_steps: 1
  explorer_input:
    taskset: {path: ${tasks}}
    default_workflow_type: simple_workflow
    default_reward_fn_type: accuracy_reward
${extra}`,
  );
  return file;
}

describe('trinity config check (a real process)', () => {
  it('exits 0 and prints the resolved config when everything is there', async () => {
    const result = await trinity(['config', 'check', configFile('')]);
    assert.equal(result.code, 0, result.stderr);
    assert.match(result.stdout, /repeat_times: 2/);
  });

  it('exits 1 naming the key for what run would refuse; no stack trace', async () => {
    const missingKey = tasksetFile(join(dir, 'no-prompt.jsonl'), [{ prompt: 'a' }, { question: 'b' }]);
    writeFileSync(join(dir, 'bad.yaml'), '__proto__:\n  polluted: 1\n');
    const cases: [string, string[], RegExp][] = [
      ['', ['--set', 'algorithm.repeat_times=1e9'], /algorithm\.repeat_times: must be <= 1024, got 1000000000/],
      [
        '',
        ['--set', 'buffer.explorer_input.taskset.path=/no/tasks.jsonl'],
        /buffer\.explorer_input\.taskset\.path: .*\/no\/tasks\.jsonl/,
      ],
      ['', ['--set', 'model.model_path=/no/model'], /model\.model_path: model folder \/no\/model does not exist/],
      ['', ['--set', 'buffer.explorer_input.default_workflow_type=nope'], /default_workflow_type: unknown workflow 'nope'/],
      [
        '',
        ['--set', 'buffer.explorer_input.default_reward_fn_type=x.ts#f'],
        /default_reward_fn_type: reward function 'x\.ts#f': module file/,
      ],
      ['', ['--set', `buffer.explorer_input.taskset.path=${missingKey}`], /no-prompt\.jsonl:2: missing key 'prompt'/],
      [
        '',
        ['--set', 'checkpoint_root_dir=/proc/trinity'],
        /checkpoint_root_dir: the job folder cannot be made: .* is under \/proc/,
      ],
      ['', ['--set', '__proto__.polluted=1'], /override '__proto__\.polluted=1': '__proto__' is not a config key/],
      ['__proto__: {x: 1}\n', [], /__proto__: '__proto__' is not a config key .*:\d+:1\)/],
      ['buffer: [\n', [], /YAML syntax error/],
    ];
    for (const [extra, args, expected] of cases) {
      const result = await trinity(['config', 'check', configFile(extra), ...args]);
      const what = `${extra}${args.join(' ')}`;
      assert.equal(result.code, 1, `${what}\n${result.stderr}`);
      assert.match(result.stderr, expected, what);
      assert.doesNotMatch(result.stderr, STACK_TRACE, what);
      assert.equal(result.stdout, '', what);
    }
  });
});

describe('trinity run refuses before its first stage (a real process)', () => {
  it('a checkpoint_root_dir under /proc or /sys: exits 1 naming the key, instead of spinning', async () => {
    for (const root of ['/proc/trinity-runs', '/sys/trinity-runs']) {
      const result = await trinity(['run', '--config', configFile(''), '--set', `checkpoint_root_dir=${root}`]);
      assert.equal(result.signal, null, `${root}: killed by the hang guard`);
      assert.equal(result.code, 1, result.stderr);
      assert.match(
        result.stderr,
        /checkpoint_root_dir: the job folder cannot be made: .* is under \/(proc|sys), a system folder/,
      );
      assert.doesNotMatch(result.stderr, STACK_TRACE);
    }
  });

  it('repeat_times 1e9, rows without the prompt key, an unknown reward: exits 1 naming each', async () => {
    const missingKey = tasksetFile(join(dir, 'no-prompt-run.jsonl'), [{ question: 'a' }]);
    const cases: [string[], RegExp][] = [
      [['--set', 'algorithm.repeat_times=1e9'], /algorithm\.repeat_times: must be <= 1024/],
      [['--set', `buffer.explorer_input.taskset.path=${missingKey}`], /no-prompt-run\.jsonl:1: missing key 'prompt'/],
      [
        ['--set', 'buffer.explorer_input.default_reward_fn_type=acuracy_reward'],
        /unknown reward function 'acuracy_reward'; did you mean 'accuracy_reward'/,
      ],
    ];
    for (const [args, expected] of cases) {
      const result = await trinity(['run', '--config', configFile(''), ...args]);
      assert.equal(result.code, 1, `${args.join(' ')}\n${result.stderr}`);
      assert.match(result.stderr, expected, args.join(' '));
      assert.doesNotMatch(result.stderr, STACK_TRACE, args.join(' '));
    }
  });
});
