// Data-parallel training (TrainerClient with init.distributed, Gloo on CPU): 2 ranks, each a forked process running
// ./helpers/distributed-trainer-rank.ts, take 3 steps on the same global batches as one process (TrainerClient in
// this process) and must end with the same parameters (float32, within 1e-5) and report the same metrics:
//   - SFT with micro_batch_size 1 (4 micro-batches, 2 per rank: gradient accumulation on each rank);
//   - GRPO with micro_batch_size unset (one process: 1 micro-batch of 8 rows; 2 ranks: one of 4 each);
//   - GRPO with LoRA and dropout 0.1, micro_batch_size 3 (micro-batches of 3, 3, 2 rows: rank 0 runs the first and
//     the last, rank 1 the middle one, so each rank must skip the dropout draws of the other's micro-batches);
//   - PPO with a critic and an adaptive KL penalty, micro_batch_size 3 (critic gradients summed too);
//   - GRPO with LoRA and PPO with a critic, rows packed without pads (trainer.use_remove_padding) on the 2 ranks,
//     against one process running them padded.
// The ranks sum the policy's gradients while their last micro-batch's backward runs (autograd hooks fill buckets of
// 4 KiB, several for the tiny model, issued from inside the backward): the sums, and so the parameters, must not
// change.
// A follower's save(), saveWeights(), beginSync() and step() are refused naming its rank, and rank 0's follow(). A
// follower whose rank 0 is SIGKILLed rejects with a DistributedError naming the collective it waited in, and one
// whose rank 0 sends nothing within commandTimeoutMs (1 s; the only timeout that fires here, and it must) with one
// that says it timed out. The rank processes report over IPC.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, test } from 'node:test';
import { freePort } from '../../../src/cli/launch.js';
import { TrainerClient } from '../../../src/rft/trainer/trainer.js';
import { killForkedChildren } from '../../helpers/forked-child.js';
import { type RankPlan, type Scenario, scenarioInit } from './helpers/distributed-scenarios.js';
import { forkRanks, groupRollouts, rotatedSteps } from './helpers/rank-harness.js';
import { expertData, loadPolicy, tinyModelDir } from './toy.js';

const HELPER = fileURLToPath(new URL('./helpers/distributed-trainer-rank.ts', import.meta.url));

interface Message {
  type: 'result' | 'followed' | 'ready' | 'following' | 'error';
  scenario?: string;
  weights?: Record<string, Float32Array>;
  metrics?: Record<string, number>[];
  steps?: number;
  /** What rank 1's save, saveWeights, beginSync and step were refused with. */
  refused?: Record<string, string>;
  followError?: string;
  timedOut?: boolean;
  name?: string;
  message?: string;
  isDistributedError?: boolean;
  collective?: string;
  rank?: number;
}

type RankProcess = ReturnType<typeof forkRanks<Message>>[number];

let toy: { dir: string; remove: () => void };
let work: string;
before(() => {
  toy = tinyModelDir();
  work = mkdtempSync(join(tmpdir(), 'trinity-dp-'));
});
after(() => {
  killForkedChildren();
  toy.remove();
  rmSync(work, { recursive: true, force: true });
});

/** Ranks 0 and 1 of ./helpers/distributed-trainer-rank.ts over `plan`, in scenario kind `kind` (see its header). */
const startRanks = (plan: RankPlan, kind = 'equal') =>
  forkRanks<Message>(HELPER, plan, 2, work, { env: { SCENARIO_KIND: kind }, label: kind }) as [RankProcess, RankProcess];

