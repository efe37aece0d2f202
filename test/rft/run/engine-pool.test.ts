// explorer.rollout_model.engine_num in real GRPO runs (mode both, tiny random model): 2 engines on worker threads, and
// 2 engines in processes of their own (engine_process), explore exactly the rollouts 1 engine explores — same token
// ids, same log-probs — because a sample's seed is the request's, not the engine's. Step 2 samples after a weight sync
// (memory for threads, checkpoint reload for processes), so a sync that missed an engine would show there.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { resolveAlgorithm } from '../../../src/rft/algorithm/presets.js';
import { loadConfig } from '../../../src/rft/run/config/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { runConfig } from '../../../src/rft/run/index.js';
import { makeJob } from './helpers.js';

const STEPS = 2;

/** Runs the job with `overrides`; returns its raw experiences (the experience pipeline's save_input), as written. */
async function rollouts(overrides: string[]): Promise<Experience[]> {
  const { root, configFile } = makeJob({
    totalSteps: STEPS,
    saveInterval: 100,
    extra: 'data_processor:\n  experience_pipeline:\n    save_input: true\n    input_save_path: raw.jsonl\n',
  });
  await runConfig(loadConfig(configFile, { resolveAlgorithm, overrides }), { log: () => {} });
  return readFileSync(join(root, 'raw.jsonl'), 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Experience);
}

/** Experiences of each step and task, in the order written, as comparable records. */
function records(experiences: readonly Experience[]): Map<string, { tokens: number[]; logprobs: number[]; version: number }[]> {
  const out = new Map<string, { tokens: number[]; logprobs: number[]; version: number }[]>();
  for (const e of experiences) {
    const key = `step ${e.info.step} task ${e.info.taskId}`;
    const list = out.get(key) ?? [];
    list.push({ tokens: [...e.tokens], logprobs: [...(e.logprobs ?? [])], version: e.info.modelVersion as number });
    out.set(key, list);
  }
  // the order of a task's samples within a step is the request's (sample index), the same on any engine
  return out;
}

function assertSameRollouts(
  actual: Map<string, { tokens: number[]; logprobs: number[]; version: number }[]>,
  expected: Map<string, { tokens: number[]; logprobs: number[]; version: number }[]>,
  what: string,
): void {
  assert.deepEqual([...actual.keys()].sort(), [...expected.keys()].sort(), `${what}: the same steps and tasks`);
  for (const [key, list] of expected) {
    const other = actual.get(key) ?? [];
    assert.deepEqual(
      other.map((r) => r.tokens),
      list.map((r) => r.tokens),
      `${what}: ${key}: token ids`,
    );
    assert.deepEqual(
      other.map((r) => r.version),
      list.map((r) => r.version),
      `${what}: ${key}: weights version`,
    );
    const diff = Math.max(
      ...list.flatMap((r, i) => r.logprobs.map((v, j) => Math.abs(v - (other[i]?.logprobs[j] ?? Number.NaN)))),
    );
    assert.ok(diff < 1e-5, `${what}: ${key}: log-prob difference ${diff}`);
  }
}

describe('engine_num 2 explores what engine_num 1 explores', { timeout: 600_000 }, () => {
  let one: ReturnType<typeof records>;

  test('engine_num 1 (the reference)', async () => {
    one = records(await rollouts(['explorer.rollout_model.engine_num=1']));
    assert.equal([...one.values()].flat().length, STEPS * 2 * 4, '2 steps × 2 tasks × 4 samples');
    assert.deepEqual(
      [...new Set([...one.values()].flat().map((r) => r.version))].sort(),
      [0, 1],
      'step 2 sampled with the synced weights',
    );
  });

  test('engine_num 2 on worker threads (weights in memory)', async () => {
    assertSameRollouts(records(await rollouts(['explorer.rollout_model.engine_num=2'])), one, 'threads');
  });

  test('engine_num 2 in processes (engine_process; weights by checkpoint reload)', async () => {
    const processes = records(
      await rollouts(['explorer.rollout_model.engine_num=2', 'explorer.rollout_model.engine_process=true']),
    );
    assertSameRollouts(processes, one, 'processes');
  });
});
