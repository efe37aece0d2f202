// Router replay in the train step (algorithm.enable_router_replay; R3, "rollout routing replay"): the policy's
// forwards (the old log-probs recomputed without gradient, and each micro-batch's forward/backward) route every token
// that carries a record (Experience.routedExperts, ../routed-experts.ts) through the experts the rollout engine chose
// for it, weighted by the current router's probabilities of them (../../model/moe.ts):
//   chosen = recorded experts,   w = softmax(router logits)[chosen] (norm_topk_prob: w / sum(w))
// so the policy gradient is taken through the experts that produced the sample. Tokens without a record (rows from a
// dataset, the last token of a sequence, padding) route themselves. The reference model routes itself.
//
// The records are laid out as the batch (./train-batch.ts): per sparse layer i a [B, P + R, k] int64 tensor, row b's
// token t at column P − promptLength_b + t, -1 where there is no record.
import type { ModelConfig } from '../../model/config.js';
import * as torch from '../../torch/index.js';
import type { Tensor } from '../../torch/index.js';
import { decodeRoutedExperts } from '../routed-experts.js';
import type { TrainBatch } from './train-batch.js';

/** Refuses enable_router_replay on a model without sparse layers, naming the key and the model. */
export function checkRouterReplayModel(config: ModelConfig): void {
  if (config.moe === null)
    throw new Error(
      `algorithm.enable_router_replay: the policy (${config.architecture}) is a dense model with no router to replay; ` +
        'router replay needs a mixture-of-experts model (qwen2_moe, qwen3_moe), or set it to false',
    );
}

/** Per layer index, the batch's recorded experts [B, P + R, k] (null for dense layers); see the header. */
export function replayRecords(batch: TrainBatch, config: ModelConfig): (Tensor | null)[] {
  checkRouterReplayModel(config);
  const moe = config.moe as NonNullable<ModelConfig['moe']>;
  const sparse = moe.sparseLayers.flatMap((isSparse, layer) => (isSparse ? [layer] : []));
  const k = moe.numExpertsPerTok;
  const B = batch.rows.length;
  const width = batch.promptWidth + batch.responseWidth;
  const perLayer = sparse.map(() => new BigInt64Array(B * width * k).fill(-1n));
  batch.rows.forEach((e, b) => {
    const record = e.routedExperts;
    if (record === undefined) return;
    const where = `train step: experience '${e.eid}' routedExperts`;
    if (record.k !== k || record.layers.join() !== sparse.join())
      throw new Error(
        `${where} was recorded for layers [${record.layers.join(', ')}] top-${record.k}; the policy routes layers ` +
          `[${sparse.join(', ')}] top-${k} (a rollout of another model?)`,
      );
    const ids = decodeRoutedExperts(record);
    const offset = batch.promptWidth - e.promptLength;
    for (let t = 0; t < record.tokens; t++) {
      for (const [l, out] of perLayer.entries()) {
        for (let j = 0; j < k; j++) {
          const id = ids[(t * sparse.length + l) * k + j] as number;
          if (!(id >= 0 && id < moe.numExperts))
            throw new Error(`${where}: token ${t} layer ${sparse[l]} names expert ${id}, outside [0, ${moe.numExperts})`);
          out[((b * width + offset + t) * k + j) as number] = BigInt(id);
        }
      }
    }
  });
  const device = batch.inputIds.device;
  const records: (Tensor | null)[] = moe.sparseLayers.map(() => null);
  sparse.forEach((layer, l) => {
    records[layer] = torch.tensor(perLayer[l] as BigInt64Array, { shape: [B, width, k], device });
  });
  return records;
}

/** The records of rows [start, start + n), columns [from, from + width) (a micro-batch's view). */
export function replayPart(records: readonly (Tensor | null)[], start: number, n: number, from = 0, width?: number) {
  return records.map((t) => {
    if (t === null) return null;
    const rows = t.narrow(0, start, n);
    return width === undefined ? rows : rows.narrow(1, from, width);
  });
}
