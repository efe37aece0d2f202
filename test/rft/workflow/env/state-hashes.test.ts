// GiGPO's anchor states from the environment workflows (src/rft/workflow/env/environment.ts): in experience_mode step
// every step's experience carries info.env_state_hash (sha256 of the state it acted from) and info.step_reward, so a
// GiGPO step over FrozenLake episodes finds anchor groups, with step-level advantages checked by hand.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { initModel } from '../../../../src/model/index.js';
import { computeGigpoAdvantages, missingStateKeyWarning } from '../../../../src/rft/algorithm/advantage/index.js';
import type { Experience } from '../../../../src/rft/experience.js';
import type { Task } from '../../../../src/rft/task.js';
import {
  environmentStateHash,
  environmentWorkflow,
  frozenLakeWorkflow,
  sokobanWorkflow,
  type WorkflowSpec,
} from '../../../../src/rft/workflow/index.js';
import { Tokenizer } from '../../../../src/tokenizer/index.js';
import * as torch from '../../../../src/torch/index.js';
import { playScripted } from './scripted-episode.js';

let tokenizer: Tokenizer;

before(() => {
  torch.setNumThreads(1);
  const dir = join(mkdtempSync(join(tmpdir(), 'env-states-')), 'model');
  initModel(dir, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 512, seed: 3 });
  tokenizer = Tokenizer.load(dir);
});

/** A 3×3 lake: start top-left, a hole in the middle, the goal bottom-right (positions 0..8, row by row). */
const DESC = ['SFF', 'FHF', 'FFG'];
const lakeTask = (args: Record<string, unknown>): Task => ({
  id: 'lake:0',
  taskset: 'lake',
  index: 0,
  raw: { desc: DESC },
  workflow: 'frozen_lake_workflow',
  workflowArgs: { experience_mode: 'step', ...args },
  rolloutArgs: { max_tokens: 8 },
});

/** Plays one episode with `replies` in order (one per turn); its step experiences, run `runId`. */
const play = (workflow: WorkflowSpec, task: Task, runId: number, replies: readonly string[]) =>
  playScripted(tokenizer, workflow, task, runId, replies);

/** GiGPO (ω 1, γ 1, fnorm none) over played experiences with these action masks: per-token advantages, metrics. */
function gigpo(batch: readonly Experience[], mask: number[][]) {
  return torch.scope(() => {
    const result = computeGigpoAdvantages(
      {
        actionMask: torch.tensor(mask),
        rewards: torch.tensor(batch.map((e) => e.reward as number)),
        groupIds: batch.map((e) => e.info.taskId as string),
        runIds: batch.map((e) => e.info.runId as number),
        infos: batch.map((e) => e.info),
      },
      { omega: 1, gamma: 1, fnorm: 'none' },
    );
    return { advantages: result.advantages.toArray() as number[][], metrics: result.metrics };
  });
}

const hashes = (experiences: readonly Experience[]) => experiences.map((e) => e.info.env_state_hash);

