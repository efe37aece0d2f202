// A train step's batch: its rows (../algorithm/schemas.ts) as padded tensors on the trainer's device.
//
// Batch layout (verl's): prompts left-padded to P = the longest prompt, responses right-padded to R = the longest
// response, inputIds [B, P + R]. Response token j of a row sits at column P + j and is predicted at log-prob position
// P − 1 + j, so every per-token tensor of the algorithm is [B, R] = logProbs[:, P − 1 : P − 1 + R] (needs P ≥ 1):
//   actionMask [B, R]   1 on generated response tokens (experience.actionMask, else every response token)
//   oldLogprob [B, R]   rollout log-probs (experience.logprobs); rows without them get the current policy's; with
//                       algorithm.bypass_old_logprobs false every row gets the current policy's (no-grad, before the
//                       update), and algorithm.rollout_correction's truncated IS weights min(π_old/π_rollout, C) scale
//                       each token's advantage (with bypass: min(sg(π_θ)/π_rollout, C), per micro-batch); the
//                       mismatch metrics rollout_corr/* are logged either way (../algorithm/rollout-correction.ts)
//   advantages [B, R]   experience.advantages, or computed by the step (compute_advantage_in_trainer, or missing:
//                       ./loss-inputs.ts)
//   rewards [B], tokenLevelRewards [B, R] (the reward on the last generated token unless given), refLogprob [B, R]
//   temperatures [B]    the temperature each row's log-probs are taken at: experience.temperature (its sampling
//                       temperature), 1 for rows that were not sampled (SFT/DPO/expert data)
// MIX/CHORD expert rows (info.isExpert) get no advantages, rewards or teacher log-probs (zeros): they take the SFT part
// of the loss.
//
// Rows with equal prompts share their prompt's forward (forwardBackward's shared-prefix packing): rowPromptGroups finds
// them from the experiences on the host, so no micro-batch reads its ids back from the device. With
// trainer.use_remove_padding the forwards run the rows packed end to end without pads (../../model/packed-rows.ts),
// from each row's real lengths (microPackedRows); the per-token results come back in this layout.
import { type RowPacking, rowPacking } from '../../model/packed-rows.js';
import { computedPositions, groupsByKey, type PromptGroups, promptGroups } from '../../model/training.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { type Experience, validateExperience } from '../experience.js';

/** Padded tensors of a batch of rows (see the header for the layout). */
export interface TrainBatch {
  rows: Experience[];
  /** P: prompt columns (left-padded). */
  promptWidth: number;
  /** R: response columns (right-padded). */
  responseWidth: number;
  inputIds: Tensor;
  attentionMask: Tensor;
  actionMask: Tensor;
  /** [B] bool: rows whose experience carries logprobs. */
  hasLogprobs: Tensor;
  logprobs: Tensor;
  /** null unless every non-expert row carries advantages. */
  advantages: Tensor | null;
  returns: Tensor | null;
  /** null unless every non-expert row has a reward. */
  rewards: Tensor | null;
  tokenLevelRewards: Tensor | null;
  teacherLogprobs: Tensor | null;
  expertMask: Tensor;
  /** Per row: the temperature its log-probs are computed at (experience.temperature, else 1). */
  temperatures: number[];
}

const lastGenerated = (mask: readonly number[]): number => {
  for (let j = mask.length - 1; j >= 0; j--) if (mask[j] !== 0) return j;
  return -1;
};

