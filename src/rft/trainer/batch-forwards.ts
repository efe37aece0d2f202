// The forwards a train step runs over its whole batch before the update, all without gradient: the reference's
// log-probs, the current policy's log-probs (for rows without rollout log-probs, or every row when a module needs
// them: bypass_old_logprobs false, a policy loss's whole-batch mask, an advantage function that reads entropy or
// necs) and the critic's values. On several ranks each computes its own rows (./row-sharding.ts ownRows) and leaves
// zeros in the others', so the sum across ranks is the whole batch's.
//
// prepareBatchSteps is the same as a program that pauses at the layer boundaries of the forwards that read the policy's
// layers (the current policy's, LoRA's reference: the policy with its adapters off): a fully sharded trainer
// (./fsdp-passes.ts) gathers one layer at a time there, for the whole of its rows, and frees it after. A rank with no
// rows of such a forward pauses at the same points without compute (its ranks' gathers need it).
import { noGradSteps, type PassSteps, runPass } from '../../model/training-trunk.js';
import { tokenLogProbsSteps } from '../../model/training.js';
import type { CausalLM } from '../../model/transformer.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { advantageNeedsEntropy, advantageNeedsNecs } from '../algorithm/advantage/index.js';
import type { Critic } from '../algorithm/critic.js';
import { policyLossModule } from '../algorithm/policy-loss/index.js';
import type { ResolvedAlgorithm } from '../algorithm/presets.js';
import type { Experience } from '../experience.js';
import { rowsTakeAdvantages } from '../algorithm/schemas.js';
import type { LogProbOptions, ReferencePolicy } from './reference-policy.js';
import { ownRows, type Shard } from './row-sharding.js';
import { replayPart, replayRecords } from './router-replay.js';
import { type TrainerVision, visionOptions } from './vision-rows.js';
import { buildBatch, microPromptGroups, microRowPacking, type TrainBatch } from './train-batch.js';

/** prepareBatch's result: the batch and its per-row forward results (summed across ranks before ./loss-inputs.ts). */
export interface Prepared {
  batch: TrainBatch;
  refLogprob: Tensor | null;
  current: Tensor | null;
  /** The current policy's entropy and necs, for an advantage function that reads them (clipb, clipv). */
  entropy: Tensor | null;
  necs: Tensor | null;
  oldValues: Tensor | null;
}

/** What prepareBatch computes with. */
export interface BatchForwardModels {
  algorithm: ResolvedAlgorithm;
  /** The policy. */
  model: CausalLM;
  reference: ReferencePolicy | null;
  critic: Critic | null;
  padTokenId: number;
  /** Where the batch is built. */
  device: string;
  /** LM-head chunk (sequence positions), unset for the default. */
  chunkSize?: number | undefined;
  /**
   * trainer.use_remove_padding: the forwards run the rows packed without pads (../../model/packed-rows.ts); null:
   * when that saves a fifth of the positions (./train-batch.ts microRowPacking). Absent: padded.
   */
  removePadding?: boolean | null;
  /** A vision-language policy (./vision-rows.ts): rows with images run through its multimodal inputs. */
  vision?: TrainerVision | null;
}

/** The padded batch of `rows`, and what the whole batch needs from a forward (see the header). */
export function prepareBatch(rows: Experience[], shard: Shard, models: BatchForwardModels): Prepared {
  return runPass(prepareBatchSteps(rows, shard, models));
}

/** A forward-only pass's points without compute (a rank with no rows of it). */
function* idleForward(numLayers: number): PassSteps<void> {
  yield { at: 'start', backward: false };
  for (let layer = 0; layer < numLayers; layer++) {
    yield { at: 'layer', layer, phase: 'forward', edge: 'before' };
    yield { at: 'layer', layer, phase: 'forward', edge: 'after' };
  }
  yield { at: 'end' };
}

