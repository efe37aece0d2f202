// One trainer step: a batch of experiences → one optimizer update of the policy (and of the critic, for PPO).
//
//   experiences ──rows──▶ padded batch ──▶ [reference log-probs] ──▶ [KL penalty in reward] ──▶ [advantages]
//     ──▶ micro-batches: forwardBackward(policy loss + KL loss + entropy loss), gradients accumulated
//     ──▶ clip grad norm ──▶ optimizer step ──▶ [critic: clipped value loss, its own step] ──▶ metrics
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
//   advantages [B, R]   experience.advantages, or computed here (compute_advantage_in_trainer, or missing)
//   rewards [B], tokenLevelRewards [B, R] (the reward on the last generated token unless given), refLogprob [B, R]
//   temperatures [B]    the temperature each row's log-probs are taken at: experience.temperature (its sampling
//                       temperature), 1 for rows that were not sampled (SFT/DPO/expert data)
// Schemas: experience (as above); sft (NLL on the response tokens, no advantages); dpo (each experience holds a
// prompt and `chosen`/`rejected` responses: two rows, chosen first). MIX/CHORD expert rows (info.isExpert) get no
// advantages and take the SFT part of the loss.
//
// Gradient accumulation: each micro-batch's loss is weighted by its share of the batch in the loss's aggregation
// unit, as the policy loss declares it (../algorithm/policy-loss/types.ts: tokens for token-mean, rows for
// seq-mean-*, pairs for DPO, 1 for seq-mean-token-sum-norm whose normaliser R is already global; a mix loss weighs
// its on-policy and expert terms by their own counts), so the accumulated gradient equals the whole-batch gradient.
// The KL, entropy and critic terms are weighted the same way by their loss_agg_mode.
//
// No upload or read-back inside the micro-batch loop (on a GPU each waits for everything queued before it, so the next
// micro-batch could not be queued while this one runs): every micro-batch's token counts are read in one transfer
// before the loop (BatchCounts), the rows sharing a prompt are grouped from the experiences and uploaded before it
// (rowPromptGroups), and the modules' metrics and the losses stay scalar tensors until the step reads them all at its
// end (./step-metrics.ts).
//
// LoRA dropout (PEFT's lora_dropout) acts in the policy update's forward and backward only: the adapters are in
// training mode there and in eval mode everywhere else, so the log-probs recomputed for rows without rollout
// log-probs (PPO's old log-probs), the reference's (adapters disabled) and the weights synced to the rollout engine
// (merged) are the deterministic policy's, as the rollout's are. Each micro-batch draws its masks from the adapters'
// seeded stream; activation checkpointing replays them (forwardBackward's `random`).
//
// Data parallelism (runDistributed, N ranks with the same global batch; the same update as run() in one process):
//   every rank builds the whole padded batch; reference log-probs, recomputed old log-probs and critic values are
//   computed by each rank for its own contiguous share of rows (ownRows) and summed across ranks (zeros elsewhere);
//   advantages, group statistics, the micro-batch plan and every micro-batch's weights are computed by every rank
//   over the whole batch; micro-batch i runs forward/backward on rank i mod N (micro_batch_size unset: N micro-
//   batches of ⌈B/N⌉ rows); gradients are summed across ranks (bucketed), then every rank clips the global norm and
//   applies the same optimizer step, so parameters stay identical. Metrics that micro-batches add up (loss, pg_loss,
//   policy/*, kl, entropy, critic/*) are summed across ranks; the rest every rank computes alike.
import type { LoraModel } from '../../model/lora.js';
import { forwardBackward, groupsByKey, type PromptGroups, promptGroups, tokenLogProbs } from '../../model/training.js';
import { CausalLM } from '../../model/transformer.js';
import * as torch from '../../torch/index.js';
import type { Optimizer, Tensor } from '../../torch/index.js';
import { ADVANTAGE_FN, advantageNeedsEntropy, advantageNeedsNecs } from '../algorithm/advantage/index.js';
import type { AdvantageInput } from '../algorithm/advantage/types.js';
import { type Critic, clippedValueLoss } from '../algorithm/critic.js';
import { createEntropyLossFn } from '../algorithm/entropy.js';
import { createKlFn, type KlFn } from '../algorithm/kl.js';
import { aggregationUnit, isLossAggMode, type LossAggMode } from '../algorithm/loss-agg.js';
import { POLICY_LOSS_FN, policyLossAccumulation, policyLossModule } from '../algorithm/policy-loss/index.js';
import { resolveArgs } from '../algorithm/registry.js';
import type { LossAccumulation, LossTerm, PolicyLossInput } from '../algorithm/policy-loss/types.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { computeRolloutCorrection } from '../algorithm/rollout-correction.js';
import { expertRows } from '../algorithm/utils.js';
import { type Experience, validateExperience } from '../experience.js';
import type { MasterWeights } from './master-weights.js';
import { StepMetrics } from './step-metrics.js';

// --- reference policies ------------------------------------------------------------------------------------------

export interface LogProbOptions {
  chunkSize?: number;
  /** One temperature, or one per row. */
  temperature?: number | readonly number[];
  /** Only the response columns (from promptWidth − 1) are needed: rows with equal prompts run them once. */
  promptWidth?: number;
  /** Which rows have equal prompts, known ahead (see TokenLogProbsOptions.promptGroups). */
  promptGroups?: PromptGroups;
}

/** Log-probs of a fixed reference policy: [B, L] ids → [B, L − 1], no gradient. */
export interface ReferencePolicy {
  logProbs(inputIds: Tensor, attentionMask: Tensor, options?: LogProbOptions): Tensor;
}

/** A frozen model as the reference. */
export function modelReference(model: CausalLM): ReferencePolicy {
  return {
    logProbs: (inputIds, attentionMask, options = {}) =>
      torch.noGrad(() => tokenLogProbs(model, inputIds, { ...options, attentionMask }).logProbs),
  };
}

/** A frozen copy of `model`'s current weights as the reference (owns the copy: dispose() it). */
export function frozenCopyReference(model: CausalLM): ReferencePolicy & { readonly model: CausalLM; dispose(): void } {
  const weights = torch.noGrad(() => new Map([...model.parameters()].map(([name, t]) => [name, torch.keep(t.detach().clone())])));
  const copy = new CausalLM(model.config, weights);
  return { ...modelReference(copy), model: copy, dispose: () => copy.dispose() };
}

