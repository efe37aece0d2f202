// The harness of the multi-rank trainer tests (zero.test.ts: ZeRO-1, fsdp.test.ts: fully sharded; distributed.test.ts
// forks its ranks with it too): rank processes forked over a plan (a JSON file each, named by $SCENARIOS, with RANK
// and WORLD_SIZE), the toy batches they train on, and what a test compares against one process with.
//
//   const ranks = forkRanks(STRATEGY_RANK, plan, 2, work);
//   const [result, followed] = await Promise.all([ranks[0].next('result', 'error'), ranks[1].next('followed', 'error')]);
//   assert.ok(largestDifference(new Map(Object.entries(result.weights)), await weightsOf(oneProcess), 'sft') <= 1e-5);
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Experience } from '../../../../src/rft/experience.js';
import type { ShardedStateBytes, TrainerClient } from '../../../../src/rft/trainer/trainer.js';
import * as torch from '../../../../src/torch/index.js';
import { type ChildExit, forkChild } from '../../../helpers/forked-child.js';
import { BAD, GOOD, loadPolicy, PROMPTS, responseLogprobs } from '../toy.js';

/** What ./strategy-rank.ts reports (distributed-trainer-rank.ts reports more kinds and fields of its own). */
export interface RankMessage {
  type: string;
  scenario?: string;
  /** Rank 0's weights after the scenario's steps (a weight sync's). */
  weights?: Record<string, Float32Array>;
  /** A follower's steps. */
  steps?: number;
  /** optimizerStateElements(): AdamW state elements here, and the elements of the parameters it updates. */
  elements?: { local: number; parameters: number };
  /** shardedStateBytes() (null when the policy is not fully sharded). */
  bytes?: ShardedStateBytes | null;
  /** Rank 0: the checkpoint folder it saved and the weights folder it wrote (null when the scenario saves none). */
  checkpoint?: string | null;
  exported?: string | null;
  /** TrainerStart.checkpointBytesRead: the bytes of checkpoint files the rank read to resume. */
  resumeBytes?: number;
  /** TrainerStart.modelBytesRead: the bytes of its model folder a sharded rank read at start. */
  modelBytes?: number;
  message?: string;
}

export interface RankProcess<M extends { type: string }> {
  child: ReturnType<typeof forkChild<M>>['child'];
  exited: Promise<ChildExit>;
  /** The next message of one of these types (in order of arrival); rejects with the rank's stderr if it exits first. */
  next(...types: M['type'][]): Promise<M>;
}

/**
 * Forks `worldSize` processes running `script`, rank r with RANK=r, WORLD_SIZE and SCENARIOS (the plan, written to
 * `<work>/plan-<label>-<r>.json`) and `env`.
 */
export function forkRanks<M extends { type: string } = RankMessage>(
  script: string,
  plan: unknown,
  worldSize: number,
  work: string,
  options: { env?: Record<string, string>; label?: string } = {},
): RankProcess<M>[] {
  const label = options.label ?? `${worldSize}`;
  return Array.from({ length: worldSize }, (_, rank) => {
    const planFile = join(work, `plan-${label}-${rank}.json`);
    writeFileSync(planFile, JSON.stringify(plan));
    const env = { ...process.env, ...options.env, RANK: String(rank), WORLD_SIZE: String(worldSize), SCENARIOS: planFile };
    const forked = forkChild<M>(script, { env, label: `rank ${rank}`, serialization: 'advanced' });
    return {
      child: forked.child,
      exited: forked.exited,
      next: (...types) => forked.next((m) => types.includes(m.type), types.join('/')),
    };
  });
}

/** `count` steps' batches: step k's is the rows rotated by 3k, so each step's micro-batches hold different rows. */
export function rotatedSteps(rows: readonly Experience[], count: number): Experience[][] {
  return Array.from({ length: count }, (_, k) => [...rows.slice((3 * k) % rows.length), ...rows.slice(0, (3 * k) % rows.length)]);
}

/**
 * One or two rollouts per prompt with responses of 1 to 3 tokens and their log-probs under the model in `modelDir`.
 * Responses longer than one token matter: with one token every row of a group predicts from the same context, so the
 * group-centred advantages cancel the LM head's gradient exactly and only rounding noise is left, which Adam's
 * normalised steps turn into updates of about lr whatever the implementation.
 */
export function groupRollouts(modelDir: string): Experience[] {
  const model = loadPolicy(modelDir);
  try {
    return PROMPTS.flatMap((prompt, task) =>
      [[GOOD, 7 + task, 20 + task], [BAD, 30 + task].slice(0, 1 + (task % 2))].map((response, run) => ({
        eid: `t${task}-r${run}`,
        tokens: [...prompt, ...response],
        promptLength: prompt.length,
        logprobs: responseLogprobs(model, prompt, response),
        reward: run === 0 ? 1 : task / 8,
        info: { taskId: `t${task}`, runId: run },
      })),
    );
  } finally {
    model.dispose();
  }
}

/** A trainer's weights as a weight sync hands them over (merged with LoRA), as float arrays by name. */
export async function weightsOf(trainer: TrainerClient): Promise<Map<string, Float32Array>> {
  const weights = await trainer.beginSync();
  const out = new Map([...weights].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
  await trainer.endSync();
  return out;
}

/** The largest difference between two sets of named float arrays, which must have the same names and sizes. */
export function largestDifference(
  a: ReadonlyMap<string, Float32Array>,
  b: ReadonlyMap<string, Float32Array>,
  what: string,
): number {
  if ([...a.keys()].sort().join() !== [...b.keys()].sort().join())
    throw new Error(`${what}: different names: [${[...a.keys()].sort()}] and [${[...b.keys()].sort()}]`);
  let largest = 0;
  for (const [name, x] of a) {
    // The key bias's gradient is 0 in exact arithmetic (it adds q·b_k to every score of a row, which softmax ignores);
    // what backward computes is rounding noise, which Adam's first steps turn into steps of about lr: no measure of
    // two runs being the same.
    if (name.endsWith('self_attn.k_proj.bias')) continue;
    const y = b.get(name) as Float32Array;
    if (x.length !== y.length) throw new Error(`${what}: ${name} has ${x.length} and ${y.length} elements`);
    for (let i = 0; i < x.length; i++) largest = Math.max(largest, Math.abs((x[i] as number) - (y[i] as number)));
  }
  return largest;
}

/** A .safetensors file's tensors as float arrays by name. */
export function safetensorsFile(file: string): Map<string, Float32Array> {
  const tensors = torch.loadSafetensors(file);
  try {
    return new Map([...tensors].map(([name, t]) => [name, t.float().toTypedArray() as Float32Array]));
  } finally {
    for (const t of tensors.values()) t.dispose();
  }
}