describe('env_state_hash and step_reward of the environment workflows (experience_mode step)', () => {
  test('the hash is sha256 of the state: equal for equal states, different for different ones', async () => {
    // sha256 of the text, as `printf 'P__\n_O_\n__G' | sha256sum` prints it: the same in every process and thread
    assert.equal(environmentStateHash('P__\n_O_\n__G'), '3ab4d92d241ef7da12957f6691dd345eb50fffbd7d5ee48714015aa027e02bb1');
    const task = lakeTask({});
    const expert = await play(frozenLakeWorkflow, task, 0, ['Right', 'Right', 'Down', 'Down']);
    const again = await play(frozenLakeWorkflow, task, 1, ['Right', 'Right', 'Down', 'Down']);
    // the start (P top-left), then P at positions 1, 2 and 5
    assert.equal(expert[0]?.info.env_state_hash, environmentStateHash('P__\n_O_\n__G'));
    assert.equal(new Set(hashes(expert)).size, 4, 'four different positions, four different hashes');
    assert.deepEqual(hashes(again), hashes(expert), 'another run through the same states: the same hashes');
    // an invalid reply leaves the state as it was: the next step acts from the same state
    const stalled = await play(frozenLakeWorkflow, task, 2, ['jump', 'Right']);
    assert.deepEqual(
      hashes(stalled).slice(0, 3),
      [expert[0], expert[0], expert[1]].map((e) => e?.info.env_state_hash),
    );
    // Sokoban too: its first step acts from the start state, whatever the reply
    const level = { seed: 3, experience_mode: 'step', max_steps: 2 };
    const sokobanTask: Task = { ...lakeTask({}), id: 'box:0', raw: level, workflowArgs: {}, workflow: 'sokoban_workflow' };
    const [first] = await play(sokobanWorkflow, sokobanTask, 0, ['Up', 'Up']);
    const [other] = await play(sokobanWorkflow, sokobanTask, 1, ['Left', 'Left']);
    assert.match(String(first?.info.env_state_hash), /^[0-9a-f]{64}$/);
    assert.equal(first?.info.env_state_hash, other?.info.env_state_hash);
  });

  test('step_reward is each step’s reward less the invalid-action penalty; they sum to the episode reward', async () => {
    const steps = await play(frozenLakeWorkflow, lakeTask({ invalid_action_penalty: 0.1 }), 0, ['jump', 'Right', 'Down']);
    assert.deepEqual(
      steps.map((e) => e.info.step_reward),
      [-0.1, 0, 0],
    );
    assert.deepEqual(
      steps.map((e) => e.reward),
      [-0.1, -0.1, -0.1],
    );
  });

  test("an environment's stateKey() is hashed instead of the observation", async () => {
    // the observation shows a turn counter; the state is the counter's parity
    const counter = environmentWorkflow(
      'counter',
      () => {
        let turn = 0;
        return {
          reset: () => `turn ${turn}`,
          step: () => ({ observation: `turn ${++turn}`, reward: 0, done: false }),
          stateKey: () => String(turn % 2),
        };
      },
      { experienceMode: 'step', maxSteps: 3 },
    );
    const task: Task = { id: 't', taskset: 'x', index: 0, raw: {}, prompt: 'go', rolloutArgs: { max_tokens: 4 } };
    const steps = await play(counter, task, 0, ['a', 'b', 'c']);
    assert.deepEqual(hashes(steps), ['0', '1', '0'].map(environmentStateHash));
  });
});

