// GiGPO's anchor states from the environment workflows (src/rft/workflow/env/environment.ts): in experience_mode step
// every step's experience carries info.env_state_hash (sha256 of the state it acted from) and info.step_reward, so a
// GiGPO step over FrozenLake episodes finds anchor groups, with step-level advantages checked by hand.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { before, describe, test } from 'node:test';
import { chat } from '../../../../src/engine/index.js';
import { initModel } from '../../../../src/model/index.js';
import { computeGigpoAdvantages, missingStateKeyWarning } from '../../../../src/rft/algorithm/advantage/index.js';
import { NO_AUXILIARY_MODELS } from '../../../../src/rft/auxiliary/index.js';
import type { Experience } from '../../../../src/rft/experience.js';
import type { Task } from '../../../../src/rft/task.js';
import {
  attemptModelHandle,
  EngineModelHandle,
  environmentStateHash,
  environmentWorkflow,
  frozenLakeWorkflow,
  type RolloutBackend,
  sokobanWorkflow,
  type WorkflowContext,
  type WorkflowSpec,
} from '../../../../src/rft/workflow/index.js';
import { Tokenizer } from '../../../../src/tokenizer/index.js';
import * as torch from '../../../../src/torch/index.js';
import { ScriptedBackend } from '../scripted-backend.js';

let tokenizer: Tokenizer;

before(() => {
  torch.setNumThreads(1);
  const dir = join(mkdtempSync(join(tmpdir(), 'env-states-')), 'model');
  initModel(dir, { hiddenSize: 32, numLayers: 1, numHeads: 2, maxPositionEmbeddings: 512, seed: 3 });
  tokenizer = Tokenizer.load(dir);
});

/** The scripted backend with chat(): each reply is `policy(last user turn)`. */
function scriptedChat(tok: Tokenizer, policy: (observation: string) => string): RolloutBackend {
  const lastUserTurn = (prompt: string) => prompt.slice(prompt.lastIndexOf('<|im_start|>user\n') + 17).split('<|im_end|>')[0];
  const scripted = new ScriptedBackend(tok, (prompt) => policy(lastUserTurn(prompt) ?? ''));
  const backend: RolloutBackend = {
    tokenizer: tok,
    generate: (request) => scripted.generate(request),
    chat: (messages, options) => chat({ tokenizer: tok, generate: backend.generate }, messages, options),
  };
  return backend;
}

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
async function play(workflow: WorkflowSpec, task: Task, runId: number, replies: readonly string[]): Promise<Experience[]> {
  let turn = 0;
  const backend = scriptedChat(tokenizer, () => replies[turn++] ?? 'Up');
  const signal = new AbortController().signal;
  const context: WorkflowContext = {
    task,
    model: attemptModelHandle(new EngineModelHandle(backend), { signal, taskId: task.id }),
    repeatTimes: 1,
    runIdBase: runId,
    seed: 5,
    signal,
    isEval: false,
    auxiliaryModels: NO_AUXILIARY_MODELS,
  };
  return workflow.run(context);
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
    const { advantages, metrics } = torch.scope(() => {
      const result = computeGigpoAdvantages(
        {
          actionMask: torch.ones([batch.length, 1]),
          rewards: torch.tensor(batch.map((e) => e.reward as number)),
          groupIds: batch.map((e) => e.info.taskId as string),
          runIds: batch.map((e) => e.info.runId as number),
          infos: batch.map((e) => e.info),
        },
        { omega: 1, gamma: 1, fnorm: 'none' },
      );
      return { advantages: (result.advantages.toArray() as number[][]).map((row) => row[0] as number), metrics: result.metrics };
    });
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