/** With LoRA the reference is the same model with its adapters disabled: no second copy of the weights. */
export function loraReference(lora: LoraModel): ReferencePolicy {
  return {
    logProbs: (inputIds, attentionMask, options = {}) =>
      lora.withAdaptersDisabled(() =>
        torch.noGrad(() => tokenLogProbs(lora.base, inputIds, { ...options, attentionMask }).logProbs),
      ),
  };
}

// --- batches -----------------------------------------------------------------------------------------------------

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

/** The rows a schema trains on: dpo experiences become a chosen row and a rejected row. */
export function experienceRows(experiences: readonly Experience[], schema: ResolvedAlgorithm['schema']): Experience[] {
  if (schema !== 'dpo') return [...experiences];
  return experiences.flatMap((e) => {
    if (!Array.isArray(e.chosen) || !Array.isArray(e.rejected) || e.chosen.length === 0 || e.rejected.length === 0) {
      throw new Error(`train step (dpo): experience '${e.eid}' needs non-empty chosen and rejected responses`);
    }
    const prompt = e.tokens.slice(0, e.promptLength);
    const row = (kind: string, response: number[]): Experience => ({
      eid: `${e.eid}/${kind}`,
      tokens: [...prompt, ...response],
      promptLength: e.promptLength,
      info: { ...e.info },
    });
    return [row('chosen', e.chosen), row('rejected', e.rejected)];
  });
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

// --- the step ----------------------------------------------------------------------------------------------------

export interface TrainStepSetup {
  /** The policy (its trainable tensors are the optimizer's). */
  model: CausalLM;
  /** The policy's LoRA adapters, when it has them: switched to training mode (dropout) for the policy update only. */
  lora?: LoraModel | null;
  optimizer: Optimizer;
  algorithm: ResolvedAlgorithm;
  /** Needed when algorithm.useReference: frozenCopyReference(model) or loraReference(lora). */
  reference?: ReferencePolicy | null;
  /** Needed when algorithm.useCritic (PPO). */
  critic?: { critic: Critic; optimizer: Optimizer; cliprangeValue?: number } | null;
  /** Rows per forward/backward (default: the whole batch; DPO rounds it up to whole pairs). */
  microBatchSize?: number;
  /** Max global gradient norm (default algorithm.optimizer.clip_grad). */
  maxGradNorm?: number;
  padTokenId?: number;
  /** LM-head chunk (sequence positions) of forwardBackward. */
  chunkSize?: number;
  /** Activation checkpointing in forwardBackward. */
  checkpoint?: boolean;
  /** Global step of the first run() (CHORD's μ schedule); counts up by one per run(). */
  startStep?: number;
  /** The model's device, where batches are built (default 'cpu'). */
  device?: string;
  /**
   * Mixed precision (./master-weights.ts): `model` computes in low precision, the optimizer holds float32 master
   * weights; gradients move to them after each micro-batch, and the model takes them back after each step.
   */
  masterWeights?: MasterWeights | null;
}

/**
 * Metrics of one step. Always: loss, pg_loss, grad_norm, lr, tokens (response tokens trained), rows, dropped (rows
 * the advantage function dropped). When their modules run: kl (the KL loss before its coefficient), entropy,
 * pg_clipfrac, ppo_kl, critic/vf_loss, critic/vf_clipfrac, critic/grad_norm; module metrics under policy/,
 * advantage/, kl_penalty/.
 */
export type TrainStepMetrics = Record<string, number>;

/** Rows [start, start + n) of the batch, as the aggregation units count them. */
interface RowCounts {
  rows: number;
  tokens: number;
  usualRows: number;
  usualTokens: number;
  /** Masked tokens that carry rollout log-probs (the rollout mask's). */
  rolloutTokens: number;
}

/**
 * Per-row counts of the batch (masked tokens, on-policy or not, tokens with rollout log-probs), read in one transfer
 * before the micro-batches run: the loop then asks the host for its counts instead of the device.
 */
class BatchCounts {
  readonly #perRow: Float64Array; // [B, 4]: tokens, usual, usual tokens, rollout tokens

  constructor(batch: TrainBatch, rolloutMask: Tensor) {
    this.#perRow = torch.scope(() =>
      torch.noGrad(() => {
        const tokens = batch.actionMask.sum(-1).to({ dtype: 'float64' });
        const usual = batch.expertMask.logicalNot().to({ dtype: 'float64' });
        const rollout = rolloutMask.sum(-1).to({ dtype: 'float64' });
        return torch.stack([tokens, usual, tokens.mul(usual), rollout], 1).toTypedArray() as Float64Array;
      }),
    );
  }

  /** Counts of rows [start, start + n). */
  rows(start: number, n: number): RowCounts {
    const sum = (column: number) => {
      let total = 0;
      for (let b = start; b < start + n; b++) total += this.#perRow[b * 4 + column] as number;
      return total;
    };
    return { rows: n, tokens: sum(0), usualRows: sum(1), usualTokens: sum(2), rolloutTokens: sum(3) };
  }
}

/**
 * Each row's group by its prompt's first promptWidth − 1 padded columns (forwardBackward's shared-prefix packing), from
 * the experiences on the host: left-padded, a row's columns are fixed by its prompt length and its prompt but the last
 * token (the mask tells prompt lengths apart).
 */
export function rowPromptGroups(rows: readonly Experience[]): number[] {
  return groupsByKey(rows.map((e) => `${e.promptLength}:${e.tokens.slice(0, e.promptLength - 1).join(',')}`));
}

/** A micro-batch's PromptGroups (rows [start, start + n) of the batch), made before the forwards are queued. */
function microPromptGroups(batch: TrainBatch, start: number, n: number): PromptGroups {
  return promptGroups(rowPromptGroups(batch.rows.slice(start, start + n)), batch.inputIds.device);
}