describe('a GiGPO step over FrozenLake episodes', () => {
  test('finds anchor groups; the advantages equal a hand computation', async () => {
    const task = lakeTask({ invalid_action_penalty: 0.1, max_steps: 4 });
    // A: the expert, positions 0 1 2 5 → goal (reward 1); B: 0 3 → hole (0); C: invalid at 0, then 0 1 → hole (−0.1)
    const a = await play(frozenLakeWorkflow, task, 0, ['Right', 'Right', 'Down', 'Down']);
    const b = await play(frozenLakeWorkflow, task, 1, ['Down', 'Right']);
    const c = await play(frozenLakeWorkflow, task, 2, ['jump', 'Right', 'Down']);
    assert.deepEqual([a.length, b.length, c.length], [4, 2, 3]);
    assert.deepEqual(
      [a, b, c].map((run) => run.at(-1)?.reward),
      [1, 0, -0.1],
    );
    const batch = [...a, ...b, ...c];
    const result = gigpo(
      batch,
      batch.map(() => [1]),
    );
    const { metrics } = result;
    const advantages = result.advantages.map((row) => row[0] as number);
    // anchor states: position 0 (A0 B0 C0 C1), position 1 (A1 C2); 2, 5 (A) and 3 (B) alone
    assert.equal(metrics['gigpo/anchor_groups_total'], 5);
    assert.equal(metrics['gigpo/anchor_groups_size_gt1'], 2);
    // episode returns Σ r_t: A 1, B 0, C −0.1 (its step rewards −0.1, 0, 0); mean 0.3; fnorm none: A^E = R − 0.3
    //   A^E: A 0.7, B −0.3, C −0.4
    // step returns (γ 1) R_t = Σ_{k≥t} r_k: A 1 1 1 1, B 0 0, C −0.1 0 0
    //   position 0: {A0 1, B0 0, C0 −0.1, C1 0}, mean 0.225 → A^S 0.775, −0.225, −0.325, −0.225
    //   position 1: {A1 1, C2 0}, mean 0.5 → A^S 0.5, −0.5; alone: 0
    // A = (A^E + A^S) / (1 + ε)
    const expected = [0.7 + 0.775, 0.7 + 0.5, 0.7, 0.7, -0.3 - 0.225, -0.3, -0.4 - 0.325, -0.4 - 0.225, -0.4 - 0.5];
    advantages.forEach((value, i) => {
      assert.ok(Math.abs(value - (expected[i] as number)) < 1e-5, `experience ${i}: ${value}, expected ${expected[i]}`);
    });
    // the same batch has its states: no warning; without them, the warning says so
    assert.equal(
      missingStateKeyWarning(
        { name: 'gigpo' },
        batch.map((e) => e.info),
      ),
      null,
    );
    const stateless = batch.map(({ info: { env_state_hash: _, ...info } }) => info);
    assert.match(
      missingStateKeyWarning({ name: 'gigpo' }, stateless) ?? '',
      /^advantage_fn 'gigpo': none of the 9 experiences of this batch has info\.env_state_hash, .*anchor_groups_total 0/,
    );
    assert.match(
      missingStateKeyWarning(
        { name: 'gigpo', args: { env_state_hash_key: 'cell' } },
        batch.map((e) => e.info),
      ) ?? '',
      /has info\.cell/,
    );
    assert.equal(missingStateKeyWarning({ name: 'grpo' }, stateless), null);
  });
});