/** The step's batch on `device` (default the CPU; the trainer's device otherwise). */
export function buildBatch(rows: readonly Experience[], padTokenId = 0, device = 'cpu'): TrainBatch {
  if (rows.length === 0) throw new Error('train step: the batch is empty');
  for (const e of rows) {
    const problems = validateExperience(e);
    if (problems.length > 0) throw new Error(`train step: experience '${e.eid}': ${problems.join('; ')}`);
    if (e.promptLength < 1) throw new Error(`train step: experience '${e.eid}' has no prompt token to predict its response from`);
    if (e.tokens.length === e.promptLength) throw new Error(`train step: experience '${e.eid}' has an empty response`);
  }
  const B = rows.length;
  const P = Math.max(...rows.map((e) => e.promptLength));
  const R = Math.max(...rows.map((e) => e.tokens.length - e.promptLength));
  const L = P + R;
  const ids = new BigInt64Array(B * L).fill(BigInt(padTokenId));
  const attention = new BigInt64Array(B * L);
  const perToken = () => new Float32Array(B * R);
  const action = perToken();
  const logprobs = perToken();
  const advantages = perToken();
  const returns = perToken();
  const tokenRewards = perToken();
  const teacher = perToken();
  const rewards = new Float32Array(B);
  const usual = rows.filter((e) => e.info.isExpert !== true);
  const all = (has: (e: Experience) => boolean) => usual.length > 0 && usual.every(has);
  const haveAdvantages = all((e) => e.advantages !== undefined);
  const haveRewards = all((e) => e.reward !== undefined || e.tokenLevelReward !== undefined);
  const haveTeacher = all((e) => e.teacherLogprobs !== undefined);
  rows.forEach((e, b) => {
    const n = e.tokens.length - e.promptLength;
    const offset = P - e.promptLength;
    for (let i = 0; i < e.tokens.length; i++) {
      ids[b * L + offset + i] = BigInt(e.tokens[i] as number);
      attention[b * L + offset + i] = 1n;
    }
    const mask = e.actionMask ?? new Array<number>(n).fill(1);
    const expert = e.info.isExpert === true;
    for (let j = 0; j < n; j++) {
      const k = b * R + j;
      action[k] = mask[j] as number;
      logprobs[k] = e.logprobs?.[j] ?? 0;
      if (!expert) {
        advantages[k] = e.advantages?.[j] ?? 0;
        returns[k] = e.returns?.[j] ?? e.advantages?.[j] ?? 0;
        teacher[k] = e.teacherLogprobs?.[j] ?? 0;
        tokenRewards[k] = e.tokenLevelReward?.[j] ?? 0;
      }
    }
    const reward = expert ? 0 : (e.reward ?? e.tokenLevelReward?.reduce((a, x) => a + x, 0) ?? 0);
    rewards[b] = reward;
    if (!expert && e.tokenLevelReward === undefined) {
      const last = lastGenerated(mask);
      if (last >= 0) tokenRewards[b * R + last] = reward;
    }
  });
  const on = device === 'cpu' ? {} : { device };
  const f32 = (data: Float32Array, shape: number[]) => torch.tensor(data, { shape, ...on });
  return {
    rows: [...rows],
    promptWidth: P,
    responseWidth: R,
    inputIds: torch.tensor(ids, { shape: [B, L], ...on }),
    attentionMask: torch.tensor(attention, { shape: [B, L], ...on }),
    actionMask: f32(action, [B, R]),
    hasLogprobs: torch.tensor(
      rows.map((e) => e.logprobs !== undefined),
      { dtype: 'bool', ...on },
    ),
    logprobs: f32(logprobs, [B, R]),
    advantages: haveAdvantages ? f32(advantages, [B, R]) : null,
    returns: haveAdvantages ? f32(returns, [B, R]) : null,
    rewards: haveRewards ? f32(rewards, [B]) : null,
    tokenLevelRewards: haveRewards ? f32(tokenRewards, [B, R]) : null,
    teacherLogprobs: haveTeacher ? f32(teacher, [B, R]) : null,
    expertMask: torch.tensor(
      rows.map((e) => e.info.isExpert === true),
      { dtype: 'bool', ...on },
    ),
    temperatures: rows.map((e) => e.temperature ?? 1),
  };
}

/** The batch's tensors (null where the batch has none), to hold or free together. */
export function batchTensors(b: TrainBatch): (Tensor | null)[] {
  return [
    b.inputIds,
    b.attentionMask,
    b.actionMask,
    b.hasLogprobs,
    b.logprobs,
    b.advantages,
    b.returns,
    b.rewards,
    b.tokenLevelRewards,
    b.teacherLogprobs,
    b.expertMask,
  ];
}

/**
 * Each row's group by its prompt's first promptWidth − 1 padded columns (forwardBackward's shared-prefix packing), from
 * the experiences on the host: left-padded, a row's columns are fixed by its prompt length and its prompt but the last
 * token (the mask tells prompt lengths apart).
 */
export function rowPromptGroups(rows: readonly Experience[]): number[] {
  return groupsByKey(rows.map((e) => `${e.promptLength}:${e.tokens.slice(0, e.promptLength - 1).join(',')}`));
}

/**
 * trainer.use_remove_padding unset: rows are packed when that computes at most this share of the padded layout's
 * positions (computedPositions: shared prompts once; the same bar as that layout's own prompt sharing). Below it the
 * packed layout's gathers cost more than the pads they save (bench/README.md, bench:packing).
 */
export const PACK_AT_MOST = 0.8;

/**
 * Rows [start, start + n) packed without pads for forwards over them at `promptWidth` and `length` columns (the
 * batch's, or a micro-batch's own widths), made before the forwards are queued; null: padded. `removePadding`:
 * trainer.use_remove_padding (null: packed when that computes ≤ PACK_AT_MOST of the padded positions).
 */
export function microRowPacking(
  batch: TrainBatch,
  start: number,
  n: number,
  widths: { promptWidth: number; length: number },
  removePadding: boolean | null,
): RowPacking | null {
  if (removePadding === false) return null;
  const rows = batch.rows.slice(start, start + n);
  const rowGroup = rowPromptGroups(rows);
  const lengths = {
    promptLengths: rows.map((e) => e.promptLength),
    responseLengths: rows.map((e) => e.tokens.length - e.promptLength),
  };
  const { promptWidth, length } = widths;
  if (removePadding === null) {
    const firstOfGroup = rows.filter((_, b) => rowGroup.indexOf(rowGroup[b] as number) === b);
    const packed = firstOfGroup.reduce((a, e) => a + e.promptLength - 1, 0) + lengths.responseLengths.reduce((a, r) => a + r, 0);
    const padded = computedPositions(n, length, promptWidth, firstOfGroup.length).positions;
    if (packed > PACK_AT_MOST * padded) return null;
  }
  return rowPacking(lengths, rowGroup, promptWidth, length, batch.inputIds.device);
}

/** A micro-batch's PromptGroups (rows [start, start + n) of the batch), made before the forwards are queued. */
export function microPromptGroups(batch: TrainBatch, start: number, n: number): PromptGroups {
  return promptGroups(rowPromptGroups(batch.rows.slice(start, start + n)), batch.inputIds.device);
}
