// One trainer step: a batch of experiences → one optimizer update of the policy (and of the critic, for PPO).
//
//   experiences ──rows──▶ padded batch ──▶ [reference log-probs] ──▶ [KL penalty in reward] ──▶ [advantages]
//     ──▶ micro-batches: forwardBackward(policy loss + KL loss + entropy loss), gradients accumulated
//     ──▶ clip grad norm ──▶ optimizer step ──▶ [critic: clipped value loss, its own step] ──▶ metrics
//
// This file runs the step as one program of phases (#program); the parts it names, in the order they run:
//   ../algorithm/schemas.ts the rows each schema trains on (dpo: a chosen and a rejected row per experience)
//   ./train-batch.ts       the batch layout: rows → padded tensors (prompts left-, responses right-padded)
//   ./batch-forwards.ts    the no-grad forwards over the whole batch: reference (./reference-policy.ts), current
//                          policy, critic values
//   ./loss-inputs.ts       old log-probs, rollout correction, advantages, the rows kept, a whole-batch token mask
//   ./micro-batches.ts     the micro-batch plan and each micro-batch's weights (gradient accumulation)
//   ./token-budget.ts      micro-batches by a token budget (use_dynamic_bsz), each at its own widths
//   ./objective.ts         one micro-batch's loss: the policy, KL and entropy terms and their shares
//   ./lora-dropout.ts      eval mode outside the policy update; the dropout stream across ranks
//   ./row-sharding.ts      data parallelism: each rank's rows and micro-batches, the collectives between phases
//   ./step-metrics.ts      metrics held on the device until the step reads them at its end
//
// No upload or read-back inside the micro-batch loop (on a GPU each waits for everything queued before it, so the next
// micro-batch could not be queued while this one runs): every micro-batch's token counts are read in one transfer
// before the loop (./micro-batches.ts BatchCounts), the rows sharing a prompt are grouped from the experiences and
// uploaded before it (./train-batch.ts rowPromptGroups), and the modules' metrics and the losses stay scalar tensors
// until the step reads them all at its end (./step-metrics.ts).
import type { LoraModel } from '../../model/lora.js';
import {
  type ForwardBackwardOptions,
  type ForwardBackwardResult,
  forwardBackward,
  forwardBackwardSteps,
  type PassSteps,
  type TokenLogProbs,
} from '../../model/training.js';
import type { RowPacking } from '../../model/packed-rows.js';
import type { CausalLM } from '../../model/transformer.js';
import * as torch from '../../torch/index.js';
import type { Optimizer, Tensor } from '../../torch/index.js';
import { type Critic, clippedValueLoss } from '../algorithm/critic.js';
import { createEntropyLossFn } from '../algorithm/entropy.js';
import { createKlFn, type KlFn, klFnNeedsReference } from '../algorithm/kl.js';
import { policyLossAccumulation, policyLossModule } from '../algorithm/policy-loss/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import { expertRows } from '../algorithm/utils.js';
import type { Experience } from '../experience.js';
import { type BatchForwardModels, prepareBatch, prepareBatchSteps } from './batch-forwards.js';
import { EXPERIENCE_SCHEMAS } from '../algorithm/schemas.js';
import { type Shaped, shapeBatch } from './loss-inputs.js';
import { enterEvalMode, RankDropoutStream } from './lora-dropout.js';
import type { MasterWeights } from './master-weights.js';
import {
  BatchCounts,
  checkWholeGroups,
  groupedMicroBatches,
  microBatches,
  microBatchSize,
  microBatchWeights,
  modeTerm,
  termShare,
} from './micro-batches.js';
import { type MicroBatch, microBatchLoss, stepObjective } from './objective.js';
import type { ReferencePolicy } from './reference-policy.js';
import { ROUTER_AUX_LOSS_METRIC, routerAuxLossWeight } from './router-aux.js';
import { checkRouterReplayModel, replayPart, replayRecords } from './router-replay.js';
import {
  type Collective,
  type CollectiveAnswer,
  ONE_PROCESS,
  owns,
  type Shard,
  type StepCollectives,
  type StepProgram,
} from './row-sharding.js';
import { StepMetrics } from './step-metrics.js';
import { batchTensors, microPromptGroups, microRowPacking, rowPromptGroups, type TrainBatch } from './train-batch.js';
import { type MicroBatchRange, microBatchView, tokenBudgetMicroBatches } from './token-budget.js';
import { checkImageRows, type TrainerVision, visionOptions } from './vision-rows.js';

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
  /**
   * Micro-batches by a token budget instead (trainer.use_dynamic_bsz with max_token_len_per_gpu, ./token-budget.ts):
   * the most positions one forward computes; microBatchSize is then not read.
   */
  microBatchTokens?: number | null;
  /** Where the step says what a user should know once (a row group over the token budget); default console.warn. */
  warn?: (message: string) => void;
  /** Max global gradient norm (default algorithm.optimizer.clip_grad). */
  maxGradNorm?: number;
  padTokenId?: number;
  /** LM-head chunk (sequence positions) of forwardBackward. */
  chunkSize?: number;
  /** Activation checkpointing in forwardBackward. */
  checkpoint?: boolean;
  /**
   * trainer.use_remove_padding: every forward (policy, reference, critic) runs its rows packed end to end without pads
   * (../../model/packed-rows.ts); same results as padded (float32 rounding). null: each forward packs when that
   * computes ≤ 0.8 of the padded positions (./train-batch.ts microRowPacking). Absent: padded.
   */
  removePadding?: boolean | null;
  /** Global step of the first run() (CHORD's μ schedule); counts up by one per run(). */
  startStep?: number;
  /** The model's device, where batches are built (default 'cpu'). */
  device?: string;
  /**
   * Mixed precision (./master-weights.ts): `model` computes in low precision, the optimizer holds float32 master
   * weights; gradients move to them after each micro-batch, and the model takes them back after each step.
   */
  masterWeights?: MasterWeights | null;
  /** A vision-language policy (./vision-rows.ts; `model` is its language model): rows with images go through it. */
  vision?: TrainerVision | null;
}

