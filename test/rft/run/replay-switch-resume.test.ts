// An SQL buffer's checkpoint keeps what its cursor counts: row ids (a plain reader) or priority replay revisions
// (experience_buffer.replay_buffer.enable). A run resumed with replay switched the other way stops with an error
// naming the checkpoint, the cursor and the setting, instead of reading a revision as a row id (or the reverse).
// The first run is killed with SIGKILL once its checkpoint of step 2 is saved; the second resumes from its newest.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { listCheckpoints } from '../../../src/rft/checkpoint.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** Runs `trinity run`; with `killOn`, SIGKILLs it the moment its output first matches (an event, not a time). */
function run(
  configFile: string,
  sets: string[],
  killOn?: RegExp,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const args = [trinity, 'run', '--config', configFile, ...sets.flatMap((s) => ['--set', s])];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    let sent = false;
    const take = (d: Buffer) => {
      output += d;
      if (killOn && !sent && killOn.test(output)) {
        sent = true;
        child.kill('SIGKILL');
      }
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    // a failure guard only
    const deadline = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`trinity run did not finish within 240 s:\n${output}`));
    }, 240_000);
    child.on('exit', (code, signal) => {
      clearTimeout(deadline);
      resolve({ code, signal, output });
    });
  });
}

for (const [first, then] of [
  ['replay', 'rows'],
  ['rows', 'replay'],
] as const) {
  test(`an SQL buffer's checkpoint written with replay ${first === 'replay' ? 'on' : 'off'}, resumed with it ${then === 'replay' ? 'on' : 'off'}: a precise error`, {
    timeout: 300_000,
  }, async () => {
    const { root, configFile, jobDir } = makeJob({ totalSteps: 8, saveInterval: 2 });
    const sql = [
      'buffer.trainer_input.experience_buffer.storage_type=sql',
      `buffer.trainer_input.experience_buffer.path=${join(root, 'buffer.db')}`,
    ];
    const replay = (on: boolean) => [
      `buffer.trainer_input.experience_buffer.replay_buffer={enable: ${on}, reuse_cooldown_time: null}`,
    ];
    const killed = await run(configFile, [...sql, ...replay(first === 'replay')], /checkpoint step 2 saved/);
    assert.equal(killed.signal, 'SIGKILL', killed.output);
    const last = listCheckpoints(jobDir).at(-1);
    assert.ok(last !== undefined && last >= 2 && last < 8, `checkpoints: ${listCheckpoints(jobDir)}`);
    const stateFile = join(jobDir, 'checkpoints', `global_step_${last}`, 'state.json');
    const state = JSON.parse(readFileSync(stateFile, 'utf8')) as { buffer: { cursor: number }; bufferCursor: string };
    assert.equal(state.bufferCursor, first);
    const cursor = state.buffer.cursor;

    const resumed = await run(configFile, [...sql, ...replay(then === 'replay')]);
    assert.notEqual(resumed.code, 0, resumed.output);
    const what =
      first === 'replay'
        ? `a priority replay revision \\(written with experience_buffer.replay_buffer.enable: true\\), but replay_buffer is off now`
        : `a row id \\(written with experience_buffer.replay_buffer off\\), but replay_buffer.enable is true now`;
    assert.match(
      resumed.output,
      new RegExp(
        `${stateFile.replaceAll('/', '\\/')}: its buffer cursor ${cursor} is ${what}.* to resume this run, or start a new one \\(buffer 'experience_buffer' in ${join(root, 'buffer.db')}\\)`,
      ),
    );
  });
}
