// GiGPO over episode experiences takes the same train step as over step experiences (src/rft/algorithm/advantage/
// gigpo.ts): three FrozenLake episodes played with chosen replies in both experience modes, one gigpo step each
// from the same model. A step experience's prompt is the conversation before its reply, so the trained tokens, their
// log-probs and (with info.step_spans) their advantages are the same, and under token-mean aggregation so are the
// loss and the gradient; the episode batch holds each observation once instead of once per later step.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { initModel } from '../../../src/model/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import type { Task } from '../../../src/rft/task.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import { toyTrainerInit } from './toy.js';
import { frozenLakeWorkflow } from '../../../src/rft/workflow/index.js';
import { Tokenizer } from '../../../src/tokenizer/index.js';
import { playScripted } from '../workflow/env/scripted-episode.js';

let work = '';
let modelDir = '';

before(() => {
  work = mkdtempSync(join(tmpdir(), 'gigpo-episode-'));
  modelDir = join(work, 'model');
  initModel(modelDir, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 512, seed: 3 });
});
after(() => rmSync(work, { recursive: true, force: true }));

/** Three runs of one 3×3 lake (a hole in the middle): the goal (1), the hole (0), an invalid reply and the hole. */
async function episodes(mode: 'step' | 'episode'): Promise<Experience[]> {
  const tokenizer = Tokenizer.load(modelDir);
  const task: Task = {
    id: 'lake:0',
    taskset: 'lake',
    index: 0,
    raw: { desc: ['SFF', 'FHF', 'FFG'] },
    workflow: 'frozen_lake_workflow',
    workflowArgs: { experience_mode: mode, invalid_action_penalty: 0.1, max_steps: 4 },
    rolloutArgs: { max_tokens: 8 },
  };
  const replies = [
    ['Right', 'Right', 'Down', 'Down'],
    ['Down', 'Right'],
    ['jump', 'Right', 'Down'],
  ];
  const runs = await Promise.all(replies.map((r, run) => playScripted(tokenizer, frozenLakeWorkflow, task, run, r)));
  return runs.flat();
}

/** One gigpo train step of a fresh trainer on `batch`: its metrics. */
async function oneStep(batch: readonly Experience[], name: string): Promise<Record<string, number>> {
  const { trainer } = await TrainerClient.start(
    toyTrainerInit(modelDir, join(work, name), {
      algorithm: { algorithm_type: 'gigpo', optimizer: { lr: 1e-3 } },
      pluginBaseDir: work,
      totalSteps: 1,
    }),
  );
  try {
    return await trainer.step(batch);
  } finally {
    await trainer.close();
  }
}

test('gigpo: one train step over episode experiences equals the step over step experiences', async () => {
  const steps = await episodes('step');
  const whole = await episodes('episode');
  assert.deepEqual([steps.length, whole.length], [9, 3]);
  const tokens = (batch: readonly Experience[]) => batch.reduce((a, e) => a + e.tokens.length, 0);
  assert.ok(tokens(whole) < tokens(steps), `${tokens(whole)} tokens read against ${tokens(steps)}`);
  const bySteps = await oneStep(steps, 'steps');
  const byEpisodes = await oneStep(whole, 'episodes');
  const metric = (row: Record<string, number>, suffix: string) =>
    Object.entries(row).find(([key]) => key.endsWith(suffix))?.[1] as number;
  assert.equal(metric(byEpisodes, 'tokens'), metric(bySteps, 'tokens'), 'the same reply tokens trained');
  for (const key of ['pg_loss', 'grad_norm', 'gigpo/anchor_groups_size_gt1', 'gigpo/mean_abs_A_S']) {
    const [a, b] = [metric(byEpisodes, key), metric(bySteps, key)];
    assert.ok(a !== undefined && Number.isFinite(a), `${key}: ${a}`);
    assert.ok(Math.abs(a - b) <= 1e-5 * Math.max(1, Math.abs(b)), `${key}: episodes ${a}, steps ${b}`);
  }
  assert.ok(metric(byEpisodes, 'grad_norm') > 0);
});