/** How many of a term's units rows with `counts` hold. */
function unitCount(term: Pick<LossTerm, 'rows' | 'unit'>, counts: RowCounts, rowsPerGroup: number): number {
  const pick = (all: number, usual: number) => (term.rows === 'all' ? all : term.rows === 'usual' ? usual : all - usual);
  switch (term.unit) {
    case 'token':
      return pick(counts.tokens, counts.usualTokens);
    case 'row':
      return pick(counts.rows, counts.usualRows);
    case 'group':
      return pick(counts.rows, counts.usualRows) / rowsPerGroup;
    case 'constant':
      return 1;
  }
}

/** A micro-batch's weight for a term: its share of the term's units in the batch (see the header). */
function termShare(term: Pick<LossTerm, 'rows' | 'unit'>, micro: RowCounts, batch: RowCounts, rowsPerGroup = 1): number {
  if (term.unit === 'constant') return 1;
  const total = unitCount(term, batch, rowsPerGroup);
  return total > 0 ? unitCount(term, micro, rowsPerGroup) / total : 0;
}

/** The single term of a loss aggregated over every row by `mode` (KL, entropy, critic). */
const modeTerm = (mode: LossAggMode) => ({ rows: 'all', unit: aggregationUnit(mode) }) as const;

/** What a train step carries from one step to the next besides weights and optimizers (saved with checkpoints). */
export interface TrainStepState {
  step: number;
  /** The KL loss's and the KL reward penalty's coefficients (the adaptive controller moves them). */
  klLossCoef: number;
  klPenaltyCoef: number;
}

const asLossAggMode = (v: unknown): LossAggMode | null => (typeof v === 'string' && isLossAggMode(v) ? v : null);

export class TrainStep {
  readonly setup: TrainStepSetup;
  /** Global steps done. */
  step: number;
  readonly #klLoss: KlFn;
  readonly #klPenalty: KlFn;
  readonly #entropy: ReturnType<typeof createEntropyLossFn>;
  readonly #params: Tensor[];

  constructor(setup: TrainStepSetup) {
    const { algorithm } = setup;
    if (algorithm.useReference && !setup.reference) {
      const users = [
        algorithm.klLossFn.name !== 'none' ? `kl_loss_fn '${algorithm.klLossFn.name}'` : null,
        algorithm.klPenaltyFn.name !== 'none' ? `kl_penalty_fn '${algorithm.klPenaltyFn.name}'` : null,
        policyLossModule(algorithm.policyLossFn.name).needsReference === true
          ? `policy_loss_fn '${algorithm.policyLossFn.name}'`
          : null,
      ].filter((u) => u !== null);
      throw new Error(
        `train step: ${algorithm.algorithmType} needs reference log-probs (${users.join(', ')}); pass reference ` +
          `(frozenCopyReference(model) or loraReference(lora)) or set kl_loss_fn: none`,
      );
    }
    if (algorithm.useCritic && !setup.critic) {
      throw new Error(`train step: ${algorithm.algorithmType} (advantage_fn 'ppo', GAE) needs a critic; pass critic`);
    }
    this.setup = setup;
    this.step = setup.startStep ?? 0;
    this.#klLoss = createKlFn(algorithm.klLossFn.name, algorithm.klLossFn.args);
    this.#klPenalty = createKlFn(algorithm.klPenaltyFn.name, algorithm.klPenaltyFn.args);
    this.#entropy = createEntropyLossFn(algorithm.entropyLossFn.name, algorithm.entropyLossFn.args);
    this.#params = setup.optimizer.groups.flatMap((g) => g.params);
  }

  state(): TrainStepState {
    return { step: this.step, klLossCoef: this.#klLoss.klCoef, klPenaltyCoef: this.#klPenalty.klCoef };
  }

  /** Continues from a saved state(); every field is checked. */
  loadState(state: unknown, where = 'train step state'): void {
    const s = (state ?? {}) as Partial<Record<keyof TrainStepState, unknown>>;
    const number = (key: keyof TrainStepState) => {
      const value = s[key];
      if (typeof value !== 'number' || !Number.isFinite(value))
        throw new Error(`${where}: ${key} must be a finite number, got ${JSON.stringify(value)}`);
      return value;
    };
    const step = number('step');
    const klLossCoef = number('klLossCoef');
    const klPenaltyCoef = number('klPenaltyCoef');
    this.step = step;
    this.#klLoss.klCoef = klLossCoef;
    this.#klPenalty.klCoef = klPenaltyCoef;
  }

  /** One update from `experiences` (already sampled by the sample strategy), in this process alone. */
  run(experiences: readonly Experience[]): TrainStepMetrics {
    const metrics = new StepMetrics();
    const restore = this.#enter();
    try {
      const program = this.#program(experienceRows(experiences, this.setup.algorithm.schema), metrics, ONE_PROCESS);
      // one process: the sums across ranks are this process's own
      for (let next = program.next(); !next.done; )
        next = program.next(next.value.kind === 'metrics' ? next.value.sums : undefined);
    } catch (error) {
      metrics.dispose();
      throw error;
    } finally {
      restore();
    }
    return this.#finish(metrics);
  }

  /**
   * The same update as run() on the same global batch, on `collectives.worldSize` ranks that each call this with the
   * same experiences (data parallelism, see the header). Every rank ends with the same parameters and returns the
   * metrics one process would.
   */
  async runDistributed(experiences: readonly Experience[], collectives: StepCollectives): Promise<TrainStepMetrics> {
    const metrics = new StepMetrics();
    let program: StepProgram | null = null;
    const restore = this.#enter();
    try {
      program = this.#program(experienceRows(experiences, this.setup.algorithm.schema), metrics, collectives);
      for (let next = program.next(); !next.done; ) {
        const request = next.value;
        let answer: Map<string, number> | undefined;
        if (request.kind === 'sum') await collectives.sum(request.tensors);
        else if (request.kind === 'gradients') await collectives.sumGradients(request.params);
        else if (request.kind === 'stepped') await collectives.afterOptimizerStep?.(request.params);
        else answer = await collectives.sumMetrics(request.sums);
        next = program.next(answer);
      }
    } catch (error) {
      program?.return(); // frees what the step held
      metrics.dispose();
      throw error;
    } finally {
      restore();
    }
    return this.#finish(metrics);
  }

  /** Eval mode (no dropout) but for the policy update's forward and backward (see the header); returns the undo. */
  #enter(): () => void {
    const lora = this.setup.lora ?? null;
    const wasTraining = lora?.training ?? false;
    lora?.eval();
    return () => lora?.train(wasTraining);
  }