/**
 * Metrics of one step. Always: loss, pg_loss, grad_norm, lr, tokens (response tokens trained), rows, dropped (rows
 * the advantage function dropped). When their modules run: kl (the KL loss before its coefficient), entropy,
 * pg_clipfrac, ppo_kl, critic/vf_loss, critic/vf_clipfrac, critic/grad_norm; module metrics under policy/,
 * advantage/, kl_penalty/.
 */
export type TrainStepMetrics = Record<string, number>;

/** What a train step carries from one step to the next besides weights and optimizers (saved with checkpoints). */
export interface TrainStepState {
  step: number;
  /** The KL loss's and the KL reward penalty's coefficients (the adaptive controller moves them). */
  klLossCoef: number;
  klPenaltyCoef: number;
}

export class TrainStep {
  readonly setup: TrainStepSetup;
  /** Global steps done. */
  step: number;
  readonly #klLoss: KlFn;
  readonly #klPenalty: KlFn;
  readonly #entropy: ReturnType<typeof createEntropyLossFn>;
  readonly #params: Tensor[];
  #lastAdvantages: ReadonlyMap<string, number> = new Map();
  #toldOversized = false;

  constructor(setup: TrainStepSetup) {
    const { algorithm } = setup;
    if (algorithm.routerReplay) checkRouterReplayModel(setup.model.config);
    if (algorithm.useReference && !setup.reference) {
      const users = [
        klFnNeedsReference(algorithm.klLossFn.name) ? `kl_loss_fn '${algorithm.klLossFn.name}'` : null,
        klFnNeedsReference(algorithm.klPenaltyFn.name) ? `kl_penalty_fn '${algorithm.klPenaltyFn.name}'` : null,
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

  /**
   * The last step's advantage per experience id (./loss-inputs.ts rowAdvantages: the mean over its response tokens,
   * before IS weights), for the rows it trained on; rows without advantages (expert, SFT, DPO) are left out.
   */
  get lastAdvantages(): ReadonlyMap<string, number> {
    return this.#lastAdvantages;
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
    const restore = enterEvalMode(this.setup.lora ?? null);
    try {
      const program = this.#program(EXPERIENCE_SCHEMAS[this.setup.algorithm.schema].rows(experiences), metrics, ONE_PROCESS);
      // one process: the sums across ranks are this process's own
      for (let next = program.next(); !next.done; ) next = program.next(answerInOneProcess(next.value));
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
   * same experiences (data parallelism, ./row-sharding.ts). Every rank ends with the same parameters and returns the
   * metrics one process would.
   */
  async runDistributed(experiences: readonly Experience[], collectives: StepCollectives): Promise<TrainStepMetrics> {
    const metrics = new StepMetrics();
    let program: StepProgram | null = null;
    const restore = enterEvalMode(this.setup.lora ?? null);
    try {
      program = this.#program(EXPERIENCE_SCHEMAS[this.setup.algorithm.schema].rows(experiences), metrics, collectives);
      for (let next = program.next(); !next.done; ) {
        const request = next.value;
        let answer: CollectiveAnswer;
        if (request.kind === 'sum') await collectives.sum(request.tensors);
        else if (request.kind === 'gradients') await collectives.sumGradients(request.params);
        else if (request.kind === 'stepped') await collectives.afterOptimizerStep?.(request.params);
        else if (request.kind === 'metrics') answer = await collectives.sumMetrics(request.sums);
        else if (request.kind === 'clip')
          answer = collectives.clipGradNorm
            ? await collectives.clipGradNorm(request.params, request.maxNorm)
            : answerInOneProcess(request);
        else if (request.kind === 'pass') await collectives.passPoint?.(request.point);
        else if (request.kind === 'idlePass') await collectives.idlePass?.(request.backward === false ? { backward: false } : {});
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

  /** The step's metrics as numbers: what stayed on the device is read now, in one transfer. */
  #finish(metrics: StepMetrics): TrainStepMetrics {
    this.step++;
    metrics.set('lr', this.setup.optimizer.lr);
    if (!metrics.has('dropped')) metrics.set('dropped', 0);
    return Object.fromEntries(metrics.read());
  }

  // The step as phases between collectives (./row-sharding.ts; a generator, so that run() drives it synchronously and
  // runDistributed() awaits each collective). Each phase runs in its own scope; tensors a later phase needs are held
  // here and freed when the step ends. `metrics` gets what every rank computes alike; `sums` what each rank sums over its own rows
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
    this.#lastAdvantages = new Map();
    try {
      checkImageRows(rows, this.setup.vision ?? null);
      const models: BatchForwardModels = {
        algorithm,
        model: this.setup.model,
        reference: this.setup.reference ?? null,
        critic: this.setup.critic?.critic ?? null,
        padTokenId: this.setup.padTokenId ?? 0,
        device: this.setup.device ?? 'cpu',
        chunkSize: this.setup.chunkSize,
        removePadding: this.setup.removePadding === undefined ? false : this.setup.removePadding,
        vision: this.setup.vision ?? null,
      };
      // sharded parameters: the forwards over the batch gather the policy a layer at a time (./batch-forwards.ts)
      const prepared = shard.shardsParameters
        ? yield* torch.scopeSteps(passRequests(prepareBatchSteps(rows, shard, models)))
        : torch.scope(() => prepareBatch(rows, shard, models));
      holdBatch(prepared.batch);
      const perRow = [prepared.refLogprob, prepared.current, prepared.entropy, prepared.necs, prepared.oldValues].map(hold);
      yield { kind: 'sum', tensors: perRow.filter((t) => t !== null) };
      const shaped = torch.scope(() => shapeBatch(prepared, metrics, algorithm, this.#klPenalty));
      holdBatch(shaped.batch);
      for (const t of [shaped.oldLogprob, shaped.advantages, shaped.returns, shaped.oldValues, shaped.refLogprob]) hold(t);
      for (const t of [shaped.rolloutMask, shaped.wholeBatchMask, shaped.rowAdvantages]) hold(t);
      const counts = new BatchCounts(shaped.batch, shaped.rolloutMask);
      yield* torch.scopeSteps(this.#policyMicroBatches(shaped, counts, shard, sums));
      if (this.#klLoss.needsReference && shaped.refLogprob !== null) metrics.set('kl_coef', this.#klLoss.klCoef);
      metrics.set('tokens', counts.rows(0, shaped.batch.rows.length).tokens);
      // router replay: the share of rows whose tokens went through the rollout's recorded experts (./router-replay.ts)
      if (algorithm.routerReplay) metrics.set('router_replay/rows', rows.filter((e) => e.routedExperts).length / rows.length);
      metrics.set('rows', shaped.batch.rows.length);
      yield { kind: 'gradients', params: this.#params };
      const maxNorm = this.setup.maxGradNorm ?? algorithm.optimizer.clipGrad;
      const gradNorm = (yield { kind: 'clip', params: this.#params, maxNorm }) as number;
      torch.scope(() => {
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
      const total = (yield { kind: 'metrics', sums: own }) as Map<string, number> | undefined;
      for (const [key, value] of total ?? own) metrics.set(key, value);
      this.#lastAdvantages = rowAdvantagesById(shaped.batch.rows, shaped.rowAdvantages);
    } finally {
      sums.dispose();
      for (const t of held) t.dispose();
    }
  }

  /**
   * The policy's forward/backward over this rank's micro-batches (all of them in one process): gradients accumulate
   * in the parameters' .grad, each micro-batch's loss (./objective.ts) weighted by its share of the whole batch.
   */
  *#policyMicroBatches(shaped: Shaped, counted: BatchCounts, shard: Shard, sums: StepMetrics): StepProgram {
    const { algorithm, model } = this.setup;
    const { batch } = shaped;
    const B = batch.rows.length;
    const { policyLossFn } = algorithm;
    const accumulation = policyLossAccumulation(policyLossFn.name, policyLossFn.args, algorithm.lossAggMode);
    const { plan, ownWidths } = this.#plan(batch, accumulation.rowsPerGroup, policyLossFn.name, shard, sums);
    const whole = counted.rows(0, B);
    const objective = stepObjective(algorithm, { klLoss: this.#klLoss, entropy: this.#entropy }, accumulation, {
      step: this.step,
      rolloutTokens: whole.rolloutTokens,
    });
    // each micro-batch's prompt groups, expert rows and packing, uploaded before the first forward is queued
    const ahead = plan.map(({ start, n }, i) =>
      owns(i, shard)
        ? {
            promptGroups: microPromptGroups(batch, start, n),
            packing: this.#rowPacking(batch, start, n, ownWidths),
            expertRows: expertRows(
              batch.rows.slice(start, start + n).map((e) => e.info.isExpert === true),
              batch.inputIds.device,
            ),
          }
        : null,
    );
    const replay = algorithm.routerReplay ? replayRecords(batch, model.config) : null; // ./router-replay.ts
    // reported even by a rank that runs no micro-batch
    sums.total('loss', 0);
    sums.total('pg_loss', 0);
    const lora = this.setup.lora ?? null;
    lora?.train();
    const stream = RankDropoutStream.of(lora, shard.worldSize, model.isStochastic);
    // this rank's last micro-batch: its backward completes the step's gradients (the ranks may sum them meanwhile)
    const last = plan.reduce((found, _, i) => (owns(i, shard) ? i : found), -1);
    try {
      for (const [i, { start, n }] of plan.entries()) {
        if (!owns(i, shard)) continue;
        if (i === last) shard.beforeLastBackward?.();
        stream?.seek(i);
        const part = (t: Tensor) => t.narrow(0, start, n);
        const prepared = ahead[i] as NonNullable<(typeof ahead)[number]>;
        const view = microBatchView(batch, start, n, ownWidths);
        const micro: MicroBatch = {
          shaped,
          part,
          response: view.response,
          actionMask: part(batch.actionMask),
          expertMask: part(batch.expertMask),
          expertRows: prepared.expertRows,
          weights: microBatchWeights(accumulation, counted.rows(start, n), whole),
        };
        const auxWeight = routerAuxLossWeight(model.config, algorithm.schema, n / B);
        const lossOf = (forward: TokenLogProbs) => microBatchLoss(objective, micro, forward, sums);
        const images = this.setup.vision?.rowImages(batch.rows.slice(start, start + n));
        const options: ForwardBackwardOptions = {
          attentionMask: view.attentionMask,
          promptWidth: view.promptWidth,
          promptGroups: prepared.promptGroups,
          ...(prepared.packing === null ? {} : { packedRows: prepared.packing }),
          entropy: objective.entropy !== null,
          ...(this.setup.chunkSize ? { chunkSize: this.setup.chunkSize } : {}),
          temperature: batch.temperatures.slice(start, start + n),
          ...(this.setup.checkpoint ? { checkpoint: true } : {}),
          ...(lora === null ? {} : { random: lora }),
          ...(auxWeight === undefined ? {} : { routerAuxLoss: auxWeight }),
          ...visionOptions(this.setup.vision?.model ?? null, view.inputIds, view.attentionMask, images, view.promptWidth),
          ...(replay === null
            ? {}
            : {
                replayRouting: replayPart(replay, start, n, batch.promptWidth - view.promptWidth, view.inputIds.size(1)),
              }),
        };
        // sharded parameters: the pass pauses at its layers for the ranks' gathers and reductions (./fsdp-passes.ts)
        const result: ForwardBackwardResult = shard.shardsParameters
          ? yield* torch.scopeSteps(passRequests(forwardBackwardSteps(model, view.inputIds, lossOf, options)))
          : forwardBackward(model, view.inputIds, lossOf, options);
        sums.total('loss', result.loss);
        if (result.routerAuxLoss !== null) sums.add(ROUTER_AUX_LOSS_METRIC, result.routerAuxLoss, n / B);
        this.setup.masterWeights?.accumulateGradients();
        stream?.check(i);
      }
      stream?.end(plan.length);
      if (shard.shardsParameters) {
        // every rank runs as many passes as the rank with the most micro-batches: the others' collectives need it
        const own = plan.filter((_, i) => owns(i, shard)).length;
        for (let k = own; k < Math.ceil(plan.length / shard.worldSize); k++) yield { kind: 'idlePass' };
      }
    } finally {
      lora?.eval();
    }
  }

  /** Rows [start, start + n) packed for their micro-batch's forward (trainer.use_remove_padding), else null. */
  #rowPacking(batch: TrainBatch, start: number, n: number, ownWidths: boolean): RowPacking | null {
    if (!this.setup.removePadding && this.setup.removePadding !== null) return null;
    const view = microBatchView(batch, start, n, ownWidths);
    const widths = { promptWidth: view.promptWidth, length: view.inputIds.size(1) };
    return microRowPacking(batch, start, n, widths, this.setup.removePadding);
  }

  /**
   * The step's micro-batches: by the token budget (each at its own widths; `sums`, when given, gets how many there
   * are and how many hold a row group over the budget), else by microBatchSize rounded up to whole groups of
   * `rowsPerGroup` rows (`lossName` names the policy loss that needs them; null for the critic).
   */
  #plan(
    batch: TrainBatch,
    rowsPerGroup: number,
    lossName: string | null,
    shard: Shard,
    sums: StepMetrics | null,
  ): { plan: MicroBatchRange[]; ownWidths: boolean } {
    const B = batch.rows.length;
    const budget = this.setup.microBatchTokens ?? null;
    if (budget === null) {
      const plan =
        lossName === null
          ? microBatches(B, microBatchSize(this.setup.microBatchSize, B, shard.worldSize))
          : groupedMicroBatches(B, rowsPerGroup, lossName, this.setup.microBatchSize, shard.worldSize);
      return { plan, ownWidths: false };
    }
    if (lossName !== null) checkWholeGroups(B, rowsPerGroup, lossName);
    const { plan, oversized } = tokenBudgetMicroBatches(
      batch.rows,
      rowPromptGroups(batch.rows),
      rowsPerGroup,
      budget,
      this.setup.removePadding === true, // unset: counted padded, the most a micro-batch computes
    );
    if (sums !== null && shard.rank === 0) {
      sums.total('micro_batches', plan.length);
      sums.total('oversized_micro_batches', oversized.length);
    }
    const first = oversized[0];
    if (first !== undefined && !this.#toldOversized) {
      this.#toldOversized = true;
      (this.setup.warn ?? console.warn)(
        `trainer: ${first.n === 1 ? 'a row' : `a group of ${first.n} rows`} computes ${first.tokens} positions, over ` +
          `trainer.max_token_len_per_gpu (${budget}): it is trained as a micro-batch of its own (said once per run; ` +
          'the step metric oversized_micro_batches counts them)',
      );
    }
    return { plan, ownWidths: true };
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
    const { plan, ownWidths } = this.#plan(batch, 1, null, shard, null);
    const packings = plan.map(({ start, n }, i) => (owns(i, shard) ? this.#rowPacking(batch, start, n, ownWidths) : null));
    for (const [i, { start, n }] of plan.entries()) {
      if (!owns(i, shard)) continue;
      torch.scope(() => {
        const part = (t: Tensor) => t.narrow(0, start, n);
        const actionMask = part(batch.actionMask);
        const weight = termShare(modeTerm(mode), counted.rows(start, n), whole);
        const view = microBatchView(batch, start, n, ownWidths);
        const values = view.response(critic.values(view.inputIds, view.attentionMask, packings[i] ?? undefined));
        const { loss, metrics: m } = clippedValueLoss(
          { values, oldValues: part(oldValues), returns: part(returns), actionMask },
          { lossAggMode: mode, ...(setup.cliprangeValue === undefined ? {} : { cliprangeValue: setup.cliprangeValue }) },
        );
        loss.mul(weight).backward();
        for (const [k, v] of Object.entries(m)) sums.add(`critic/${k}`, v, weight);
      });
    }
  }
}

/** eid → the row's advantage, read in one transfer; expert rows (which take none) are left out. */
function rowAdvantagesById(rows: readonly Experience[], means: Tensor | null): Map<string, number> {
  const out = new Map<string, number>();
  if (means === null) return out;
  const values = torch.scope(() => means.to({ dtype: 'float64', device: 'cpu' }).toTypedArray() as Float64Array);
  rows.forEach((row, i) => {
    if (row.info.isExpert !== true) out.set(row.eid, values[i] as number);
  });
  return out;
}

/** A pass's points as the step's requests (sharded parameters). */
function* passRequests<R>(steps: PassSteps<R>): Generator<Collective, R, CollectiveAnswer> {
  for (;;) {
    const next = steps.next();
    if (next.done === true) return next.value;
    yield { kind: 'pass', point: next.value };
  }
}

/** What a request is answered with in one process: the metrics' own sums, the local gradient norm; else nothing. */
function answerInOneProcess(request: Collective): CollectiveAnswer {
  if (request.kind === 'metrics') return request.sums;
  if (request.kind === 'clip') return torch.scope(() => torch.clipGradNorm(request.params, request.maxNorm));
  return undefined;
}