function scenarios(): Scenario[] {
  const grpoRows = groupRollouts(toy.dir);
  const sgd = { lr: 1e-2 };
  return [
    {
      name: 'sft',
      algorithm: { algorithm_type: 'sft', optimizer: sgd },
      lora: null,
      microBatchSize: 1,
      batches: rotatedSteps(expertData(), 3),
    },
    {
      name: 'grpo',
      algorithm: { algorithm_type: 'grpo', optimizer: sgd },
      lora: null,
      microBatchSize: null,
      batches: rotatedSteps(grpoRows, 3),
    },
    {
      name: 'grpo-lora',
      algorithm: { algorithm_type: 'grpo', optimizer: { lr: 5e-2 } },
      lora: { rank: 4, alpha: 8, dropout: 0.1, targetModules: ['q_proj', 'v_proj', 'down_proj'] },
      microBatchSize: 3,
      batches: rotatedSteps(grpoRows, 3),
    },
    {
      name: 'ppo-critic',
      algorithm: {
        algorithm_type: 'ppo',
        kl_penalty_fn: 'k1',
        kl_penalty_fn_args: { adaptive: true, kl_coef: 0.05, target_kl: 1e-4, horizon: 20 },
        optimizer: { lr: 1e-2, lr_scheduler_type: 'cosine', lr_warmup_steps: 1 },
      },
      lora: null,
      microBatchSize: 3,
      batches: rotatedSteps(grpoRows, 3),
    },
    {
      // token-budget micro-batches (use_dynamic_bsz): 5 positions hold one row each, cut to its own response width
      name: 'ppo-critic-tokens',
      algorithm: { algorithm_type: 'ppo', optimizer: { lr: 1e-2 } },
      lora: null,
      microBatchSize: null,
      microBatchTokens: 5,
      batches: rotatedSteps(grpoRows, 3),
    },
    {
      name: 'grpo-lora-packed',
      algorithm: { algorithm_type: 'grpo', optimizer: { lr: 5e-2 } },
      lora: { rank: 4, alpha: 8, dropout: 0, targetModules: ['q_proj', 'v_proj', 'down_proj'] },
      microBatchSize: 3,
      removePadding: true,
      batches: rotatedSteps(grpoRows, 3),
    },
    {
      name: 'ppo-critic-packed',
      algorithm: { algorithm_type: 'ppo', optimizer: { lr: 1e-2 } },
      lora: null,
      microBatchSize: 3,
      removePadding: true,
      batches: rotatedSteps(grpoRows, 3),
    },
  ];
}