describe('experience_mode episode: one experience per episode, each turn listed in its info', () => {
  // A: the expert (goal, reward 1); B: into the hole (0); C: an invalid reply, then into the hole (−0.1)
  const REPLIES = [
    ['Right', 'Right', 'Down', 'Down'],
    ['Down', 'Right'],
    ['jump', 'Right', 'Down'],
  ];
  const args = { invalid_action_penalty: 0.1, max_steps: 4 };
  const playBoth = async () => {
    const steps = await Promise.all(REPLIES.map((replies, run) => play(frozenLakeWorkflow, lakeTask(args), run, replies)));
    const episodeTask = lakeTask({ ...args, experience_mode: 'episode' });
    const episodes = await Promise.all(REPLIES.map((replies, run) => play(frozenLakeWorkflow, episodeTask, run, replies)));
    return { steps, episodes: episodes.map(([episode]) => episode as Experience) };
  };
  /** [start, end) of each run of 1s of a mask. */
  const runsOfOnes = (mask: readonly number[]) => {
    const runs: [number, number][] = [];
    mask.forEach((m, t) => {
      if (m === 1 && mask[t - 1] !== 1) runs.push([t, t]);
      if (m === 1) (runs.at(-1) as [number, number])[1] = t + 1;
    });
    return runs;
  };

  test("step_spans are the replies' tokens; the states and step rewards are experience_mode step's", async () => {
    const { steps, episodes } = await playBoth();
    episodes.forEach((episode, i) => {
      const run = steps[i] as Experience[];
      const spans = episode.info.step_spans as [number, number][];
      assert.equal(spans.length, run.length);
      assert.deepEqual(spans, runsOfOnes(episode.actionMask as number[]), 'the spans are the trained tokens, turn by turn');
      spans.forEach(([start, end], k) => {
        const step = run[k] as Experience;
        const reply = episode.tokens.slice(episode.promptLength + start, episode.promptLength + end);
        assert.deepEqual(reply, step.tokens.slice(step.promptLength), `episode ${i}, turn ${k}: the step's reply`);
      });
      assert.deepEqual(episode.info.env_state_hash, hashes(run));
      assert.deepEqual(
        episode.info.step_reward,
        run.map((e) => e.info.step_reward),
      );
      assert.equal(episode.reward, run.at(-1)?.reward);
    });
  });

  test('gigpo gives each reply the advantage of its step experience, and 0 between the replies', async () => {
    const { steps, episodes } = await playBoth();
    const stepBatch = steps.flat();
    const perStep = gigpo(
      stepBatch,
      stepBatch.map(() => [1]),
    );
    const width = Math.max(...episodes.map((e) => (e.actionMask as number[]).length));
    const masks = episodes.map((e) => [
      ...(e.actionMask as number[]),
      ...Array(width - (e.actionMask as number[]).length).fill(0),
    ]);
    const perEpisode = gigpo(episodes, masks);
    // the hand computation of the step-mode test above: A = A^E + A^S per step
    const expected = [0.7 + 0.775, 0.7 + 0.5, 0.7, 0.7, -0.3 - 0.225, -0.3, -0.4 - 0.325, -0.4 - 0.225, -0.4 - 0.5];
    let s = 0;
    episodes.forEach((episode, i) => {
      const row = perEpisode.advantages[i] as number[];
      const spans = episode.info.step_spans as [number, number][];
      const inSpan = new Set(spans.flatMap(([start, end]) => Array.from({ length: end - start }, (_, k) => start + k)));
      spans.forEach(([start, end], k) => {
        const want = perStep.advantages[s]?.[0] as number;
        assert.ok(Math.abs(want - (expected[s] as number)) < 1e-5, `step ${s}: ${want}`);
        for (let t = start; t < end; t++)
          assert.ok(Math.abs((row[t] as number) - want) < 1e-6, `episode ${i} turn ${k} token ${t}`);
        s++;
      });
      row.forEach((value, t) => {
        if (!inSpan.has(t)) assert.equal(value, 0, `episode ${i} token ${t} (an observation or padding)`);
      });
    });
    for (const key of ['gigpo/anchor_groups_total', 'gigpo/anchor_groups_size_gt1', 'gigpo/steps_total', 'gigpo/mean_abs_A_S']) {
      assert.ok(Math.abs((perEpisode.metrics[key] as number) - (perStep.metrics[key] as number)) < 1e-9, key);
    }
    assert.equal(perEpisode.metrics['gigpo/steps_total'], 9);
    assert.equal(perEpisode.metrics.experience_count, 3);
  });

  test('step_spans that do not fit the experience are errors naming it', () => {
    const run = (info: Record<string, unknown>, mask: number[]) =>
      torch.scope(() =>
        computeGigpoAdvantages({
          actionMask: torch.tensor([mask]),
          rewards: torch.tensor([1]),
          groupIds: ['t'],
          runIds: [0],
          infos: [info],
        }),
      );
    const spans = [
      [0, 2],
      [3, 4],
    ];
    assert.doesNotThrow(() => run({ step_spans: spans, env_state_hash: ['a', 'b'] }, [1, 1, 0, 1]));
    assert.throws(
      () => run({ step_spans: spans, env_state_hash: ['a'] }, [1, 1, 0, 1]),
      /experience 0 has 2 info\.step_spans, so info\.env_state_hash must list one per turn, got \["a"\]/,
    );
    assert.throws(
      () => run({ step_spans: spans }, [1, 1, 1, 1]),
      /response token 2 is trained \(action mask 1\) but lies in none/,
    );
    assert.throws(() => run({ step_spans: [[2, 1]] }, [0, 0, 0, 0]), /info\.step_spans\[0\] must be \[start, end\)/);
  });
});
