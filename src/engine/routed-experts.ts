// The routed-experts record of a mixture-of-experts engine (RolloutEngineOptions.recordRoutedExperts; vLLM's
// enable_return_routed_experts), for router replay in training (../rft/trainer/router-replay.ts).
//
// Every token a sequence feeds through the model gets, per sparse layer, the k experts its router chose: the prompt's
// tokens in the prefill that runs it (the n samples of a request share that prefill, so they share its record), then
// each sampled token in the decode step that feeds it. The last sampled token is never fed, so a completion's record
// covers prompt ++ tokenIds but the last token:
//   RoutedExpertIds.ids   int16 [tokens × layers × k], tokens = |prompt| + |tokenIds| − 1
// A recording step reads each sparse layer's [N, k] choices back as the forward routes (the forward's onRouting): a
// small copy next to the expert counts each sparse layer reads back already, only on an engine that records.
import type { ForwardOptions, ModelConfig } from '../model/index.js';
import * as torch from '../torch/index.js';

/** A completion's routed experts (see the header). */
export interface RoutedExpertIds {
  /** The model's sparse layer indices, in the order of ids' middle axis. */
  layers: number[];
  /** Experts per token per layer (num_experts_per_tok). */
  k: number;
  /** [tokens × layers × k] row-major. */
  ids: Int16Array;
}

/** The sparse layers an engine with recordRoutedExperts records (null when off); refused for a dense model. */
export function recordedLayers(config: ModelConfig, record: boolean): number[] | null {
  if (!record) return null;
  if (config.moe === null)
    throw new RangeError(`RolloutEngine: recordRoutedExperts needs a mixture-of-experts model, not ${config.architecture}`);
  return config.moe.sparseLayers.flatMap((isSparse, layer) => (isSparse ? [layer] : []));
}

/**
 * One step's routing, read back layer by layer as the forward routes (its sparse layers read their expert counts back
 * anyway, ../model/moe.ts) and handed to the sequences; `rows(b)` is (start, count) of batch row b's tokens among
 * the step's N tokens.
 */
export class StepRecord {
  readonly #layers: Int16Array[] = []; // per sparse layer [N × k]

  constructor(readonly rows: (b: number) => [number, number]) {}

  /** A prefill's: the n samples of a request share their leader's row r, tokens r·longest .. r·longest + |prompt|. */
  static prefill(rowOf: readonly number[], longest: number, leaders: readonly { request: { promptIds: readonly number[] } }[]) {
    return new StepRecord((b) => {
      const row = rowOf[b] as number;
      return [row * longest, leaders[row]?.request.promptIds.length ?? 0];
    });
  }

  /** forward() options that read each sparse layer's chosen experts [N, k] back (in layer order). */
  hook(): Pick<ForwardOptions, 'onRouting'> {
    return {
      onRouting: (_layer, routing) => {
        this.#layers.push(torch.noGrad(() => routing.experts.to({ dtype: 'int16', device: 'cpu' })).toTypedArray() as Int16Array);
      },
    };
  }

  /** Appends batch row b's tokens, [count × layers × k], to its sequence's record. */
  appendTo(sequence: SequenceRouting | null, b: number): void {
    if (sequence === null || this.#layers.length === 0) return;
    const [start, count] = this.rows(b);
    const k = sequence.k;
    const L = this.#layers.length;
    const out = new Int16Array(count * L * k);
    for (let t = 0; t < count; t++)
      for (const [l, chosen] of this.#layers.entries())
        out.set(chosen.subarray((start + t) * k, (start + t + 1) * k), (t * L + l) * k);
    sequence.append(out);
  }
}

/** A sequence's record, appended to step by step. */
export class SequenceRouting {
  readonly #parts: Int16Array[] = [];

  readonly k: number;

  constructor(
    readonly layers: readonly number[],
    config: ModelConfig,
  ) {
    this.k = config.moe?.numExpertsPerTok ?? 0;
  }

  /** Appends a step's tokens [count × layers × k]. */
  append(ids: Int16Array): void {
    this.#parts.push(ids);
  }

  /** Gives each of `sequences` a record of `layers` (an engine with recordRoutedExperts; layers null: none). */
  static attach(sequences: readonly { routing: SequenceRouting | null }[], layers: number[] | null, config: ModelConfig) {
    for (const seq of layers ? sequences : []) seq.routing = new SequenceRouting(layers ?? [], config);
  }

  /** The record: prompt ++ generated tokens but the last (see the header). */
  result(): RoutedExpertIds {
    const total = this.#parts.reduce((n, p) => n + p.length, 0);
    const ids = new Int16Array(total);
    let at = 0;
    for (const p of this.#parts) {
      ids.set(p, at);
      at += p.length;
    }
    return { layers: [...this.layers], k: this.k, ids };
  }
}