/** One process on the same batches: the reference. */
async function oneProcess(
  scenario: Scenario,
): Promise<{ weights: Map<string, Float32Array>; metrics: Record<string, number>[] }> {
  const { trainer } = await TrainerClient.start(scenarioInit(scenario, toy.dir, join(work, `${scenario.name}-single`)));
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

/** Rank 0 joins and then stops (SIGKILLed at once for 'kill', only after the follower failed for 'hang'). */
async function followerFailure(kind: 'kill' | 'hang'): Promise<Message> {
  const scenario = { ...(scenarios()[1] as Scenario), name: kind, port: await freePort() };
  const plan: RankPlan = { modelDir: toy.dir, jobDir: work, scenarios: [scenario] };
  const [first, second] = startRanks(plan, kind);
  const [ready] = await Promise.all([first.next('ready', 'error'), second.next('following', 'error')]);
  assert.equal(ready.type, 'ready', ready.message);
  if (kind === 'kill') first.child.kill('SIGKILL');
  const failure = await second.next('error');
  first.child.kill('SIGKILL');
  assert.equal(failure.isDistributedError, true, `${failure.name}: ${failure.message}`);
  assert.equal(failure.name, 'DistributedError');
  assert.equal(failure.collective, 'broadcast', failure.message);
  assert.equal(failure.rank, 1);
  assert.match(failure.message ?? '', /broadcast on rank 1 of 2/);
  assert.equal((await second.exited).code, 0);
  return failure;
}

describe('data-parallel trainer (2 ranks, Gloo)', () => {
  test('SFT, GRPO, GRPO with LoRA dropout, PPO with a critic (by rows, by a token budget, packed): 2 ranks end 3 steps with the parameters of one process', async () => {
    const all = scenarios();
    const plan: RankPlan = {
      modelDir: toy.dir,
      jobDir: work,
      scenarios: await Promise.all(all.map(async (s) => ({ ...s, port: await freePort() }))),
    };
    const ranks = startRanks(plan);
    for (const scenario of all) {
      const [result, followed] = await Promise.all([ranks[0]?.next('result', 'error'), ranks[1]?.next('followed', 'error')]);
      assert.equal(result?.type, 'result', `${scenario.name}, rank 0: ${result?.message}`);
      assert.equal(followed?.type, 'followed', `${scenario.name}, rank 1: ${followed?.message}`);
      assert.equal(result?.scenario, scenario.name);
      assert.equal(followed?.steps, 3, `${scenario.name}: rank 1 followed ${followed?.steps} steps`);
      for (const operation of ['save', 'saveWeights', 'beginSync'])
        assert.match(followed?.refused?.[operation] ?? '', new RegExp(`trainer rank 1 of 2: ${operation} is a rank-0 operation`));
      assert.match(
        followed?.refused?.step ?? '',
        /trainer rank 1 of 2: step\(\) is driven on rank 0; the other ranks call follow\(\)/,
      );
      assert.match(result?.followError ?? '', /follow\(\): rank 0 is driven by step\(\)/);

      const single = await oneProcess({ ...scenario, removePadding: false });
      const weights = result?.weights ?? {};
      assert.deepEqual(Object.keys(weights).sort(), [...single.weights.keys()].sort());
      let largest = 0;
      let moved = 0;
      const initial = loadPolicy(toy.dir);
      const start = new Map([...initial.parameters()].map(([n, t]) => [n, t.toTypedArray() as Float32Array]));
      initial.dispose();
      for (const [name, expected] of single.weights) {
        // The key bias's gradient is 0 in exact arithmetic (it adds q·b_k to every score of a row, which softmax
        // ignores); what backward computes is rounding noise, and Adam's first steps (m / (√v + ε)) turn noise into
        // steps of about lr. Both runs move it by their own noise, so it is no measure of the two being the same.
        if (name.endsWith('self_attn.k_proj.bias')) continue;
        const got = weights[name] as Float32Array;
        const before = start.get(name) as Float32Array;
        for (let i = 0; i < expected.length; i++) {
          largest = Math.max(largest, Math.abs((got[i] as number) - (expected[i] as number)));
          moved = Math.max(moved, Math.abs((expected[i] as number) - (before[i] as number)));
        }
      }
      assert.ok(
        moved > 1e-3,
        `${scenario.name}: training barely moved the weights (${moved}), the comparison would prove nothing`,
      );
      assert.ok(largest <= 1e-5, `${scenario.name}: 2 ranks and 1 process differ by ${largest} after 3 steps`);

      // rank 0 reports what one process would: the same metric names and values
      for (const [k, expected] of single.metrics.entries()) {
        const got: Record<string, number> = result?.metrics?.[k] ?? {};
        assert.deepEqual(Object.keys(got).sort(), Object.keys(expected).sort(), `${scenario.name} step ${k + 1}: metric names`);
        for (const [key, value] of Object.entries(expected)) {
          const diff = Math.abs(value - (got[key] as number));
          assert.ok(
            diff <= 1e-5 * Math.max(1, Math.abs(value)),
            `${scenario.name} step ${k + 1}: ${key} is ${got[key]}, one process ${value}`,
          );
        }
      }
    }
    const exits = await Promise.all(ranks.map((r) => r.exited));
    assert.deepEqual(
      exits.map((e) => e.code),
      [0, 0],
    );
  });

  test('a follower whose rank 0 is SIGKILLed rejects with a DistributedError naming the collective', async () => {
    const failure = await followerFailure('kill');
    assert.equal(failure.timedOut, false, failure.message);
  });

  test('a follower whose rank 0 sends no command within commandTimeoutMs rejects with a DistributedError', async () => {
    const failure = await followerFailure('hang');
    assert.equal(failure.timedOut, true, failure.message);
    assert.match(failure.message ?? '', /timed out after 1000 ms/);
  });
});
