// A mixture-of-experts policy under data parallelism (2 ranks, Gloo on CPU), with router replay on: the ranks (forked
// ./helpers/distributed-trainer-rank.ts, as in ./distributed.test.ts) take 3 GRPO steps on the same global batches as
// one process and must end with the same parameters (float32, within 1e-5) and report the same metrics, the router's
// load-balancing loss among them.
// The rollouts come from the rollout engine recording each token's experts (qwen3-moe fixture: sparse layers 0 and 2,
// 8 experts, top-2), so every micro-batch's forward routes through the recorded experts. With micro-batches of 3 rows
// the ranks hold different rows, so each rank's backward reaches a different subset of experts: an expert no token of
// a rank was routed to has no gradient there, and the gradient sum must still equal one process's.
//   - full fine-tuning (every expert's, the router's and attention's weights);
//   - LoRA on the experts' projections (target_modules gate_proj, up_proj, down_proj), at lr 1e-2: at 5e-2 one
//     process alone already ends 3.6e-5 apart from itself when only its micro-batching changes (3 rows vs all 8, the
//     same sums in another order; Adam amplifies the rounding), so 1e-5 would measure that, not the ranks.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, test } from 'node:test';
import { freePort } from '../../../src/cli/launch.js';
import { RolloutEngine } from '../../../src/engine/index.js';
import { CausalLM } from '../../../src/model/index.js';
import type { Experience } from '../../../src/rft/experience.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import { buildExperience } from '../../../src/rft/workflow/model-handle.js';
import { type ChildExit, forkChild, killForkedChildren } from '../../helpers/forked-child.js';
import { fixturesDir } from '../../model/helpers/fixtures.js';
import { type RankPlan, type Scenario, scenarioInit } from './helpers/distributed-scenarios.js';

const HELPER = fileURLToPath(new URL('./helpers/distributed-trainer-rank.ts', import.meta.url));
const modelDir = `${fixturesDir}qwen3-moe`;
const PROMPTS = [
  [3, 17, 5, 42],
  [9, 60, 11],
  [21, 4, 88, 90, 7],
  [50, 33],
];

interface Result {
  type: 'result' | 'followed' | 'error';
  scenario?: string;
  weights?: Record<string, Float32Array>;
  metrics?: Record<string, number>[];
  steps?: number;
  message?: string;
}

/** A forked rank: its next message of a type (or its error), and its exit. */
interface RankProcess {
  next(type: Result['type']): Promise<Result>;
  exited: Promise<ChildExit>;
}

let work: string;
let rollouts: Experience[];
before(async () => {
  work = mkdtempSync(join(tmpdir(), 'trinity-dp-moe-'));
  const engine = new RolloutEngine(CausalLM.load(modelDir, { layout: 'inference' }), {
    recordRoutedExperts: true,
    ownsModel: true,
  });
  try {
    rollouts = [];
    for (const [task, promptIds] of PROMPTS.entries()) {
      const { completions } = await engine.generate({
        promptIds,
        n: 2,
        maxTokens: 3,
        ignoreEos: true,
        temperature: 1,
        seed: task,
      });
      for (const [run, c] of completions.entries())
        rollouts.push(
          buildExperience(c, {
            promptIds,
            modelVersion: 0,
            temperature: 1,
            eid: `t${task}-r${run}`,
            reward: run === 0 ? 1 : task / 8,
            taskId: `t${task}`,
            runId: run,
          }),
        );
    }
  } finally {
    await engine.close();
  }
  assert.ok(rollouts.every((e) => e.routedExperts !== undefined));
});
after(() => {
  killForkedChildren();
  rmSync(work, { recursive: true, force: true });
});

/** Step k's batch: the rows rotated by 3k, so each step's micro-batches hold different rows. */
const threeSteps = (rows: Experience[]) =>
  [0, 1, 2].map((k) => [...rows.slice((3 * k) % rows.length), ...rows.slice(0, (3 * k) % rows.length)]);

function scenarios(): Scenario[] {
  const algorithm = { algorithm_type: 'grpo', enable_router_replay: true, optimizer: { lr: 1e-2 } };
  return [
    { name: 'moe-replay', algorithm, lora: null, microBatchSize: 3, batches: threeSteps(rollouts) },
    {
      name: 'moe-replay-lora-experts',
      algorithm: { ...algorithm, optimizer: { lr: 1e-2 } },
      lora: { rank: 4, alpha: 8, dropout: 0, targetModules: ['gate_proj', 'up_proj', 'down_proj'] },
      microBatchSize: 3,
      batches: threeSteps(rollouts),
    },
  ];
}