  /** The step's metrics as numbers: what stayed on the device is read now, in one transfer. */
  #finish(metrics: StepMetrics): TrainStepMetrics {
    this.step++;
    metrics.set('lr', this.setup.optimizer.lr);
    if (!metrics.has('dropped')) metrics.set('dropped', 0);
    return Object.fromEntries(metrics.read());
  }

  // The step as phases between collectives (a generator, so that run() drives it synchronously and runDistributed()
  // awaits each collective). Each phase runs in its own scope; tensors a later phase needs are held here and freed
  // when the step ends. `metrics` gets what every rank computes alike; `sums` what each rank sums over its own rows
  // and micro-batches, added across ranks at the end. Both hold device values until they are read (./step-metrics.ts):
  // nothing between the first micro-batch's forward and the last one's backward waits for the device.
  *#program(rows: Experience[], metrics: StepMetrics, shard: Shard): StepProgram {
    const { algorithm } = this.setup;
    const held: Tensor[] = [];
    const hold = <T extends Tensor | null>(t: T): T => {
      if (t !== null) held.push(torch.keep(t));
      return t;
    };
    const holdBatch = (b: TrainBatch) => {
      for (const t of batchTensors(b)) hold(t);
    };
    const sums = new StepMetrics();
    try {
      const prepared = torch.scope(() => this.#prepare(rows, shard));
      holdBatch(prepared.batch);
      const perRow = [prepared.refLogprob, prepared.current, prepared.entropy, prepared.necs, prepared.oldValues].map(hold);
      yield { kind: 'sum', tensors: perRow.filter((t) => t !== null) };
      const shaped = torch.scope(() => this.#shape(prepared, metrics));
      holdBatch(shaped.batch);
      for (const t of [shaped.oldLogprob, shaped.advantages, shaped.returns, shaped.oldValues, shaped.refLogprob]) hold(t);
      for (const t of [shaped.rolloutMask, shaped.wholeBatchMask]) hold(t);
      const counts = new BatchCounts(shaped.batch, shaped.rolloutMask);
      torch.scope(() => this.#policyMicroBatches(shaped, counts, shard, sums));
      if (algorithm.klLossFn.name !== 'none' && shaped.refLogprob !== null) metrics.set('kl_coef', this.#klLoss.klCoef);
      metrics.set('tokens', counts.rows(0, shaped.batch.rows.length).tokens);
      metrics.set('rows', shaped.batch.rows.length);
      yield { kind: 'gradients', params: this.#params };
      torch.scope(() => {
        const gradNorm = torch.clipGradNorm(this.#params, this.setup.maxGradNorm ?? algorithm.optimizer.clipGrad);
        if (Number.isFinite(gradNorm)) this.setup.optimizer.step();
        else metrics.set('skipped_step', 1);
        this.setup.optimizer.zeroGrad();
        metrics.set('grad_norm', gradNorm);
      });
      yield { kind: 'stepped', params: this.#params };
      torch.scope(() => this.setup.masterWeights?.publish());
      const critic = this.setup.critic ?? null;
      if (algorithm.useCritic && critic !== null && shaped.oldValues !== null && shaped.returns !== null) {
        const { oldValues, returns } = shaped;
        torch.scope(() => this.#criticMicroBatches(shaped.batch, counts, oldValues, returns, shard, sums));
        const params = critic.critic.parameters();
        yield { kind: 'gradients', params };
        torch.scope(() => {
          const gradNorm = torch.clipGradNorm(params, this.setup.maxGradNorm ?? algorithm.optimizer.clipGrad);
          if (Number.isFinite(gradNorm)) critic.optimizer.step();
          critic.optimizer.zeroGrad();
          metrics.set('critic/grad_norm', gradNorm);
        });
      }
      const own = sums.read();
      const total = yield { kind: 'metrics', sums: own };
      for (const [key, value] of total ?? own) metrics.set(key, value);
    } finally {
      sums.dispose();
      for (const t of held) t.dispose();
    }
  }

  /**
   * The padded batch, and what the whole batch needs from a forward: reference log-probs, the current policy's
   * log-probs for rows without rollout log-probs, the critic's values. Each rank computes its own rows (ownRows) and
   * leaves zeros in the others', so the sum across ranks is the whole batch's.
   */
  #prepare(rows: Experience[], shard: Shard): Prepared {
    const { algorithm } = this.setup;
    const batch = buildBatch(rows, this.setup.padTokenId ?? 0, this.setup.device ?? 'cpu');
    const B = batch.rows.length;
    const responseOf = (perPosition: Tensor) => perPosition.narrow(1, batch.promptWidth - 1, batch.responseWidth);
    const own = ownRows(B, shard);
    // the log-prob options of this rank's rows (their prompt groups uploaded once, when a forward first needs them)
    let ownOptions: LogProbOptions | null = null;
    const logProbOptions = (): LogProbOptions => {
      ownOptions ??= {
        promptWidth: batch.promptWidth,
        promptGroups: microPromptGroups(batch, own.start, own.n),
        ...(this.setup.chunkSize ? { chunkSize: this.setup.chunkSize } : {}),
        temperature: batch.temperatures.slice(own.start, own.start + own.n),
      };
      return ownOptions;
    };
    type RowsForward = (inputIds: Tensor, attentionMask: Tensor, options: LogProbOptions) => Tensor[];
    const perRows = (count: number, compute: RowsForward): Tensor[] => {
      if (shard.worldSize === 1) return compute(batch.inputIds, batch.attentionMask, logProbOptions()).map(responseOf);
      const outs = Array.from({ length: count }, () =>
        torch.zeros([B, batch.responseWidth], { device: batch.actionMask.device }),
      );
      if (own.n > 0) {
        const part = (t: Tensor) => t.narrow(0, own.start, own.n);
        const results = compute(part(batch.inputIds), part(batch.attentionMask), logProbOptions());
        for (const [i, t] of results.entries()) part(outs[i] as Tensor).copy_(responseOf(t));
      }
      return outs;
    };
    const perRow = (compute: (inputIds: Tensor, attentionMask: Tensor, options: LogProbOptions) => Tensor): Tensor =>
      perRows(1, (...args) => [compute(...args)])[0] as Tensor;
    const reference = this.setup.reference ?? null;
    const refLogprob =
      algorithm.useReference && reference !== null
        ? perRow((ids, mask, options) => reference.logProbs(ids, mask, options))
        : null;
    // rows without rollout log-probs (SFT/expert data, or an explorer that did not record them): the current policy;
    // every row when the old log-probs are recomputed (bypass_old_logprobs: false) or a module reads the current
    // policy over the whole batch (a policy loss's wholeBatchMask, an advantage function's entropy and necs), all from
    // one pass
    const needsEntropy = algorithm.advantageFn !== null && advantageNeedsEntropy(algorithm.advantageFn.name);
    const needsNecs = algorithm.advantageFn !== null && advantageNeedsNecs(algorithm.advantageFn.name);
    const wholeBatch =
      !algorithm.bypassOldLogprobs ||
      policyLossModule(algorithm.policyLossFn.name).wholeBatchMask !== undefined ||
      needsEntropy ||
      needsNecs;
    const fields: ('logProbs' | 'entropy' | 'necs')[] = ['logProbs'];
    if (needsEntropy) fields.push('entropy');
    if (needsNecs) fields.push('necs');
    const outputs =
      batch.rows.every((e) => e.logprobs !== undefined) && !wholeBatch
        ? []
        : perRows(fields.length, (ids, mask, options) =>
            torch.noGrad(() => {
              const all = { ...options, attentionMask: mask, entropy: needsEntropy, necs: needsNecs };
              const out = tokenLogProbs(this.setup.model, ids, all);
              return fields.map((field) => out[field] as Tensor);
            }),
          );
    const output = (field: (typeof fields)[number]): Tensor | null => outputs[fields.indexOf(field)] ?? null;
    const current = output('logProbs');
    const entropy = output('entropy');
    const necs = output('necs');
    const critic = this.setup.critic?.critic ?? null;
    const oldValues =
      algorithm.advantageFn !== null && algorithm.schema !== 'dpo' && algorithm.useCritic && critic !== null
        ? perRow((ids, mask) => torch.noGrad(() => critic.values(ids, mask)))
        : null;
    return { batch, refLogprob, current, entropy, necs, oldValues };
  }

  /** Old log-probs, advantages (over the whole batch: every rank alike) and the rows the advantage function keeps. */
  #shape(prepared: Prepared, metrics: StepMetrics): Shaped {
    const { algorithm } = this.setup;
    let { batch, oldValues } = prepared;
    let rolloutMask = batch.actionMask.mul(batch.hasLogprobs.unsqueeze(-1).to({ dtype: batch.actionMask.dtype }));
    // old log-probs: the rollout's (bypass_old_logprobs), else the current weights' (recomputed in #prepare)
    let oldLogprob =
      prepared.current === null
        ? batch.logprobs
        : algorithm.bypassOldLogprobs
          ? torch.where(batch.hasLogprobs.unsqueeze(-1), batch.logprobs, prepared.current)
          : prepared.current;
    // recomputed: the rollout/training mismatch is known now (with bypass: per micro-batch, see #policyMicroBatches)
    const correction = algorithm.bypassOldLogprobs
      ? null
      : computeRolloutCorrection(
          { trainLogprob: oldLogprob, rolloutLogprob: batch.logprobs, actionMask: rolloutMask },
          algorithm.rolloutCorrection,
        );
    for (const [k, v] of Object.entries(correction?.metrics ?? {})) metrics.set(k, v);
    let advantages = batch.advantages;
    let returns = batch.returns;
    let keepIndex: Tensor | null = null;
    if (algorithm.advantageFn !== null && algorithm.schema !== 'dpo') {
      if (algorithm.computeAdvantageInTrainer || advantages === null) {
        const computed = this.#computeAdvantages(batch, oldLogprob, prepared, oldValues, metrics);
        advantages = computed.advantages;
        returns = computed.returns;
        keepIndex = computed.keepIndex;
        if (computed.actionMask !== null) {
          batch = { ...batch, actionMask: computed.actionMask };
          rolloutMask = rolloutMask.mul(computed.actionMask);
        }
      }
    }
    // truncated IS weights scale each token's loss through its advantage (the loss is linearInAdvantages)
    const isWeights = correction?.weights ?? null;
    if (isWeights !== null && advantages !== null) advantages = advantages.mul(torch.where(rolloutMask.gt(0), isWeights, 1));
    let current = prepared.current;
    // rows the advantage function dropped leave the batch
    let refLogprob = prepared.refLogprob;
    if (keepIndex !== null) {
      const keep = keepIndex;
      const select = (t: Tensor) => t.indexSelect(0, keep);
      const keptIndex = [...(keep.toTypedArray() as BigInt64Array)].map(Number);
      const kept = keptIndex.map((i) => batch.rows[i] as Experience);
      metrics.add('dropped', batch.rows.length - new Set(keptIndex).size);
      if (kept.length === 0) throw new Error('train step: the advantage function dropped every experience of the batch');
      batch = {
        ...batch,
        rows: kept,
        inputIds: select(batch.inputIds),
        attentionMask: select(batch.attentionMask),
        actionMask: select(batch.actionMask),
        expertMask: select(batch.expertMask),
        temperatures: keptIndex.map((i) => batch.temperatures[i] as number),
      };
      oldLogprob = select(oldLogprob);
      rolloutMask = select(rolloutMask);
      current = current === null ? null : select(current);
      advantages = advantages === null ? null : select(advantages);
      returns = returns === null ? null : select(returns);
      oldValues = oldValues === null ? null : select(oldValues);
      refLogprob = refLogprob === null ? null : select(refLogprob);
    }
    // a token mask over the whole batch (m2po), from the current weights: the ones the loss sees in this step
    const policy = policyLossModule(algorithm.policyLossFn.name);
    let wholeBatchMask: Tensor | null = null;
    if (policy.wholeBatchMask !== undefined && current !== null && advantages !== null) {
      const options = resolveArgs(
        `policy_loss_fn '${algorithm.policyLossFn.name}'`,
        policy.defaults,
        algorithm.policyLossFn.args,
      );
      const whole = policy.wholeBatchMask({ logprob: current, oldLogprob, advantages, actionMask: batch.actionMask }, options);
      wholeBatchMask = whole.mask;
      for (const [k, v] of Object.entries(whole.metrics)) metrics.set(`policy/${k}`, v);
    }
    return { batch, oldLogprob, advantages, returns, oldValues, refLogprob, rolloutMask, wholeBatchMask };
  }

  #computeAdvantages(
    batch: TrainBatch,
    oldLogprob: Tensor,
    { refLogprob, entropy, necs }: Pick<Prepared, 'refLogprob' | 'entropy' | 'necs'>,
    values: Tensor | null,
    metrics: StepMetrics,
  ): { advantages: Tensor; returns: Tensor; keepIndex: Tensor | null; actionMask: Tensor | null } {
    const { algorithm } = this.setup;
    const spec = algorithm.advantageFn;
    if (spec === null) throw new Error('train step: no advantage_fn');
    // expert rows take no part: the function sees the usual rows only
    const usualRows = batch.rows.flatMap((e, i) => (e.info.isExpert === true ? [] : [i]));
    const device = batch.actionMask.device;
    const index = torch.tensor(usualRows, { dtype: 'int64', ...(device === 'cpu' ? {} : { device }) });
    const pick = (t: Tensor) => t.indexSelect(0, index);
    const rows = usualRows.map((i) => batch.rows[i] as Experience);
    let tokenLevelRewards = batch.tokenLevelRewards === null ? undefined : pick(batch.tokenLevelRewards);
    if (algorithm.klPenaltyFn.name !== 'none' && tokenLevelRewards !== undefined && refLogprob !== null) {
      const penalised = this.#klPenalty.applyPenaltyToReward({
        tokenLevelScores: tokenLevelRewards,
        oldLogprob: pick(oldLogprob),
        refLogprob: pick(refLogprob),
        actionMask: pick(batch.actionMask),
      });
      tokenLevelRewards = penalised.tokenLevelRewards;
      for (const [k, v] of Object.entries(penalised.metrics)) metrics.add(`kl_penalty/${k}`, v);
    }
    const ids = (key: 'taskId' | 'runId') => {
      const out = rows.map((e) => e.info[key]);
      return out.every((v) => v !== undefined) ? (out as (string | number)[]) : undefined;
    };
    const input: AdvantageInput = {
      actionMask: pick(batch.actionMask),
      ...(batch.rewards === null ? {} : { rewards: pick(batch.rewards) }),
      ...(tokenLevelRewards === undefined ? {} : { tokenLevelRewards }),
      ...(ids('taskId') === undefined ? {} : { groupIds: ids('taskId') }),
      ...(ids('runId') === undefined ? {} : { runIds: ids('runId') }),
      ...(values === null ? {} : { values: pick(values) }),
      logprobs: pick(oldLogprob),
      ...(batch.teacherLogprobs === null ? {} : { teacherLogprobs: pick(batch.teacherLogprobs) }),
      ...(entropy === null ? {} : { entropy: pick(entropy) }),
      ...(necs === null ? {} : { necs: pick(necs) }),
      infos: rows.map((e) => e.info),
    };
    let result: ReturnType<ReturnType<typeof ADVANTAGE_FN.create>>;
    try {
      result = ADVANTAGE_FN.create(spec.name, spec.args)(input);
    } catch (error) {
      const hint = /groupIds/.test((error as Error).message) ? ' (set info.taskId on every experience)' : '';
      throw new Error(`train step: ${(error as Error).message}${hint}`);
    }
    for (const [k, v] of Object.entries(result.metrics)) metrics.add(`advantage/${k}`, v);
    const shape = batch.actionMask.shape;
    const scatter = (t: Tensor) => torch.zeros(shape, { device }).indexCopy_(0, index, t.float());
    const advantages = scatter(result.advantages);
    const returns = scatter(result.returns);
    const keep = torch.ones([batch.rows.length], { dtype: 'bool', device }).indexCopy_(0, index, result.keep);
    let keepIndex = keep.all().item() ? null : keep.nonzero().squeeze(-1);
    // rows the function refills the batch with (grpo duplicate_experiences) follow the kept ones
    if (result.duplicates !== undefined && result.duplicates.size(0) > 0) {
      const copies = index.indexSelect(0, result.duplicates.to({ device }));
      keepIndex = torch.cat([keepIndex ?? torch.arange(batch.rows.length, { dtype: 'int64', device }), copies]);
      metrics.add('duplicated', copies.size(0));
    }
    const actionMask =
      result.actionMask === undefined
        ? null
        : batch.actionMask.clone().indexCopy_(0, index, result.actionMask.to({ dtype: batch.actionMask.dtype, device }));
    return { advantages, returns, keepIndex, actionMask };
  }

  /**
   * The policy's forward/backward over this rank's micro-batches (all of them in one process): gradients accumulate
   * in the parameters' .grad, each micro-batch weighted by its share of the whole batch (see the header).
   */
  #policyMicroBatches(shaped: Shaped, counted: BatchCounts, shard: Shard, sums: StepMetrics): void {
    const { algorithm, model } = this.setup;
    const { batch } = shaped;
    const B = batch.rows.length;
    const accumulation: LossAccumulation = policyLossAccumulation(
      algorithm.policyLossFn.name,
      algorithm.policyLossFn.args,
      algorithm.lossAggMode,
    );
    const group = accumulation.rowsPerGroup;
    if (B % group !== 0) {
      throw new Error(
        `train step: policy_loss_fn '${algorithm.policyLossFn.name}' takes rows in groups of ${group}, got ${B} rows`,
      );
    }
    let micro = this.#microBatchSize(B, shard);
    micro = Math.ceil(micro / group) * group; // a group never straddles two micro-batches
    const plan = microBatches(B, micro);
    const entropyAgg = asLossAggMode(algorithm.entropyLossFn.args.loss_agg_mode) ?? algorithm.lossAggMode;
    const entropyCoef = Number(algorithm.entropyLossFn.args.entropy_coef ?? 0);
    const wantEntropy = algorithm.entropyLossFn.name !== 'none';
    const whole = counted.rows(0, B);
    const totalTokens = whole.tokens;
    // bypass_old_logprobs: the mismatch is measured against the policy being trained (its log-probs, detached, are
    // the trainer's: one update per step), so per micro-batch, each weighted by its share of rollout tokens
    const bypassCorrection = algorithm.bypassOldLogprobs;
    const rolloutTokens = bypassCorrection ? whole.rolloutTokens : 0;
    const multiTerm = accumulation.terms.length > 1;
    const policyLoss = POLICY_LOSS_FN.create(algorithm.policyLossFn.name, algorithm.policyLossFn.args);
    // each micro-batch's prompt groups and expert rows, uploaded before the first forward is queued
    const ahead = plan.map(({ start, n }, i) =>
      owns(i, shard)
        ? {
            promptGroups: microPromptGroups(batch, start, n),
            expertRows: expertRows(
              batch.rows.slice(start, start + n).map((e) => e.info.isExpert === true),
              batch.inputIds.device,
            ),
          }
        : null,
    );
    // reported even by a rank that runs no micro-batch
    sums.total('loss', 0);
    sums.total('pg_loss', 0);
    const lora = this.setup.lora ?? null;
    lora?.train();
    // LoRA dropout on several ranks: micro-batch i draws the masks one process would, so a rank skips the draws of
    // the micro-batches other ranks run (each forward draws once per adapted projection) and ends where one process
    // would after all of them
    const stream =
      lora !== null && shard.worldSize > 1
        ? { from: lora.randomState(), perForward: model.isStochastic ? lora.modules.length : 0 }
        : null;
    // this rank's last micro-batch: its backward completes the step's gradients (the ranks may sum them meanwhile)
    const last = plan.reduce((found, _, i) => (owns(i, shard) ? i : found), -1);
    try {
      for (const [i, { start, n }] of plan.entries()) {
        if (!owns(i, shard)) continue;
        if (i === last) shard.beforeLastBackward?.();
        if (lora !== null && stream !== null)
          lora.setRandomState({ ...stream.from, draws: stream.from.draws + i * stream.perForward });
        const part = (t: Tensor) => t.narrow(0, start, n);
        const actionMask = part(batch.actionMask);
        const expertMask = part(batch.expertMask);
        const counts = counted.rows(start, n);
        const prepared = ahead[i] as NonNullable<(typeof ahead)[number]>;
        const tokens = counts.tokens;
        const share = (mode: LossAggMode) => termShare(modeTerm(mode), counts, whole);
        const metricWeight = totalTokens > 0 ? tokens / totalTokens : n / B;
        // one term: the trainer weighs the loss; several: the loss weighs each term by input.termWeights
        const termWeights = Object.fromEntries(accumulation.terms.map((t) => [t.name, termShare(t, counts, whole, group)]));
        const policyWeight = multiTerm ? 1 : (termWeights[(accumulation.terms[0] as LossTerm).name] as number);
        const result = forwardBackward(
          model,
          part(batch.inputIds),
          ({ logProbs, entropy }) => {
            const logprob = logProbs.narrow(1, batch.promptWidth - 1, batch.responseWidth);
            let advantages = shaped.advantages === null ? null : part(shaped.advantages);
            if (bypassCorrection && rolloutTokens > 0) {
              const rolloutMask = part(shaped.rolloutMask);
              const correction = computeRolloutCorrection(
                { trainLogprob: logprob, rolloutLogprob: part(shaped.oldLogprob), actionMask: rolloutMask },
                algorithm.rolloutCorrection,
              );
              const share = counts.rolloutTokens / rolloutTokens;
              for (const [k, v] of Object.entries(correction.metrics)) sums.add(k, v, share);
              if (correction.weights !== null && advantages !== null)
                advantages = advantages.mul(torch.where(rolloutMask.gt(0), correction.weights, 1));
            }
            const input: PolicyLossInput = {
              logprob,
              actionMask,
              oldLogprob: part(shaped.oldLogprob),
              ...(advantages === null ? {} : { advantages }),
              ...(shaped.refLogprob === null ? {} : { refLogprob: part(shaped.refLogprob) }),
              ...(shaped.wholeBatchMask === null ? {} : { wholeBatchMask: part(shaped.wholeBatchMask) }),
              expertMask,
              expertRows: prepared.expertRows,
              step: this.step,
              ...(multiTerm ? { termWeights } : {}),
            };
            const policy = policyLoss(input);
            let total = policy.loss.mul(policyWeight);
            sums.total('pg_loss', policy.loss, policyWeight);
            for (const [k, v] of Object.entries(policy.metrics)) {
              if (k === 'pg_clipfrac' || k === 'ppo_kl') sums.add(k, v, metricWeight);
              sums.add(`policy/${k}`, v, metricWeight);
            }
            if (algorithm.klLossFn.name !== 'none' && shaped.refLogprob !== null) {
              const kl = this.#klLoss.calculateLoss(
                { logprob, refLogprob: part(shaped.refLogprob), actionMask, oldLogprob: part(shaped.oldLogprob) },
                algorithm.lossAggMode,
              );
              total = total.add(kl.loss.mul(share(algorithm.lossAggMode)));
              sums.add('kl', kl.metrics.kl_loss ?? 0, share(algorithm.lossAggMode));
            }
            if (wantEntropy && entropy !== null) {
              const responseEntropy = entropy.narrow(1, batch.promptWidth - 1, batch.responseWidth);
              const input = {
                entropy: entropyCoef === 0 ? responseEntropy.detach() : responseEntropy,
                actionMask,
                expertMask,
                expertRows: prepared.expertRows,
              };
              const term = this.#entropy(input);
              if (entropyCoef !== 0) total = total.add(term.loss.mul(share(entropyAgg)));
              if (term.metrics.entropy !== undefined) sums.add('entropy', term.metrics.entropy, share(entropyAgg));
            }
            return total;
          },
          {
            attentionMask: part(batch.attentionMask),
            promptWidth: batch.promptWidth,
            promptGroups: prepared.promptGroups,
            entropy: wantEntropy,
            ...(this.setup.chunkSize ? { chunkSize: this.setup.chunkSize } : {}),
            temperature: batch.temperatures.slice(start, start + n),
            ...(this.setup.checkpoint ? { checkpoint: true } : {}),
            ...(lora === null ? {} : { random: lora }),
          },
        );
        sums.total('loss', result.loss);
        this.setup.masterWeights?.accumulateGradients();
        if (lora !== null && stream !== null) {
          const expected = stream.from.draws + (i + 1) * stream.perForward;
          const drawn = lora.randomState().draws;
          if (drawn !== expected)
            throw new Error(
              `train step: micro-batch ${i} left the LoRA dropout stream at draw ${drawn}, expected ${expected} ` +
                `(${stream.perForward} per forward): ranks would draw different masks than one process`,
            );
        }
      }
      if (lora !== null && stream !== null)
        lora.setRandomState({ ...stream.from, draws: stream.from.draws + plan.length * stream.perForward });
    } finally {
      lora?.eval();
    }
  }

  /** The critic's forward/backward over this rank's micro-batches (value loss weighted by its share, as the policy's). */
  #criticMicroBatches(
    batch: TrainBatch,
    counted: BatchCounts,
    oldValues: Tensor,
    returns: Tensor,
    shard: Shard,
    sums: StepMetrics,
  ): void {
    const setup = this.setup.critic;
    if (!setup) return;
    const { critic } = setup;
    const B = batch.rows.length;
    const mode = this.setup.algorithm.lossAggMode;
    const whole = counted.rows(0, B);
    for (const [i, { start, n }] of microBatches(B, this.#microBatchSize(B, shard)).entries()) {
      if (!owns(i, shard)) continue;
      torch.scope(() => {
        const part = (t: Tensor) => t.narrow(0, start, n);
        const actionMask = part(batch.actionMask);
        const weight = termShare(modeTerm(mode), counted.rows(start, n), whole);
        const values = critic
          .values(part(batch.inputIds), part(batch.attentionMask))
          .narrow(1, batch.promptWidth - 1, batch.responseWidth);
        const { loss, metrics: m } = clippedValueLoss(
          { values, oldValues: part(oldValues), returns: part(returns), actionMask },
          { lossAggMode: mode, ...(setup.cliprangeValue === undefined ? {} : { cliprangeValue: setup.cliprangeValue }) },
        );
        loss.mul(weight).backward();
        for (const [k, v] of Object.entries(m)) sums.add(`critic/${k}`, v, weight);
      });
    }
  }

  /** Rows per micro-batch: the setting, else the whole batch split evenly over the ranks (one process: the batch). */
  #microBatchSize(B: number, shard: Shard): number {
    const micro = this.setup.microBatchSize ?? Math.ceil(B / shard.worldSize);
    if (!Number.isInteger(micro) || micro < 1)
      throw new Error(`train step: microBatchSize must be a positive integer, got ${micro}`);
    return micro;
  }
}