/** prepareBatch as a program pausing at the layers of the forwards that read the policy (see the header). */
export function* prepareBatchSteps(rows: Experience[], shard: Shard, models: BatchForwardModels): PassSteps<Prepared> {
  const { algorithm } = models;
  const batch = buildBatch(rows, models.padTokenId, models.device);
  const B = batch.rows.length;
  const responseOf = (perPosition: Tensor) => perPosition.narrow(1, batch.promptWidth - 1, batch.responseWidth);
  const own = ownRows(B, shard);
  // the log-prob options of this rank's rows (their prompt groups uploaded once, when a forward first needs them)
  let ownOptions: LogProbOptions | null = null;
  const logProbOptions = (): LogProbOptions => {
    const widths = { promptWidth: batch.promptWidth, length: batch.promptWidth + batch.responseWidth };
    const packing = ownOptions
      ? null
      : microRowPacking(batch, own.start, own.n, widths, models.removePadding === undefined ? false : models.removePadding);
    ownOptions ??= {
      promptWidth: batch.promptWidth,
      promptGroups: microPromptGroups(batch, own.start, own.n),
      ...(packing === null ? {} : { packedRows: packing }),
      ...(models.chunkSize ? { chunkSize: models.chunkSize } : {}),
      temperature: batch.temperatures.slice(own.start, own.start + own.n),
      images: models.vision?.rowImages(batch.rows.slice(own.start, own.start + own.n)) ?? null,
    };
    return ownOptions;
  };
  // a forward over rows: a pass program over the policy's layers (an idle rank pauses there too when sharded), or a
  // model of its own computed at once (a frozen reference, the critic)
  type RowsForward = (inputIds: Tensor, attentionMask: Tensor, options: LogProbOptions) => PassSteps<Tensor[]> | Tensor[];
  function* perRows(count: number, compute: RowsForward, policyPass = false): PassSteps<Tensor[]> {
    function* run(...args: Parameters<RowsForward>): PassSteps<Tensor[]> {
      const out = compute(...args);
      return Array.isArray(out) ? out : yield* out;
    }
    if (shard.worldSize === 1) return (yield* run(batch.inputIds, batch.attentionMask, logProbOptions())).map(responseOf);
    const outs = Array.from({ length: count }, () => torch.zeros([B, batch.responseWidth], { device: batch.actionMask.device }));
    const part = (t: Tensor) => t.narrow(0, own.start, own.n);
    if (own.n > 0) {
      const results = yield* run(part(batch.inputIds), part(batch.attentionMask), logProbOptions());
      for (const [i, t] of results.entries()) part(outs[i] as Tensor).copy_(responseOf(t));
    } else if (policyPass && shard.shardsParameters === true) yield* idleForward(models.model.config.numHiddenLayers);
    return outs;
  }
  const perRow = (compute: (inputIds: Tensor, attentionMask: Tensor, options: LogProbOptions) => Tensor) =>
    perRows(1, (...args) => [compute(...args)]);
  const reference = models.reference;
  const referenceSteps = reference?.logProbsSteps;
  let refLogprob: Tensor | null = null;
  if (algorithm.useReference && reference !== null)
    [refLogprob] = (yield* referenceSteps
      ? perRows(
          1,
          function* (ids, mask, options) {
            return [yield* torch.scopeSteps(referenceSteps(ids, mask, options))];
          },
          true,
        )
      : perRow((ids, mask, options) => reference.logProbs(ids, mask, options))) as [Tensor];
  // rows without rollout log-probs (SFT/expert data, or an explorer that did not record them): the current policy;
  // every row when the old log-probs are recomputed (bypass_old_logprobs: false) or a module reads the current
  // policy over the whole batch (a policy loss's wholeBatchMask, an advantage function's entropy and necs), all from
  // one pass
  const needsEntropy = algorithm.advantageFn !== null && advantageNeedsEntropy(algorithm.advantageFn.name);
  const needsNecs = algorithm.advantageFn !== null && advantageNeedsNecs(algorithm.advantageFn.name);
  const fields: ('logProbs' | 'entropy' | 'necs')[] = ['logProbs'];
  if (needsEntropy) fields.push('entropy');
  if (needsNecs) fields.push('necs');
  const outputs = !readsCurrentPolicy(batch.rows, algorithm)
    ? []
    : yield* perRows(
        fields.length,
        function* (ids, mask, options) {
          // router replay: the policy's forward routes the recorded tokens through the rollout's experts
          const replay = algorithm.routerReplay
            ? { replayRouting: replayPart(replayRecords(batch, models.model.config), own.start, own.n) }
            : {};
          const all = {
            ...options,
            ...replay,
            attentionMask: mask,
            entropy: needsEntropy,
            necs: needsNecs,
            ...visionOptions(models.vision?.model ?? null, ids, mask, options.images, options.promptWidth),
          };
          const out = yield* torch.scopeSteps(noGradSteps(tokenLogProbsSteps(models.model, ids, all)));
          return fields.map((field) => out[field] as Tensor);
        },
        true,
      );
  const output = (field: (typeof fields)[number]): Tensor | null => outputs[fields.indexOf(field)] ?? null;
  const current = output('logProbs');
  const entropy = output('entropy');
  const necs = output('necs');
  const critic = models.critic;
  const oldValues =
    rowsTakeAdvantages(algorithm) && algorithm.useCritic && critic !== null
      ? ((yield* perRow((ids, mask, options) => torch.noGrad(() => critic.values(ids, mask, options.packedRows))))[0] ?? null)
      : null;
  return { batch, refLogprob, current, entropy, necs, oldValues };
}

/**
 * Whether prepareBatch runs the current policy over `rows`: some row has no rollout log-probs, or a module needs the
 * current policy over the whole batch (see prepareBatch).
 */
export function readsCurrentPolicy(rows: readonly Experience[], algorithm: ResolvedAlgorithm): boolean {
  const wholeBatch =
    !algorithm.bypassOldLogprobs ||
    policyLossModule(algorithm.policyLossFn.name).wholeBatchMask !== undefined ||
    (algorithm.advantageFn !== null &&
      (advantageNeedsEntropy(algorithm.advantageFn.name) || advantageNeedsNecs(algorithm.advantageFn.name)));
  return wholeBatch || !rows.every((e) => e.logprobs !== undefined);
}
