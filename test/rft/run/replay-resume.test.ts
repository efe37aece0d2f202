// A both-mode run with the priority replay buffer, killed with SIGKILL after a checkpoint: the checkpoint holds the
// buffer's state (RunState.replay) and the resumed run loads it before its explorer starts.
//
// Why not "the resumed run ends with the uninterrupted run's metrics": with replay, what a trainer read gets depends
// on whether the explorer's next write came first (newer rollouts outrank older ones, and a read returns as soon as
// enough are there), so two uninterrupted runs can differ. What is checked instead is deterministic: the checkpoint's
// state is replaced by planted entries whose saved priority outranks every rollout, so train step L+1 of the resumed
// run trains on exactly them whatever the explorer does meanwhile — and their model version makes it visible in the
// step's trainer/staleness (= step − 1 − model_version: 1 for each planted entry, 0 for a rollout of weights L).
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { PriorityReplayState } from '../../../src/rft/buffer/index.js';
import { latestCheckpoint } from '../../../src/rft/checkpoint.js';
import type { Experience } from '../../../src/rft/experience.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import { makeJob } from './helpers.js';

const trinity = fileURLToPath(new URL('../../../bin/trinity.js', import.meta.url));

/** Runs `trinity run`; with `killOn`, SIGKILLs it the moment its output first matches (an event, not a time). */
function run(
  configFile: string,
  killOn?: RegExp,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [trinity, 'run', '--config', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
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

function metricsByStep(jobDir: string): Map<number, Record<string, number>> {
  const byStep = new Map<number, Record<string, number>>();
  for (const line of readFileSync(join(jobDir, 'metrics.jsonl'), 'utf8').split('\n')) {
    if (!line.trim()) continue;
    const m = JSON.parse(line) as Record<string, number>;
    byStep.set(m.step as number, { ...byStep.get(m.step as number), ...m });
  }
  return byStep;
}

test('priority replay: a SIGKILLed run checkpoints the replay buffer and the resumed run reads from what it loaded', {
  timeout: 600_000,
}, async () => {
  const totalSteps = 6;
  const { root, configFile, jobDir } = makeJob({ totalSteps, saveInterval: 2 });
  // replay on, read once (reuse_cooldown_time null: no wall-clock cooldown in the run)
  const yaml = readFileSync(configFile, 'utf8');
  assert.match(yaml, /^buffer:\n/m);
  writeFileSync(
    configFile,
    yaml.replace(
      /^buffer:\n/m,
      'buffer:\n  trainer_input:\n    experience_buffer:\n      replay_buffer: {enable: true, reuse_cooldown_time: null}\n',
    ),
  );

  const killed = await run(configFile, /checkpoint step 2 saved/);
  assert.equal(killed.signal, 'SIGKILL', killed.output);
  const checkpoint = latestCheckpoint(jobDir);
  assert.ok(checkpoint !== null && checkpoint.step >= 2 && checkpoint.step < totalSteps, `checkpoint ${checkpoint?.step}`);
  const last = checkpoint.step;
  const stateFile = join(checkpoint.dir, 'state.json');
  const state = JSON.parse(readFileSync(stateFile, 'utf8')) as { replay?: PriorityReplayState };
  const replay = state.replay;
  assert.ok(replay !== undefined, `the checkpoint has no replay state: ${Object.keys(state).join(', ')}`);
  assert.ok(Array.isArray(replay.entries) && Number.isInteger(replay.nextSeq) && Number.isInteger(replay.noise.draws));
  for (const entry of replay.entries)
    assert.ok((entry.experience.info.step as number) <= last, `an entry of explore step ${entry.experience.info.step}`);

  // 8 = train_batch_size (batch_size 2 × repeat_times 4) planted entries: two GRPO groups of four with mixed rewards,
  // made by weights L − 1, with a saved priority (1000) above any rollout's (model version ≤ 6)
  const tokenizer = Tokenizer.load(join(root, 'model'));
  const planted = Array.from({ length: 8 }, (_, i) => {
    const prompt = tokenizer.encode(i < 4 ? '1+2=' : '3+1=');
    const response = tokenizer.encode(i % 2 === 0 ? '3' : '4');
    const experience: Experience = {
      eid: `planted-${i}`,
      tokens: [...prompt, ...response],
      promptLength: prompt.length,
      logprobs: response.map(() => -1),
      actionMask: response.map(() => 1),
      temperature: 1,
      reward: i % 2,
      info: { modelVersion: last - 1, taskId: i < 4 ? 'planted-a' : 'planted-b', runId: i % 4, step: last, useCount: 0 },
    };
    return { experience, seq: i, useCount: 0, priority: 1000, cooldownMs: 0 };
  });
  writeFileSync(
    stateFile,
    JSON.stringify({ ...state, replay: { ...replay, nextSeq: Math.max(replay.nextSeq, 8), entries: planted } }),
  );

  const resumed = await run(configFile);
  assert.equal(resumed.code, 0, resumed.output);
  assert.match(resumed.output, new RegExp(`resuming from checkpoint step ${last} `));
  const metrics = metricsByStep(jobDir);
  assert.deepEqual(
    [...metrics.keys()].filter((s) => s > 0).sort((a, b) => a - b),
    Array.from({ length: totalSteps }, (_, i) => i + 1),
  );
  // train step L+1 (weights L) trained on the 8 planted entries (model version L − 1): staleness 1 each
  const step = metrics.get(last + 1) ?? {};
  assert.equal(step['trainer/staleness'], 1, JSON.stringify(step));
  // and their rewards: i % 2 for i = 0..7, mean 4/8
  assert.equal(step['actor/advantage/reward_mean'], 0.5, JSON.stringify(step));
});