// --- data parallelism --------------------------------------------------------------------------------------------

/** Which of `worldSize` ranks this process is (one process: rank 0 of 1). */
export interface Shard {
  readonly rank: number;
  readonly worldSize: number;
  /**
   * Called before this rank's last policy backward of the step (none when it runs no micro-batch): ranks that sum
   * gradients while the backward runs (./data-parallel.ts) start listening here.
   */
  beforeLastBackward?(): void;
}

const ONE_PROCESS: Shard = { rank: 0, worldSize: 1 };

/**
 * What runDistributed needs from the ranks (./data-parallel.ts implements it over a c10d process group). Every rank
 * calls the same collectives in the same order with tensors of the same shapes.
 */
export interface StepCollectives extends Shard {
  /** Sums each tensor across the ranks, in place. */
  sum(tensors: readonly Tensor[]): Promise<void>;
  /**
   * Sums the parameters' gradients across the ranks, in place; a parameter that has a gradient on some rank gets one
   * on every rank (zeros where it had none before the sum).
   */
  sumGradients(params: readonly Tensor[]): Promise<void>;
  /**
   * After the policy's optimizer step, before the compute weights are published: a sharded optimizer (./zero.ts)
   * all-gathers the parameters each rank updated. Absent: nothing to do.
   */
  afterOptimizerStep?(params: readonly Tensor[]): Promise<void>;
  /** The sum across the ranks of each metric that any rank has. */
  sumMetrics(sums: ReadonlyMap<string, number>): Promise<Map<string, number>>;
}