async function oneProcess(
  scenario: Scenario,
): Promise<{ weights: Map<string, Float32Array>; metrics: Record<string, number>[] }> {
  const { trainer } = await TrainerClient.start(scenarioInit(scenario, modelDir, join(work, `${scenario.name}-single`)));
  try {
    const metrics: Record<string, number>[] = [];
    for (const batch of scenario.batches) metrics.push(await trainer.step(batch));
    const weights = await trainer.beginSync();
    const out = new Map([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
    await trainer.endSync();
    return { weights: out, metrics };
  } finally {
    await trainer.close();
  }
}

test('MoE with router replay (full and LoRA on experts): 2 ranks end 3 GRPO steps with the parameters and metrics of one process', async () => {
  const all = scenarios();
  const plan: RankPlan = {
    modelDir,
    jobDir: work,
    scenarios: await Promise.all(all.map(async (s) => ({ ...s, port: await freePort() }))),
  };
  const ranks = [0, 1].map((rank): RankProcess => {
    const planFile = join(work, `plan-${rank}.json`);
    writeFileSync(planFile, JSON.stringify(plan));
    const env = { ...process.env, RANK: String(rank), WORLD_SIZE: '2', SCENARIOS: planFile, SCENARIO_KIND: 'equal' };
    const forked = forkChild<Result>(HELPER, { env, label: `rank ${rank}`, serialization: 'advanced' });
    return { exited: forked.exited, next: (type) => forked.next((m) => m.type === type || m.type === 'error', type) };
  }) as [RankProcess, RankProcess];
  const initial = CausalLM.load(modelDir);
  const start = new Map([...initial.parameters()].map(([n, t]) => [n, t.toTypedArray() as Float32Array]));
  initial.dispose();
  for (const scenario of all) {
    const [result, followed] = await Promise.all([ranks[0].next('result'), ranks[1].next('followed')]);
    assert.equal(result.type, 'result', `${scenario.name}, rank 0: ${result.message}`);
    assert.equal(followed.type, 'followed', `${scenario.name}, rank 1: ${followed.message}`);
    assert.equal(followed.steps, 3);
    const single = await oneProcess(scenario);
    const weights = result.weights ?? {};
    assert.deepEqual(Object.keys(weights).sort(), [...single.weights.keys()].sort());
    let largest = 0;
    let moved = 0;
    let expertsMoved = 0;
    for (const [name, expected] of single.weights) {
      if (name.endsWith('self_attn.k_proj.bias')) continue; // no gradient in exact arithmetic (./distributed.test.ts)
      const got = weights[name] as Float32Array;
      const before = start.get(name) as Float32Array;
      // The router's row of an expert that no token of a step chose gets no gradient in exact arithmetic either: with
      // norm_topk_prob, w_j = p_j / sum over chosen p = exp(l_j) / sum over chosen exp(l), the softmax's denominator
      // cancels. Backward leaves rounding noise there, which Adam turns into steps of its own in each run; such rows
      // (moved less than 1e-3 by one process) must stay within that noise, the others equal one process's.
      const rowLength = name.endsWith('.mlp.gate.weight') ? before.length / 8 : expected.length;
      let change = 0;
      for (let row = 0; row < expected.length / rowLength; row++) {
        let rowChange = 0;
        let rowDiff = 0;
        for (let i = row * rowLength; i < (row + 1) * rowLength; i++) {
          rowDiff = Math.max(rowDiff, Math.abs((got[i] as number) - (expected[i] as number)));
          rowChange = Math.max(rowChange, Math.abs((expected[i] as number) - (before[i] as number)));
        }
        if (rowLength === expected.length || rowChange > 1e-3) largest = Math.max(largest, rowDiff);
        else assert.ok(rowDiff < 1e-3, `${scenario.name}: ${name} row ${row} (no gradient) moved by ${rowDiff}`);
        change = Math.max(change, rowChange);
      }
      moved = Math.max(moved, change);
      if (name.includes('.mlp.experts.') && change > 1e-4) expertsMoved++;
    }
    assert.ok(moved > 1e-3, `${scenario.name}: training barely moved the weights (${moved})`);
    assert.ok(expertsMoved > 8, `${scenario.name}: only ${expertsMoved} expert weights moved`);
    assert.ok(largest <= 1e-5, `${scenario.name}: 2 ranks and 1 process differ by ${largest} after 3 steps`);
    for (const [k, expected] of single.metrics.entries()) {
      const got: Record<string, number> = result.metrics?.[k] ?? {};
      assert.deepEqual(Object.keys(got).sort(), Object.keys(expected).sort(), `${scenario.name} step ${k + 1}: metric names`);
      for (const [key, value] of Object.entries(expected))
        assert.ok(
          Math.abs(value - (got[key] as number)) <= 1e-5 * Math.max(1, Math.abs(value)),
          `${scenario.name} step ${k + 1}: ${key} is ${got[key]}, one process ${value}`,
        );
    }
    assert.ok(
      Object.keys(single.metrics[0] ?? {}).some((key) => key.includes('aux')),
      `the router's aux loss is among the metrics: ${Object.keys(single.metrics[0] ?? {}).join(', ')}`,
    );
  }
  const exits = await Promise.all(ranks.map((r) => r.exited));
  assert.deepEqual(
    exits.map((e) => e.code),
    [0, 0],
  );
});