/** What the step asks of the ranks between its phases. */
type Collective =
  | { kind: 'sum'; tensors: Tensor[] }
  | { kind: 'gradients'; params: Tensor[] }
  | { kind: 'stepped'; params: Tensor[] }
  | { kind: 'metrics'; sums: Map<string, number> };

type StepProgram = Generator<Collective, void, Map<string, number> | undefined>;

/** Rows [start, start + n) of a B-row batch whose log-probs and values this rank computes (a contiguous share). */
export function ownRows(B: number, shard: Shard): { start: number; n: number } {
  const start = Math.floor((shard.rank * B) / shard.worldSize);
  return { start, n: Math.floor(((shard.rank + 1) * B) / shard.worldSize) - start };
}

/** The micro-batches of a B-row batch, `size` rows each but the last. */
export function microBatches(B: number, size: number): { start: number; n: number }[] {
  const out: { start: number; n: number }[] = [];
  for (let start = 0; start < B; start += size) out.push({ start, n: Math.min(size, B - start) });
  return out;
}

/** Micro-batch i runs on rank i mod worldSize (a rank may get none). */
const owns = (i: number, shard: Shard) => i % shard.worldSize === shard.rank;

/** #prepare's result: the batch and its per-row forward results (summed across ranks before #shape). */
interface Prepared {
  batch: TrainBatch;
  refLogprob: Tensor | null;
  current: Tensor | null;
  /** The current policy's entropy and necs, for an advantage function that reads them (clipb, clipv). */
  entropy: Tensor | null;
  necs: Tensor | null;
  oldValues: Tensor | null;
}

/** #shape's result: the rows the update trains on and the per-token tensors of the loss. */
interface Shaped {
  batch: TrainBatch;
  oldLogprob: Tensor;
  advantages: Tensor | null;
  returns: Tensor | null;
  oldValues: Tensor | null;
  refLogprob: Tensor | null;
  /** [B, T] the tokens that have rollout log-probs (actionMask of the rows that carry them). */
  rolloutMask: Tensor;
  /** The policy loss's whole-batch token mask (m2po), or null. */
  wholeBatchMask: Tensor | null;
}

function batchTensors(b: TrainBatch): (Tensor | null)[] {
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
